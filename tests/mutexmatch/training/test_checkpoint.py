"""Atomic checkpoints: checksum verified, corrupted/truncated ones skipped with a warning, never a silent restart."""

from __future__ import annotations

import pytest
import torch

from mutexmatch.training.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                   prune_checkpoints, save_checkpoint)


def _state(v: float) -> dict:
    return {"step": int(v), "w": torch.full((3,), v), "nested": {"t": (1, 2, None)}}


def test_roundtrip_and_sidecar(tmp_path):
    path = save_checkpoint(_state(4), tmp_path, 4)
    assert path.name == "ckpt_00000004.pt"
    assert path.with_name(path.name + ".sha256").is_file()
    got = load_checkpoint(path)
    assert torch.equal(got["w"], torch.full((3,), 4.0))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_truncated_checkpoint_falls_back_to_previous(tmp_path):
    save_checkpoint(_state(1), tmp_path, 1)
    p2 = save_checkpoint(_state(2), tmp_path, 2)
    p2.write_bytes(p2.read_bytes()[:50])  # a crash mid-copy
    with pytest.warns(RuntimeWarning, match="checksum mismatch"):
        path, state = latest_checkpoint(tmp_path)
    assert state["step"] == 1 and path.name == "ckpt_00000001.pt"


def test_missing_checksum_is_unusable(tmp_path):
    save_checkpoint(_state(1), tmp_path, 1)
    p2 = save_checkpoint(_state(2), tmp_path, 2)
    p2.with_name(p2.name + ".sha256").unlink()
    with pytest.warns(RuntimeWarning, match="checksum file"):
        _, state = latest_checkpoint(tmp_path)
    assert state["step"] == 1


def test_all_corrupted_raises_one_line_instead_of_restarting(tmp_path, recwarn):
    for step in (1, 2):
        save_checkpoint(_state(step), tmp_path, step).write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as err:
        latest_checkpoint(tmp_path)
    assert str(err.value) == (f"no usable checkpoint in {tmp_path}: {tmp_path / 'ckpt_00000002.pt'}: checksum mismatch "
                              "(file truncated or corrupted) (and 1 older one(s), none usable); the run cannot "
                              "continue: start it again with --overwrite")
    assert not recwarn.list  # issue 26: a warning per checkpoint, then the error repeating them, was 5 lines


def test_empty_folder_means_no_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    import argparse  # any class outside torch's allow-list stands for an arbitrary pickled object

    p = save_checkpoint({"x": argparse.Namespace(a=1)}, tmp_path, 1)
    with pytest.raises(CheckpointError, match="cannot be loaded: it holds objects a checkpoint never holds") as err:
        load_checkpoint(p)
    assert "weights_only=False" not in str(err.value) and "\n" not in str(err.value)  # never torch's advice


def test_a_checkpoint_that_runs_code_is_refused_without_running_it(tmp_path):
    import hashlib
    import os

    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    p = save_checkpoint({"x": Payload()}, tmp_path, 1)  # with a matching checksum: only weights_only stands guard
    assert p.with_name(p.name + ".sha256").read_text() == hashlib.sha256(p.read_bytes()).hexdigest()
    with pytest.raises(CheckpointError) as err:
        latest_checkpoint(tmp_path)
    assert "refers to code (posix.system)" in str(err.value) and "weights_only=False" not in str(err.value)
    assert not marker.exists()


def test_prune_keeps_newest(tmp_path):
    for s in (1, 2, 3, 4):
        save_checkpoint(_state(s), tmp_path, s)
    prune_checkpoints(tmp_path, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    assert len(list(tmp_path.glob("*.sha256"))) == 2
