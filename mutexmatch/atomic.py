"""One atomic file write for every file the project writes (checkpoints, dataset caches, split.json, run files):
readers see the old file or the complete new one, never a partial one. Standard library only."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write"]


def atomic_write(path: str | Path, data: bytes | Callable[[IO[bytes]], Any], *, mode: int | None = None) -> None:
    """Write ``path`` so that readers see the old file or the complete new one, never a partial one.

    ``data`` is the bytes, or a function that writes them to the open binary file (``torch.save`` streams large
    payloads without a copy in memory). A temporary file beside ``path`` is written, fsynced and renamed over it
    (``os.replace`` is atomic within a file system); on any error it is removed, and an ``OSError`` without a file
    name (a full disk's write) gets ``path`` as its file name. ``mode`` sets the permissions:
    the temporary file is created 0600, which suits checkpoints; shared caches pass ``0o644``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is not None:
            raise
        # a failed write or fsync names no file ("[Errno 28] No space left on device"): name the one being written
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
