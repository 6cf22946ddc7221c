"""Atomic, checksummed checkpoints, and finding the newest good one.

A checkpoint ``ckpt_<step>.pt`` (file names: :mod:`mutexmatch.training.runfolder`) is written to a temporary file in the
same folder, flushed to disk and renamed into place, then its sha256 is written beside it (``ckpt_<step>.pt.sha256``,
also atomically). A checkpoint whose checksum is missing or wrong, or which fails to load, is skipped with a warning
and the previous one is used; a run folder that has checkpoint files but no loadable one raises instead of silently
restarting from scratch.
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from mutexmatch.atomic import atomic_write
from mutexmatch.checksum import sha256_file
from mutexmatch.training.runfolder import checkpoint_name, checkpoint_pair, checkpoint_step, checksum_path

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "list_checkpoints",
           "CheckpointError", "prune_checkpoints"]

class CheckpointError(RuntimeError):
    pass


def save_checkpoint(state: dict[str, Any], directory: Path, step: int) -> Path:
    """Write ``state`` as ``directory/ckpt_<step>.pt`` atomically with its checksum; return the path."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    path, sidecar = checkpoint_pair(Path(directory) / checkpoint_name(step))
    atomic_write(path, data)
    atomic_write(sidecar, hashlib.sha256(data).hexdigest().encode())
    return path


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint after verifying its checksum (``weights_only=True``); raise CheckpointError if bad."""
    path = Path(path)
    sidecar = checksum_path(path)
    if not sidecar.is_file():
        raise CheckpointError(f"{path}: checksum file {sidecar.name} is missing (write interrupted?)")
    expected = sidecar.read_text().strip()
    actual = sha256_file(path)
    if actual != expected:
        raise CheckpointError(f"{path}: checksum mismatch (file truncated or corrupted)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # a file that hashes right but does not unpickle is still unusable
        raise CheckpointError(f"{path}: cannot be loaded: {_load_failure(e)}") from None


def _load_failure(err: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in a few words. Never torch's own advice to retry
    with ``weights_only=False``: for a file that names code, that advice is how the code would run."""
    text = " ".join(str(err).split())
    found = re.search(r"unsupported GLOBAL (\S+)", text)
    if found:
        return (f"it refers to code ({found.group(1)}), which no checkpoint of ours holds; refused without running "
                "it (a file from an untrusted source?)")
    if "Weights only load failed" in text:
        return "it holds objects a checkpoint never holds; refused without loading them"
    return text[:200]


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(step, p) for p in directory.iterdir() if (step := checkpoint_step(p.name)) is not None]
    return sorted(found)


def latest_checkpoint(directory: Path, map_location: str | torch.device = "cpu") -> tuple[Path, dict] | None:
    """The newest checkpoint that verifies and loads, warning about each newer one skipped.

    Returns None when the folder holds no checkpoint at all; raises CheckpointError when it holds checkpoints
    but none of them is usable (a resume must never silently restart from scratch).
    """
    ckpts = list_checkpoints(directory)
    problems = []
    for _, path in reversed(ckpts):
        try:
            state = load_checkpoint(path, map_location)
        except CheckpointError as e:
            problems.append(str(e))
            continue
        for problem in problems:  # said only when an older checkpoint is used instead: then the skip is news
            warnings.warn(f"skipped unusable checkpoint: {problem}; resuming from {path.name}", RuntimeWarning,
                          stacklevel=2)
        return path, state
    if ckpts:
        more = f" (and {len(problems) - 1} older one(s), none usable)" if len(problems) > 1 else ""
        raise CheckpointError(f"no usable checkpoint in {directory}: {problems[0]}{more}; the run cannot continue: "
                              "start it again with --overwrite")
    return None


def prune_checkpoints(directory: Path, keep: int) -> None:
    for _, path in list_checkpoints(directory)[:-keep]:
        for f in checkpoint_pair(path):
            f.unlink(missing_ok=True)
