"""The Ray processes a launch started, so that the next launch ends those a killed driver left behind.

After a SIGKILL of the driver, the local Ray it started (GCS, raylet, dashboard and runtime-env agents) was found
alive 72-79 s later in 5 of 6 runs. The driver records its Ray processes on its parent run (process id and start
time, :data:`orchestration.contract.RAY_PROCESSES`); the next launch, finding that launch's driver gone, ends each
recorded process that still runs with the same start time: by process id, never by name, and never a process that
merely reuses a recorded id. Linux ``/proc`` only; elsewhere nothing is recorded.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from orchestration.runtime.processes import stat as _stat

__all__ = ["describe_children", "end_orphans"]

_PROC = Path("/proc")


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents.setdefault(st[0], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return sorted(found)


def describe_children(pid: int | None = None) -> str:
    """``"<pid>:<start> ..."`` of every process below ``pid`` (default: this one), e.g. the Ray it started."""
    described = []
    for child in _descendants(os.getpid() if pid is None else pid):
        st = _stat(child)
        if st is not None:
            described.append(f"{child}:{st[1]}")
    return " ".join(described)


def end_orphans(described: str | None) -> list[int]:
    """SIGKILL each process of ``described`` (from :func:`describe_children`) that still runs with the recorded
    start time; returns their ids."""
    ended = []
    for item in (described or "").split():
        pid, _, start = item.partition(":")
        st = _stat(int(pid)) if pid.isdigit() else None
        if st is None or st[1] != start:
            continue  # gone, or the id now belongs to another process
        try:
            os.kill(int(pid), signal.SIGKILL)
            ended.append(int(pid))
        except OSError:
            continue
    return ended
