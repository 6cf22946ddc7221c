"""A stop asked for by a signal: SIGTERM (a scheduler's preemption, ``kill``, a spot VM's notice) or SIGUSR1
(SLURM's ``#SBATCH --signal=USR1@<seconds>``, or the sweep driver passing SLURM's warning on to its trials).

The handler only sets a flag (a signal handler may interrupt the loop anywhere, even half-way through writing a
file); :meth:`mutexmatch.training.loop.Trainer.fit` checks it between steps, writes a checkpoint through the
ordinary atomic path (:func:`mutexmatch.training.checkpoint.save_checkpoint`; the steps since the last evaluation
are kept in it, as for ``--stop-at``) and raises :class:`Preempted`. ``python -m mutexmatch.train`` then exits
resumable (``--resume DIR`` continues bit-exactly); the Ray trainable reports the checkpoint to Tune so a restarted
trial or a relaunch continues from it.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

__all__ = ["SIGNALS", "Preempted", "install", "restore", "request", "requested", "clear", "exit_code"]

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))

_FLAG = threading.Event()
_SIGNAL: list[str] = []   # the name of the first signal received (a list: set from the handler without `global`)


class Preempted(Exception):
    """Training stopped at ``step`` on signal ``signal_name``; ``checkpoint`` holds every step trained."""

    def __init__(self, step: int, checkpoint: Path, signal_name: str):
        super().__init__(f"stopped by {signal_name} at step {step}; checkpoint {checkpoint}")
        self.step, self.checkpoint, self.signal_name = step, checkpoint, signal_name


def request(signum: int, frame: Any = None) -> None:
    """The signal handler: remember that a stop was asked for, nothing else."""
    if not _FLAG.is_set():
        _SIGNAL[:] = [signal.Signals(signum).name]
    _FLAG.set()


def requested() -> str | None:
    """The name of the signal that asked for a stop, or None."""
    return _SIGNAL[0] if _FLAG.is_set() and _SIGNAL else None


def clear() -> None:
    _FLAG.clear()
    _SIGNAL.clear()


def install() -> dict[int, Any] | None:
    """Route SIGTERM and SIGUSR1 of this process to :func:`request`; returns the previous handlers (for
    :func:`restore`), or None outside the main thread, where Python cannot install a handler."""
    if threading.current_thread() is not threading.main_thread():
        return None
    clear()
    return {sig: signal.signal(sig, request) for sig in SIGNALS}


def restore(previous: dict[int, Any] | None) -> None:
    """Put back the handlers :func:`install` replaced and forget a request."""
    if previous:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    clear()


def exit_code(signal_name: str) -> int:
    """128 + the signal's number: what a shell reports for a process the signal ended (SLURM and schedulers read
    it as "killed by the signal", and a job script can tell it from a failure)."""
    return 128 + int(signal.Signals[signal_name])
