"""The decoded-dataset cache: ``<dataset dir>/.mutexmatch_cache/<split>_<size>px.pt`` with its sha256 beside it.

Later loads check that sha256 (about 0.5 s per GB on one core: a flipped bit in a cached image is decoded again with
a warning, never trained on) and memory-map the file (``torch.load(..., weights_only=True, mmap=True)``), so several
processes on one machine share one copy in the page cache. The cache is written to a temporary file and moved into
place with ``os.replace``, so concurrent trials that decode at the same time never see a half-written file. Delete
the ``.mutexmatch_cache`` folder to force a re-decode.

A cache decoded from editable side files (mini-ImageNet's split CSVs, STL-10's ``fold_indices.txt``, Tiny-ImageNet's
``val_annotations.txt``: ``BuiltinDataset.cache_sources``) records their digest, and is decoded again once they
change (finding #19: an edited CSV was answered from the old cache, reported "current").
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from mutexmatch.atomic import atomic_write
from mutexmatch.checksum import sha256_file
from mutexmatch.data.imagefiles import regular_file
from mutexmatch.data.images import ImageData

CACHE_DIRNAME = ".mutexmatch_cache"
# Bump when the meaning of cached tensors changes (e.g. a different resize), so stale caches are re-decoded.
_CACHE_FORMAT = 1
# Beside every cache file: the sha256 of its bytes, checked on load (torch.load does not notice a flipped pixel).
CHECKSUM_SUFFIX = ".sha256"


def cache_path(ddir: Path, split: str, size: int) -> Path:
    return ddir / CACHE_DIRNAME / f"{split}_{size}px.pt"


def cached(path: Path, decode: Callable[[], dict], check: Callable[[dict], None], sources: Sequence[Path] = ()
           ) -> dict:
    """Return the payload cached at ``path``, or decode it, cache it and return it.

    A cache that cannot be read, differs from the checksum written beside it or fails ``check`` is re-decoded
    (with a warning) instead of failing the run; so is one decoded from other versions of the side files
    ``sources`` (their :func:`source_digest` differs). A cache that cannot be written (read-only data root) only
    costs a warning.
    """
    digest = source_digest(sources)
    if path.is_file():
        try:
            verify_checksum(path)
            payload = torch.load(path, weights_only=True, mmap=True)
            if not isinstance(payload, dict) or payload.get("format") != _CACHE_FORMAT:
                raise ValueError(f"not a format-{_CACHE_FORMAT} dataset cache")
            check(payload)
            if not stale(payload, digest):
                return payload
            why = "changed since it was decoded" if "source" in payload else "not recorded in it (an older cache)"
            warnings.warn(f"dataset cache {path}: {', '.join(s.name for s in sources)} {why}; decoding the raw "
                          "files again", stacklevel=3)
        except (RuntimeError, OSError, ValueError, EOFError, pickle.UnpicklingError) as err:
            warnings.warn(f"ignoring unreadable dataset cache {path} ({err}); decoding the raw files again",
                          stacklevel=3)
    payload = {"format": _CACHE_FORMAT, **decode()}
    check(payload)
    if digest is not None:
        payload["source"] = digest
    try:
        _atomic_save(payload, path)
    except OSError as err:
        warnings.warn(f"could not write dataset cache {path} ({err}); the next load will decode again",
                      stacklevel=3)
    return payload


def source_digest(sources: Sequence[Path]) -> str | None:
    """The sha256 of the names and bytes of the side files a cache is decoded from; None without any, or when one
    is missing or not a regular file (a load from the cache alone, the raw files gone, cannot tell)."""
    if not sources or not all(p.is_file() for p in sources):  # a pipe is not a file: its reader refuses it
        return None
    h = hashlib.sha256()
    for p in sources:
        h.update(f"{p.name}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()


def stale(payload: dict, digest: str | None) -> bool:
    """Whether a cache's payload was decoded from side files other than those whose :func:`source_digest` is
    ``digest`` (None: none to compare)."""
    return digest is not None and payload.get("source") != digest


def _atomic_save(payload: dict, path: Path) -> None:
    # 0644: the cache is meant to be shared by every user of the data. The checksum is written after the cache, so a
    # kill in between leaves a cache without one, which the next load decodes again.
    atomic_write(path, lambda f: torch.save(payload, f), mode=0o644)
    atomic_write(checksum_path(path), sha256_file(path).encode(), mode=0o644)


def checksum_path(cache: Path) -> Path:
    """The file beside a cache holding the sha256 of its bytes (hex, as beside a checkpoint)."""
    return cache.with_name(cache.name + CHECKSUM_SUFFIX)


def verify_checksum(cache: Path) -> None:
    """Raise ``ValueError`` unless the cache's bytes still have the sha256 recorded beside it (bit-rot, a partial
    copy or an edit change it; a cache without one predates the checksums or lost its writer mid-way)."""
    side = regular_file(checksum_path(cache), "dataset cache", ValueError)  # a pipe there would block the read
    try:
        recorded = side.read_text().split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        raise ValueError(f"no readable checksum {side.name} beside it") from None
    actual = sha256_file(cache)
    if actual != recorded:
        raise ValueError(f"its sha256 {actual[:16]}... differs from the {recorded[:16]}... recorded in {side.name}: "
                         "the file changed on disk")


def check_images(payload: dict) -> None:
    ImageData(payload["x"], payload["y"])  # raises ValueError on wrong dtype/shape


def cached_images(path: Path, decode: Callable[[], ImageData], sources: Sequence[Path] = ()) -> ImageData:
    def as_payload() -> dict:
        data = decode()
        return {"x": data.x, "y": data.y}

    payload = cached(path, as_payload, check_images, sources)
    return ImageData(payload["x"], payload["y"])
