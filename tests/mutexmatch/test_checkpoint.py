"""Atomic checkpoints: checksum verified, corrupted/truncated ones skipped with a warning, never a silent restart."""

from __future__ import annotations

import pytest
import torch

from mutexmatch.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
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


def test_all_corrupted_raises_instead_of_restarting(tmp_path):
    p = save_checkpoint(_state(1), tmp_path, 1)
    p.write_bytes(b"garbage")
    with pytest.warns(RuntimeWarning), pytest.raises(CheckpointError, match="no usable checkpoint"):
        latest_checkpoint(tmp_path)


def test_empty_folder_means_no_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    import argparse  # any class outside torch's allow-list stands for an arbitrary pickled object

    p = save_checkpoint({"x": argparse.Namespace(a=1)}, tmp_path, 1)
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        load_checkpoint(p)


def test_prune_keeps_newest(tmp_path):
    for s in (1, 2, 3, 4):
        save_checkpoint(_state(s), tmp_path, s)
    prune_checkpoints(tmp_path, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    assert len(list(tmp_path.glob("*.sha256"))) == 2
