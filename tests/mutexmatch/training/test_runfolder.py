"""The run folder: file names, the checkpoint + checksum pair, the tolerant metrics log, snapshots a restarted trial
continues from, the emptiness rule of a fresh run and the lock."""

from __future__ import annotations

import json
import os

import pytest

from mutexmatch.training.checkpoint import latest_checkpoint, save_checkpoint
from mutexmatch.training.runfolder import (RunFolder, RunFolderLocked, checkpoint_name, checkpoint_pair,
                                           checkpoint_step, checksum_path)


def test_checkpoint_names_and_their_checksum_pair(tmp_path):
    run = RunFolder(tmp_path / "r")
    path = save_checkpoint({"step": 12}, run.checkpoints, 12)
    assert path == run.checkpoint(12) and path.name == checkpoint_name(12) == "ckpt_00000012.pt"
    assert checkpoint_step(path.name) == 12 and checkpoint_step("ckpt_12.pt.sha256") is None
    assert checkpoint_pair(path) == (path, checksum_path(path)) and checksum_path(path).is_file()
    assert sorted(p.name for p in run.checkpoints.iterdir()) == [path.name, path.name + ".sha256"]


def test_metrics_log_skips_unreadable_lines_and_keeps_up_to_a_step(tmp_path):
    run = RunFolder(tmp_path)
    for step in (2, 4, 6):
        run.append_metrics(step, {"test/acc": step / 10})
    with open(run.metrics, "a") as f:
        f.write('{"step": 8, "test/a')  # a kill during the append
    with pytest.warns(RuntimeWarning, match=r"metrics.jsonl:4: not a metrics line"):
        assert [r["step"] for r in run.read_metrics()] == [2, 4, 6]
    with pytest.warns(RuntimeWarning):
        run.keep_metrics_until(4)
    assert [json.loads(x) for x in run.metrics.read_text().splitlines()] == [
        {"step": 2, "test/acc": 0.2}, {"step": 4, "test/acc": 0.4}]


def test_snapshot_holds_the_checkpoint_pair_and_run_files_and_restores(tmp_path):
    run = RunFolder(tmp_path / "run")
    for f in (run.config, run.split, run.marker, run.dataset, run.best_weights, run.final_weights):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f.name)
    run.append_metrics(2, {"a": 1.0})
    old = save_checkpoint({"step": 2}, run.checkpoints, 2)
    ckpt = save_checkpoint({"step": 4}, run.checkpoints, 4)
    snap = run.snapshot(tmp_path / "snap", ckpt)
    run.append_metrics(4, {"a": 2.0})  # appended in place after the snapshot: the snapshot keeps its copy
    assert len(snap.joinpath("metrics.jsonl").read_text().splitlines()) == 1
    names = {str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()}
    assert names == {"config.yaml", "split.json", "run.json", "dataset.json", "best_model.pt", "metrics.jsonl",
                     f"checkpoints/{ckpt.name}", f"checkpoints/{ckpt.name}.sha256"}  # not the final weights
    (snap / "orchestration.json").write_text("{}")  # a file the snapshot's owner added
    again = RunFolder(tmp_path / "elsewhere")
    again.restore(snap)
    assert not (again.path / "orchestration.json").exists() and again.is_run()
    assert latest_checkpoint(again.checkpoints)[0] == again.checkpoint(4) and old.name not in os.listdir(
        again.checkpoints)


def test_a_fresh_run_needs_an_empty_folder_and_overwrite_removes_only_run_files(tmp_path):
    run = RunFolder(tmp_path / "run")
    assert run.is_empty()  # missing
    run.lock()
    assert run.is_empty()  # the lock file does not count
    run.append_metrics(2, {})
    save_checkpoint({"step": 2}, run.checkpoints, 2)
    for name in ("config.yaml", "run.json", ".run.json.x1y2.tmp", "checkpoints/.ckpt_00000004.pt.a_b.tmp"):
        (run.path / name).write_text("{}")  # what a run writes, and what an interrupted atomic write leaves
    with pytest.raises(FileExistsError, match="is not empty; continue its run with `--resume"):
        run.require_empty(overwrite=False)
    assert run.foreign_entries() == []
    run.require_empty(overwrite=True)
    assert sorted(p.name for p in run.path.iterdir()) == [".lock", ".run.json.x1y2.tmp"]
    run.unlock()


@pytest.mark.parametrize("planted, names", [
    ({"mine.txt": "keep"}, "mine.txt"),
    ({"checkpoints/model_v1.bin": "weights"}, "checkpoints/model_v1.bin"),   # issue 26: a whole checkpoints/ went
    ({"checkpoints": "a file"}, "checkpoints"),
])
def test_overwrite_refuses_a_folder_holding_what_no_run_writes(tmp_path, planted, names):
    run = RunFolder(tmp_path / "run")
    for name in ("config.yaml", "run.json"):
        (run.path / name).parent.mkdir(parents=True, exist_ok=True)
        (run.path / name).write_text("{}")
    for name, text in planted.items():
        (run.path / name).parent.mkdir(parents=True, exist_ok=True)
        (run.path / name).write_text(text)
    before = sorted(p.relative_to(run.path) for p in run.path.rglob("*"))
    with pytest.raises(FileExistsError) as err:
        run.require_empty(overwrite=True)
    assert str(err.value).startswith(f"output_dir={str(run.path)!r} holds what no run writes ({names}); "
                                     "--overwrite deletes only a run's own files")
    assert sorted(p.relative_to(run.path) for p in run.path.rglob("*")) == before


def test_overwrite_refuses_a_users_config_without_a_run_marker(tmp_path):
    # Issue 26: --overwrite replaced the config.yaml of a folder that was not a run.
    (tmp_path / "config.yaml").write_text("mine: 1\n")
    with pytest.raises(FileExistsError, match=r"holds run file names \(config.yaml\) but no run.json: not a run"):
        RunFolder(tmp_path).require_empty(overwrite=True)
    assert (tmp_path / "config.yaml").read_text() == "mine: 1\n"


@pytest.mark.parametrize("overwrite", [False, True])
def test_the_filesystem_root_is_never_offered_overwrite_or_resume(overwrite):
    with pytest.raises(FileExistsError) as err:
        RunFolder("/").check_fresh(overwrite)
    message = str(err.value)
    assert message.startswith("output_dir='/' holds what no run writes (") and "\n" not in message
    assert "--resume" not in message and "pass --overwrite" not in message, message


def test_lock_is_exclusive_and_released(tmp_path):
    a, b = RunFolder(tmp_path), RunFolder(tmp_path)
    assert not a.in_use()  # no lock file yet
    a.lock()
    a.lock()  # already held: no-op
    assert a.in_use() and b.in_use()
    with pytest.raises(RunFolderLocked, match=f"in use by another trainer \\(pid {os.getpid()}\\)"):
        b.lock()
    a.unlock()
    assert not b.in_use()
    b.lock()
    b.unlock()
