"""The benchmark scripts still run end to end (tiny sizes, CPU) and print the figures their docs promise. Nothing is
timed here: speed claims come from running the scripts themselves at full size."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--device", "cpu", "--batch", "2", "--mu", "1"]


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_train_step_prints_every_pipeline_against_both_references():
    out = _run("train_step.py", *TINY, "--steps", "1", "--rounds", "1", "--images", "256",
               "--pipelines", "ours,ours_deterministic")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 4  # reference, reference + allocator, ours, ours + deterministic
    assert all(re.search(r"\| \d+\.\d\dx \| \d+\.\d\dx \|$", r) for r in rows), rows
    assert re.search(r"speed-up of our fastest step \(ours(_deterministic)?\): \d+\.\d\dx", out)


@pytest.mark.slow
def test_step_memory_reports_each_setup_and_precision():
    out = _run("step_memory.py", *TINY, "--setups", "cnn13@32", "--precision", "fp32,bf16", "--scale-to", "4")
    saved = {}
    for precision in ("fp32", "bf16"):
        m = re.search(rf"\| cnn13@32 \| {precision} \| (\d+\.\d\d) \| (\d+\.\d) \| \(CPU\) \| \(CPU\) \|", out)
        assert m, out
        saved[precision] = float(m.group(1))
        assert float(m.group(2)) == pytest.approx(saved[precision] * 2, abs=0.06)  # B=2 scaled to 4
    assert 0 < saved["bf16"] < saved["fp32"]  # autocast saves half-width activations


def test_step_memory_rejects_a_malformed_setup():
    proc = subprocess.run([sys.executable, str(BENCH / "step_memory.py"), "--setups", "wrn28_8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "'wrn28_8' is not backbone@image_size" in proc.stderr


@pytest.mark.slow
def test_gpu_share_compares_shared_with_alone():
    out = _run("gpu_share.py", *TINY, "--steps", "2", "--processes", "2")
    alone = float(re.search(r"one process alone: +([\d.]+) images/s", out).group(1))
    shared = float(re.search(r"2 processes sharing it: +([\d.]+) images/s in total", out).group(1))
    ratio = float(re.search(r"ratio shared / alone: ([\d.]+)x", out).group(1))
    assert alone > 0 and shared > 0
    assert ratio == pytest.approx(shared / alone, abs=0.01)


def test_conv_floor_finds_every_convolution_of_the_backbone():
    out = _run("conv_floor.py", "--device", "cpu", "--batch", "1", "--mu", "0", "--repeats", "1")
    rows = [line for line in out.splitlines() if line.startswith("| [")]
    # WRN-28-2: the stem, 3 groups of 4 blocks x 2 convs, and 3 shortcut 1x1 convs = 28 convolutions
    assert sum(int(r.split("|")[4]) for r in rows) == 28, out
    assert re.search(r"convolutions of one step, forward \+ backward, faster layout per shape: \d+\.\d\d s", out)
