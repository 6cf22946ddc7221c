"""keep_freed_memory: a freed large block stays in the process (no munmap, no heap trim), so the next step's
allocation of the same size page-faults nothing. Checked in fresh processes: the setting is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_PROBE = textwrap.dedent("""
    import sys, torch
    from mutexmatch.training.allocator import keep_freed_memory
    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    before = rss_mb()
    x = torch.ones(64 * 2**20)  # 256 MB, touched
    del x
    print(rss_mb() - before)
""")


def _rss_kept_mb(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt; elsewhere the call is a no-op")
def test_freed_block_stays_resident_only_when_asked():
    assert _rss_kept_mb("default") < 64   # glibc gives the 256 MB block back at free
    assert _rss_kept_mb("keep") > 200     # kept in the heap for the next step


def test_trainer_applies_it_on_cpu_only_when_configured(tmp_path, monkeypatch):
    import mutexmatch.training.device as device
    from mutexmatch.config import parse_config
    from mutexmatch.training import Trainer

    calls = []
    monkeypatch.setattr(device, "keep_freed_memory", lambda: calls.append(1) or True)
    for keep, expected in ((True, 1), (False, 0)):
        calls.clear()
        cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20}, "model": {"backbone": "small_cnn"},
                            "algorithm": {"name": "supervised"},
                            "train": {"device": "cpu", "progress": False, "keep_freed_memory": keep},
                            "output_dir": str(tmp_path / f"run{keep}")})
        Trainer(cfg)
        assert len(calls) == expected
