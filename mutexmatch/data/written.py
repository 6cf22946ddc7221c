"""The files a tool wrote into a folder, recorded in a manifest beside them, so that the tool later rewrites or
removes only those and never a file someone else put there (fake data over real CIFAR files, an export's
``--overwrite`` over a user's notes: adversarial findings #13 and #14).

The manifest ``<folder>/.mutexmatch_<tool>.json`` maps each file's path (relative, ``/``-separated) to its size and
modification time when the tool finished writing; a file that is not listed, or whose size or time changed since
(edited by hand), is *foreign*.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from mutexmatch.atomic import atomic_write

__all__ = ["manifest_path", "has_manifest", "record_written", "foreign_files", "remove_written", "shown"]


def manifest_path(folder: Path, tool: str) -> Path:
    return folder / f".mutexmatch_{tool}.json"


def _entries(folder: Path, tool: str, skip: Iterable[str]) -> dict[str, list[int]]:
    """Every file (and link) below ``folder`` except the manifest and the top-level names in ``skip``: relative
    path -> [size, mtime_ns] (of the link itself: links are never followed)."""
    skipped = {manifest_path(folder, tool).name, *skip}
    out: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        top = Path(dirpath) == folder
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d not in links and not (top and d in skipped))
        for name in [*filenames, *links]:
            if top and name in skipped:
                continue
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[Path(os.path.relpath(path, folder)).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def _recorded(folder: Path, tool: str) -> dict[str, list[int]]:
    try:
        data = json.loads(manifest_path(folder, tool).read_text())
    except (OSError, ValueError):  # no manifest, or one that is not ours: nothing counts as written by the tool
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def has_manifest(folder: Path, tool: str) -> bool:
    return bool(_recorded(folder, tool))


def record_written(folder: Path, tool: str, skip: Iterable[str] = ()) -> None:
    """Record every file now below ``folder`` (but ``skip``) as written by ``tool``; call it once the tool has
    checked with :func:`foreign_files` that nothing else is there."""
    atomic_write(manifest_path(folder, tool),
                 json.dumps({"tool": tool, "files": _entries(folder, tool, skip)}, indent=0).encode(), mode=0o644)


def foreign_files(folder: Path, tool: str, skip: Iterable[str] = ()) -> list[str]:
    """Files below ``folder`` (but ``skip``) that ``tool`` did not write or that changed since, sorted; [] when the
    folder does not exist."""
    if not folder.is_dir():
        return []
    recorded = _recorded(folder, tool)
    return sorted(rel for rel, stat in _entries(folder, tool, skip).items() if recorded.get(rel) != stat)


def remove_written(folder: Path, tool: str) -> None:
    """Delete the files ``tool`` recorded (unchanged since), the folders that leaves empty, and the manifest."""
    current = _entries(folder, tool, ())
    for rel, stat in _recorded(folder, tool).items():
        if current.get(rel) == stat:
            (folder / rel).unlink()
    for dirpath, _, _ in sorted(os.walk(folder), key=lambda w: -len(w[0])):  # deepest first
        if Path(dirpath) != folder and not os.listdir(dirpath):
            os.rmdir(dirpath)
    manifest_path(folder, tool).unlink(missing_ok=True)


def shown(folder: Path, files: list[str], limit: int = 4) -> str:
    """``files`` (relative to ``folder``) for a one-line message: the first few, then how many more."""
    head = ", ".join(str(folder / f) for f in files[:limit])
    return head + (f" (+{len(files) - limit} more)" if len(files) > limit else "")
