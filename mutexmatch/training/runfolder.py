"""The run folder: every file name of a training run in one place, the checkpoint + checksum pair, the metrics log
and the lock that keeps a second trainer out.

A run folder holds ``config.yaml`` (resolved), ``run.json`` (hashes), ``split.json`` (labeled indices with digest),
``dataset.json`` (classes, image counts, normalisation statistics), ``checkpoints/ckpt_<step>.pt`` each with its
``.sha256``, ``metrics.jsonl`` (one line per evaluation), ``confusion_matrix.json`` (the last evaluation's test
confusion matrix), ``best_model.pt`` and ``final_model.pt`` (EMA weights) and ``.lock`` (held with ``flock`` while
a trainer uses the folder). Orchestration reads and copies run folders only through :class:`RunFolder`. Standard
library only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

from mutexmatch.atomic import atomic_write

__all__ = ["RunFolder", "RunFolderError", "RunFolderLocked", "checkpoint_name", "checkpoint_step", "checksum_path",
           "checkpoint_pair"]

CONFIG = "config.yaml"
RUN_MARKER = "run.json"
DATASET = "dataset.json"  # the images a run trained on: classes, sizes, normalisation statistics
SPLIT = "split.json"
METRICS = "metrics.jsonl"
CONFUSION = "confusion_matrix.json"  # the last evaluation's test confusion matrix, rewritten at each evaluation
BEST_WEIGHTS = "best_model.pt"
FINAL_WEIGHTS = "final_model.pt"
CHECKPOINTS = "checkpoints"
LOCK = ".lock"
CHECKSUM_SUFFIX = ".sha256"
_CKPT = re.compile(r"^ckpt_(\d+)\.pt$")
_CKPT_FILE = re.compile(r"^(ckpt_\d+\.pt(\.sha256)?|\.ckpt_\d+\.pt(\.sha256)?\.\w+\.tmp)$")
# What a copy of the run needs besides a checkpoint to continue it elsewhere (a restarted Tune trial).
_PORTABLE = (CONFIG, SPLIT, RUN_MARKER, DATASET, METRICS, BEST_WEIGHTS)
_APPENDED = frozenset({METRICS})  # changed in place, so a snapshot copies it (every other file is replaced whole)
_RUN_FILES = _PORTABLE + (FINAL_WEIGHTS, CHECKPOINTS, CONFUSION)


def checkpoint_name(step: int) -> str:
    return f"ckpt_{step:08d}.pt"


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint file name, or None when ``name`` is not one."""
    m = _CKPT.match(name)
    return int(m.group(1)) if m else None


def checksum_path(checkpoint: str | Path) -> Path:
    """``ckpt_<step>.pt.sha256``: the checksum written beside a checkpoint."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + CHECKSUM_SUFFIX)


def checkpoint_pair(checkpoint: str | Path) -> tuple[Path, Path]:
    """A checkpoint and its checksum: what is copied, uploaded or deleted together."""
    return Path(checkpoint), checksum_path(checkpoint)


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as asked (not empty for a fresh run, unreadable)."""


class RunFolderLocked(RunFolderError):
    """Another trainer holds the run folder's lock."""


class RunFolder:
    """The files of one run under ``path`` (which need not exist yet)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self._lock_file: Any = None

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    config = property(lambda self: self.path / CONFIG)
    marker = property(lambda self: self.path / RUN_MARKER)
    dataset = property(lambda self: self.path / DATASET)
    split = property(lambda self: self.path / SPLIT)
    metrics = property(lambda self: self.path / METRICS)
    confusion = property(lambda self: self.path / CONFUSION)
    best_weights = property(lambda self: self.path / BEST_WEIGHTS)
    final_weights = property(lambda self: self.path / FINAL_WEIGHTS)
    checkpoints = property(lambda self: self.path / CHECKPOINTS)

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / checkpoint_name(step)

    def is_run(self) -> bool:
        """Whether the folder holds a run's config and marker (what ``--resume`` needs)."""
        return self.marker.is_file() and self.config.is_file()

    # ------------------------------------------------------------ fresh runs
    def is_empty(self) -> bool:
        """No file but the lock (a missing folder is empty)."""
        return not self.path.is_dir() or all(p.name == LOCK for p in self.path.iterdir())

    def foreign_entries(self) -> list[str]:
        """What the folder holds that no run writes (paths relative to it, sorted): anything but the run files,
        the lock, checkpoint pairs under ``checkpoints/`` and the temporary files of an interrupted atomic write."""
        if not self.path.is_dir():
            return []
        foreign = [p.name for p in self.path.iterdir() if not _written_by_run(p.name, (*_RUN_FILES, LOCK))
                   or p.name == CHECKPOINTS and not p.is_dir()]
        if self.checkpoints.is_dir():
            foreign += [f"{CHECKPOINTS}/{p.name}" for p in self.checkpoints.iterdir()
                        if not p.is_file() or not _is_checkpoint_file(p.name)]
        return sorted(foreign)

    def check_fresh(self, overwrite: bool) -> None:
        """``FileExistsError`` (one line) unless a fresh run may start here: the folder is empty, or ``overwrite``
        and it holds a run and nothing else. Deletes nothing (:meth:`require_empty` does, under the lock)."""
        if self.is_empty():
            return
        foreign = self.foreign_entries()
        if not overwrite or foreign or not self.marker.is_file():
            raise FileExistsError(self._not_empty(foreign, overwrite))

    def require_empty(self, overwrite: bool) -> None:
        """:meth:`check_fresh`, then with ``overwrite`` the run's files go. A folder with anything a run does not
        write (``config.yaml`` without ``run.json`` is the user's) is never emptied."""
        self.check_fresh(overwrite)
        for name in _RUN_FILES if overwrite else ():
            p = self.path / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)

    def _not_empty(self, foreign: list[str], overwrite: bool) -> str:
        """One line: what is in the way, and only the ways out that would work here."""
        where = f"output_dir={str(self.path)!r}"
        resume = f"continue its run with `--resume {self.path}`, " if self.is_run() else ""
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            why = "--overwrite deletes only a run's own files, so " if overwrite else ""
            return (f"{where} holds what no run writes ({shown}); {why}{resume}choose another output_dir (a new or "
                    "empty folder), or move those away")
        if not self.marker.is_file():
            return (f"{where} holds run file names ({', '.join(sorted(p.name for p in self.path.iterdir()))}) but "
                    f"no {RUN_MARKER}: not a run --overwrite may replace; choose another output_dir or move them")
        return (f"{where} {'is not empty' if not overwrite else 'holds a run'}; {resume}pass --overwrite to delete "
                "its run files and start again, or choose another output_dir")

    # ------------------------------------------------------------ lock
    def lock(self) -> None:
        """Hold the folder's lock until :meth:`unlock` or the process ends (the OS releases ``flock`` then)."""
        if self._lock_file is not None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        f = open(self.path / LOCK, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise RunFolderLocked(f"output_dir={str(self.path)!r} is in use by another trainer ({holder}); "
                                      "wait for it to end or choose another output_dir") from None
            raise
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}\n")
        f.flush()
        self._lock_file = f

    def in_use(self) -> bool:
        """Whether a trainer (in any process) holds the folder's lock now."""
        if self._lock_file is not None:
            return True
        try:
            f = open(self.path / LOCK)
        except OSError:
            return False
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return False

    def unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor releases the flock
            self._lock_file = None

    # ------------------------------------------------------------ metrics log
    def append_metrics(self, step: int, metrics: dict[str, float]) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every logged evaluation. A line that does not parse (what a kill during the append leaves) is skipped
        with a warning: its evaluation comes after the last checkpoint and is redone on resume."""
        if not self.metrics.is_file():
            return []
        rows = []
        for n, line in enumerate(self.metrics.read_text(errors="replace").splitlines(), 1):
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                row = None
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
            elif line.strip():
                warnings.warn(f"{self.metrics}:{n}: not a metrics line (interrupted write?); dropped",
                              RuntimeWarning, stacklevel=2)
        return rows

    def keep_metrics_until(self, step: int) -> None:
        """Drop the evaluations logged after ``step`` (a resumed run redoes them) and any unreadable line."""
        if self.metrics.exists():
            kept = [row for row in self.read_metrics() if row["step"] <= step]
            atomic_write(self.metrics, "".join(json.dumps(row) + "\n" for row in kept).encode())

    # ------------------------------------------------------------ copies
    def snapshot(self, dest: str | Path, checkpoint: str | Path) -> Path:
        """Copy of the run as of ``checkpoint`` in ``dest`` (a folder :meth:`restore` can continue from): the
        checkpoint pair and the run files. Files replaced atomically are hard-linked (a link is a snapshot)."""
        dest = Path(dest)
        for name in _PORTABLE:
            if (self.path / name).exists():
                (shutil.copy2 if name in _APPENDED else _link_or_copy)(self.path / name, dest / name)
        for f in checkpoint_pair(checkpoint):
            _link_or_copy(f, dest / CHECKPOINTS / f.name)
        return dest

    def restore(self, snapshot: str | Path) -> None:
        """Replace this folder's run by the :meth:`snapshot` in ``snapshot`` (files it does not know are left)."""
        shutil.rmtree(self.path, ignore_errors=True)
        src = Path(snapshot)
        self.path.mkdir(parents=True)
        for name in _PORTABLE:
            if (src / name).is_file():
                shutil.copy2(src / name, self.path / name)
        if (src / CHECKPOINTS).is_dir():
            shutil.copytree(src / CHECKPOINTS, self.checkpoints)


def _written_by_run(name: str, names: tuple[str, ...]) -> bool:
    """``name`` is one of ``names`` or the temporary file ``atomic_write`` leaves beside one when interrupted."""
    return name in names or name.startswith(".") and name.endswith(".tmp") and any(
        name.startswith(f".{n}.") for n in names)


def _is_checkpoint_file(name: str) -> bool:
    """A checkpoint, its checksum, or the temporary file of either."""
    return _CKPT_FILE.match(name) is not None


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # the file is replaced atomically (new inode) when rewritten, so a link is a snapshot
    except OSError:
        shutil.copy2(src, dst)
