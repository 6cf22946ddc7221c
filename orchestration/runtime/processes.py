"""A process told apart from a later one that reuses its id: process id plus start time (Linux ``/proc``).

A process id alone is not an identity. ``make test-cluster`` found it (issue 31): the head container killed with
the sweep's driver and started again, the driver's recorded pid 483 belonged to another process of the restarted
container (same host name, a fresh pid namespace), so the resubmitted ``--resume auto`` launch was refused as "launch
… is running". Start times (clock ticks since boot, ``/proc/<pid>/stat`` field 22) tell the two apart. Elsewhere
than Linux there is no start time, and the id alone decides.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["stat", "start_time", "running"]

_PROC = Path("/proc")


def stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks since boot) of ``pid``, or None when it is gone or unknown."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ..., starttime (22nd field)
    return int(fields[1]), fields[19]


def start_time(pid: int | None = None) -> str:
    """The start time of ``pid`` (default: this process), "" where ``/proc`` does not tell."""
    st = stat(os.getpid() if pid is None else pid)
    return "" if st is None else st[1]


def running(pid: int, started: str = "") -> bool:
    """Whether ``pid`` runs and, when its start time ``started`` was recorded and ``/proc`` can tell, is still the
    process that was recorded (not another one that got the same id)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # runs, as another user
    if started and (st := stat(pid)) is not None:
        return st[1] == started
    return True
