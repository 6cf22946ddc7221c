"""The sha256 of a file's bytes: what a checkpoint's and a dataset cache's checksum file beside it holds.

Shared by the trainer's checkpoints (:mod:`mutexmatch.training.checkpoint`) and the dataset caches
(:mod:`mutexmatch.data`), so neither package imports the other for it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["sha256_file"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
