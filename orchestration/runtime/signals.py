"""A stop signal at any moment of the driver's start-up is honoured (issue 40 item 1, adversarial finding #17).

SLURM's time-limit signal (SIGUSR1, passed on by ``docker/slurm/sweep.sbatch``), a scheduler's SIGTERM or a
Ctrl+C can arrive while the driver still imports torch, Ray and MLflow (seconds, more on a loaded node) or while
``ray.init`` starts a local Ray. Python's default action for SIGUSR1 ends the process with 138, which the batch
script took for a crash, and Ray installs its own SIGTERM handler for the whole of ``ray.init`` (``sys.exit(15)``,
not a word). So:

- :func:`exit_while_importing` is the first thing ``orchestration.sweep`` does: until the launch's own handlers
  replace it (:func:`orchestration.launch.interrupts.handle_interrupts`), a stop signal ends the driver at once
  with the resumable status 130 and one line; nothing is opened before those handlers, so nothing is lost.
- :func:`held` wraps ``ray.init``: a stop signal is recorded (Ray's SIGTERM handler is not installed) and handed
  back once Ray is up, where the launch acts on it as on any other (Ray shut down, 130, the same line).

Standard library only: it runs before anything heavy is imported.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["STOP_SIGNALS", "INTERRUPTED_STATUS", "before_start_line", "exit_while_importing", "held"]

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name))
INTERRUPTED_STATUS = 130   # resumable: what docker/slurm/sweep.sbatch requeues and `--resume auto` continues
_WHY = {"SIGUSR1": "SIGUSR1, a time limit ahead", "SIGTERM": "SIGTERM", "SIGINT": "Ctrl+C"}


def before_start_line(signum: int | None) -> str:
    """The line a driver stopped before its launch opened ends with (``signum``: the signal, when one did it)."""
    why = f" ({_WHY.get(signal.Signals(signum).name, signal.Signals(signum).name)})" if signum else ""
    return (f"interrupted{why} before the sweep started: no launch was opened and nothing was trained (link runs "
            "of reused trials written before, if any, are FINISHED); the same command starts it")


def _exit_now(signum: int, frame: Any) -> None:
    sys.stdout.flush()
    print(before_start_line(signum), file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_STATUS)  # mid-import: an exception could be caught by the library being imported


def exit_while_importing() -> None:
    """Until replaced, a stop signal ends the process with 130 and :func:`before_start_line` (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, _exit_now)


@contextmanager
def held() -> Iterator[list[int]]:
    """Record the stop signals that arrive in the block (the yielded list) instead of acting on them, and keep
    Ray's ``ray.init`` from installing its SIGTERM handler meanwhile; the handlers before the block are restored
    after it, and the caller acts on what was recorded."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in STOP_SIGNALS}
    with _without_rays_sigterm_handler():
        try:
            yield received
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextmanager
def _without_rays_sigterm_handler() -> Iterator[None]:
    """``ray.init`` sets ``sys.exit(signum)`` as the SIGTERM handler through ``ray._private.utils``'s
    ``set_sigterm_handler`` (Ray 2.60, worker.py: "terminate any signal before connecting driver"); within the
    block that call does nothing. Without Ray imported there is nothing to patch."""
    utils = sys.modules.get("ray._private.utils")
    original = getattr(utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = original
