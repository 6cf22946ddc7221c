"""Which files of a report's ``--out`` folder a build may replace: only those a build wrote there (adversarial finding
#15: a hand-written ``index.md`` and ``report.tex`` in the folder were replaced without a word).

A build records the files it wrote, with their SHA-256, in :data:`MANIFEST` inside the folder. Before any work,
:func:`check` refuses a build that would write over a file the record does not hold as it is now (written by
someone else, or edited since the build wrote it), unless ``--overwrite``. A folder built before the record
existed is recognised by its ``index.md``, whose first line is the build's title for the same experiment."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from orchestration.contract.fileio import atomic_write
from orchestration.contract.layout import ReportLayout

__all__ = ["MANIFEST", "check", "recording"]

MANIFEST = ".reports-build.json"
_FIGURE_EXTS = ("png", "pdf", "svg")


def _would_write(layout: ReportLayout, formats: Sequence[str], preview: bool) -> Callable[[str], bool]:
    """Whether a file name is one a build of ``layout`` in ``formats`` writes (reports.build's module docstring)."""
    names = {"index.md"} | ({"report.tex"} if "tex" in formats else set()) | \
        ({"report.pdf"} if "pdf" in formats else set())
    for t in layout.tables:
        names |= {f"{stem}.{ext}" for stem in (t.id, f"{t.id}_folds") for ext in ("md", "tex") if ext in formats}
    figures = not preview and ("png" in formats or "pdf" in formats)
    if figures:
        names |= {f"{f.id}.{ext}" for f in layout.figures for ext in _FIGURE_EXTS}
    searches = not preview and layout.search is not None    # reports.search: search-<levels>-fold<k>[-plot].*
    return lambda name: name in names or (searches and name.startswith("search-")
                                          and name.rsplit(".", 1)[-1] in ("md", "tex", *_FIGURE_EXTS))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(out: Path) -> dict[str, str] | None:
    """The record's {file name: SHA-256}; None without one; empty when unreadable (then nothing counts as a build's)."""
    try:
        files = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("files", {})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def _built_before_the_record(out: Path, name: str) -> bool:
    try:
        with (out / "index.md").open(encoding="utf-8") as f:
            first = f.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return False
    return first in (f"# Report: {name}", f"# Preview: {name}")


def _present(out: Path, would: Callable[[str], bool]) -> list[Path]:
    return sorted(p for p in out.iterdir() if would(p.name) and (p.is_file() or p.is_symlink())) \
        if out.is_dir() else []


def check(out: Path, layout: ReportLayout, formats: Sequence[str], preview: bool, overwrite: bool) -> None:
    """``ValueError`` (one line) when the build would write over a file in ``out`` that no build wrote as it is."""
    present = _present(out, _would_write(layout, formats, preview))
    if overwrite or not present:
        return
    recorded = _recorded(out)
    if recorded is None and _built_before_the_record(out, layout.name):
        return
    recorded = recorded or {}
    foreign = [p.name for p in present if p.name not in recorded or p.is_symlink()]
    changed = [p.name for p in present if p.name not in foreign and _digest(p) != recorded[p.name]]
    if not foreign and not changed:
        return
    why = ([f"{', '.join(foreign)} {'was' if len(foreign) == 1 else 'were'} not written by reports.build"]
           if foreign else []) + ([f"{', '.join(changed)} changed since reports.build wrote it"] if changed else [])
    them = "it" if len(foreign) + len(changed) == 1 else "them"
    raise ValueError(f"--out {str(out)!r}: {'; '.join(why)}; the build would replace {them}: give another --out, "
                     f"move {them} away, or add --overwrite")


def _state(paths: list[Path]) -> dict[str, tuple[int, int, int]]:
    stats = {p.name: p.lstat() for p in paths}
    return {name: (s.st_ino, s.st_size, s.st_mtime_ns) for name, s in stats.items()}


@contextmanager
def recording(out: Path, layout: ReportLayout, formats: Sequence[str], preview: bool) -> Iterator[None]:
    """Around a build: afterwards (also after a failure part-way, so that the rerun may replace what it wrote) the
    record holds every file of the build's names that it wrote or rewrote, and keeps the earlier builds' files that
    are still as written."""
    would = _would_write(layout, formats, preview)
    before = _state(_present(out, would))
    try:
        yield
    finally:
        now = _present(out, would)
        if now:
            kept = {n: d for n, d in (_recorded(out) or {}).items() if (out / n).is_file() and _digest(out / n) == d}
            after = _state(now)
            kept.update({p.name: _digest(p) for p in now if not p.is_symlink()
                         and before.get(p.name) != after[p.name]})
            atomic_write(out / MANIFEST, json.dumps({"written_by": "python -m reports.build", "files": kept},
                                                    indent=1, sort_keys=True).encode("utf-8"), mode=0o644)
