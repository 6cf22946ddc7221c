"""A trial whose worker Ray's memory monitor killed: a trial failure that Tune retries, said in one line.

Ray's memory monitor (the raylet's; ``RAY_memory_usage_threshold``, 0.95 of the node's memory by Ray's docs, checked
every ``RAY_memory_monitor_refresh_ms``) kills a worker when the *node* is nearly full, whoever filled it: on a loaded
machine, mostly other processes. The trial's actor then fails with ``ray.exceptions.OutOfMemoryError``, which Tune's
actor manager (Ray 2.60, ``ray/air/execution/_internal/actor_manager.py``) knows as neither an actor nor a task
error: killed in a task, ``_actor_task_failed`` raised ``RuntimeError("Caught unexpected exception: …")`` out of
``Tuner.fit`` and the whole sweep ended; killed while starting, the trial was retried with Tune's traceback and Ray's
60-line message. :func:`tolerate_memory_kills` hands that error to Tune as the actor failure it is
(:class:`KilledForMemory`, a ``RayActorError``: the worker is dead), so Tune counts it against ``--max-failures`` and
restarts the trial from its last checkpoint like any failure (a memory kill depends on the node's load, not on the
trial); :func:`memory_kill_line` is what the driver's console says of it."""

from __future__ import annotations

import functools
import re

from ray import cloudpickle  # Tune pickles a trial's error with it
from ray.air.execution._internal.actor_manager import RayActorManager
from ray.exceptions import OutOfMemoryError, RayActorError

__all__ = ["KilledForMemory", "tolerate_memory_kills", "memory_kill_line", "killed_for_memory"]

# Ray 2.60: "... was 2.99GB used / 23.54GB limit (0.127059)\nOOM kill reason: Memory usage 3211563008B exceeded threshold
# of 3210000000B (12.7% of 25276194816B limit)"; earlier releases: "... was 21.86GB / 23.50GB (0.930213), which exceeds
# the memory usage threshold of 0.92"
_USAGE = re.compile(r"was (?P<used>[\d.]+\s*[KMGT]?B)(?: used)? / (?P<total>[\d.]+\s*[KMGT]?B)(?: limit)? "
                    r"\((?P<frac>\d+(?:\.\d+)?)\)")
_THRESHOLD = re.compile(r"threshold of (?:\d+B \((?P<percent>\d+(?:\.\d+)?)% of|(?P<frac>\d+(?:\.\d+)?))")
# "Top 10 memory users: PID\tMEM(GB)\tCOMMAND\n11137\t0.99\t.venv/bin/python -m pytest ..."
_TOP_USER = re.compile(r"Top \d+ memory users:[^\n]*\n\s*(?P<pid>\d+)\s+(?P<gb>[\d.]+)\s+(?P<command>[^\n]+)")


class KilledForMemory(RayActorError):
    """Ray's ``OutOfMemoryError`` for a trial's actor task, as the actor failure Tune retries; Ray's message kept."""

    def __init__(self, message: str) -> None:
        super().__init__(error_msg=message)

    def __reduce__(self):  # Tune pickles a trial's last error into its folder; a restored driver reads it back
        return type(self), (self.error_msg,)


def _as_actor_failure(error: Exception) -> Exception:
    """Ray's ``OutOfMemoryError`` as :class:`KilledForMemory`; any other error unchanged."""
    if isinstance(error, OutOfMemoryError) and not isinstance(error, RayActorError):
        return KilledForMemory(str(error))
    return error


def tolerate_memory_kills() -> None:
    """Wrap Tune's actor manager once per process where a trial's actor fails: in a task (``_actor_task_failed``,
    where an ``OutOfMemoryError`` raised ``RuntimeError``) and while it starts (``_actor_start_failed``, a kill during
    the trainable's ``__init__``, where Tune got the bare error: a retry with Tune's 60-line traceback, no line of
    ours). There an ``OutOfMemoryError`` becomes :class:`KilledForMemory`; any other error goes on unchanged."""
    for name in ("_actor_task_failed", "_actor_start_failed"):
        failed = getattr(RayActorManager, name, None)
        if failed is None or getattr(failed, "_memory_kills_tolerated", False):
            continue   # another Ray release without this method: its own handling, never a failed launch

        @functools.wraps(failed)
        def tolerant(self, *args, _failed=failed, **kwargs):   # Ray passes the exception as ``exception=``
            if "exception" in kwargs:
                kwargs["exception"] = _as_actor_failure(kwargs["exception"])
            else:
                args = (*args[:-1], _as_actor_failure(args[-1]))
            return _failed(self, *args, **kwargs)

        tolerant._memory_kills_tolerated = True  # type: ignore[attr-defined]
        setattr(RayActorManager, name, tolerant)


def killed_for_memory(trial) -> KilledForMemory | None:
    """The trial's last error when it is a memory kill, else None: read from the file Tune's ``Trial.handle_error``
    has just pickled it to in the trial's local folder (the storage copy is synced later)."""
    path = getattr(trial, "pickled_error_file", None)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            error = cloudpickle.load(f)
    except Exception:  # noqa: BLE001 - an unreadable error file: the trial's ordinary line is said instead
        return None
    return error if isinstance(error, KilledForMemory) else None


def _cause(message: str) -> str:
    """The node's memory use, Ray's threshold and the largest user, from Ray's message; else its first line."""
    usage = _USAGE.search(message)
    if usage is None:
        return " ".join(message.split("\n")[0].split())[:200]
    cause = f"the node's memory at {usage['used']} / {usage['total']} ({float(usage['frac']):.1%})"
    threshold = _THRESHOLD.search(message)
    if threshold is not None:
        limit = float(threshold["percent"]) / 100 if threshold["percent"] else float(threshold["frac"])
        cause += f", over Ray's threshold of {limit:.1%}"
    top = _TOP_USER.search(message)
    if top is not None:
        cause += f"; largest user {top['gb']} GB, pid {top['pid']}: {' '.join(top['command'].split())[:60]}"
    return cause


def memory_kill_line(error: KilledForMemory, retried: bool = True) -> str:
    """``killed by Ray's out-of-memory guard (<the node's memory use>); <what happens>; <what to do>``: one line."""
    what = ("restarting from its last checkpoint (the retry counts against --max-failures)" if retried
            else "no retry left (--max-failures)")
    return (f"killed by Ray's out-of-memory guard ({_cause(str(error))}); {what}; if it recurs, run fewer trials at "
            "once (--max-concurrent N, or a larger resources.cpu per trial in the sweep YAML), free memory, or raise "
            "RAY_memory_usage_threshold (default 0.95; read when Ray starts), then --resume")
