"""Ctrl+C and SIGTERM during a sweep: the first one stops Tune gracefully and marks the launch interrupted.
SIGUSR1 (SLURM's ``--signal=B:USR1@<seconds>`` passed on by the job script: the time limit is near) first has every
running trial write a checkpoint (:data:`PREEMPT_HOOKS`, :mod:`orchestration.launch.trialsignals`), then stops the
same way, so the requeued job's ``--resume auto`` continues every trial from the step it reached.

Before any parent run, while a launch links reused trials, :func:`held_signals` holds SIGINT and SIGTERM so that no
link run is cut between its creation and its end (issue 33 item 8); the interrupt then ends the linking with
:class:`LinkingInterrupted`, which counts the links written.

The flags are process-wide because the signal handler cannot reach the phase that is running; the phase runner
(:mod:`orchestration.launch.phases`) reads :data:`INTERRUPTED` to tell an interrupted phase from a finished one.
Once it is set, Tune's own lines about the stop are dropped (:data:`TUNE_STOP_LINES`): the screen ends with our
resume line, not with what looks like a crash.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["INTERRUPTED", "IN_FIT", "STOP_HOOKS", "PREEMPT_HOOKS", "RECEIVED", "on_interrupt",
           "handle_interrupts", "LaunchAborted", "LinkingInterrupted", "uninterruptible", "held_signals", "route_usr1",
           "stop_if_interrupted", "last_signal", "act_on", "TUNE_STOP_LINES", "quiet_tune_stop"]


class LaunchAborted(KeyboardInterrupt):
    """A second Ctrl+C after the launch's parent run was opened: its runs are ended KILLED and the resume command
    printed already; the command line only exits (130)."""


def uninterruptible(work: Callable[[], None]) -> None:
    """Run ``work`` with SIGINT ignored (what must finish once the user aborted: ending the runs as KILLED)."""
    if threading.current_thread() is not threading.main_thread():
        return work()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        work()
    finally:
        signal.signal(signal.SIGINT, previous)

class LinkingInterrupted(KeyboardInterrupt):
    """Ctrl+C or SIGTERM while a launch linked reused trials (before any parent run or Ray): ``linked`` of
    ``total`` link runs were written, each ended FINISHED (none left RUNNING); the command line says so."""

    def __init__(self, linked: int, total: int) -> None:
        super().__init__(f"{linked} of {total}")
        self.linked, self.total = linked, total


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM for the block: one that arrives is appended to the yielded list (the block checks
    it between steps that must not be cut in half, e.g. a link run created and ended) and, once the block is
    left, handled by the handler installed before (:func:`on_interrupt` on the command line: KeyboardInterrupt)."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT,
                                                                                          signal.SIGTERM)}
    try:
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        handler = previous[held[0]]
        if callable(handler):
            handler(held[0], None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(held[0])

# Set by the CLI's SIGINT/SIGTERM handler; IN_FIT while Tuner.fit runs (Tune then stops gracefully on SIGUSR1).
INTERRUPTED = threading.Event()
IN_FIT = threading.Event()
# Run (in a thread of their own) on the first SIGTERM, before Tune's graceful stop: `ray job stop` and schedulers
# SIGKILL a few seconds later (Ray: 3 s), often before that stop ends, so what must survive is done first.
STOP_HOOKS: list[Callable[[], None]] = []
# Run (in a thread) on the driver's SIGUSR1 during a phase, before Tune's graceful stop: the trials checkpoint.
PREEMPT_HOOKS: list[Callable[[], None]] = []
# Set just before this process sends itself SIGUSR1 for Tune's graceful stop: route_usr1's handler passes it on.
_FOR_TUNE = threading.Event()


# The stop signals received, in order (the command line names the first in its last line).
RECEIVED: list[int] = []


def last_signal() -> int | None:
    """The first stop signal this process received, if any."""
    return RECEIVED[0] if RECEIVED else None


def act_on(received: list[int]) -> None:
    """Handle the signals held while Ray started (:func:`orchestration.runtime.signals.held`), the first as if it
    arrived now (outside ``fit``: KeyboardInterrupt)."""
    if received:
        on_interrupt(received[0], None)


def on_interrupt(signum: int, frame: Any) -> None:
    """First Ctrl+C/SIGTERM: ask Tune to stop gracefully (its SIGUSR1 handler saves the experiment state and stops
    the trials) and remember that the launch was interrupted. A second one, or one outside ``fit``, aborts. While
    ``fit`` starts, before Tune listens, the signal is only remembered: Tune's set-up acts on it
    (:func:`stop_if_interrupted`)."""
    first = not INTERRUPTED.is_set()
    INTERRUPTED.set()
    RECEIVED.append(signum)
    if first and signum == signal.SIGTERM and STOP_HOOKS:
        # a thread: the main thread may hold the store's write lock in the frame this handler interrupted
        threading.Thread(target=_run_hooks, args=(list(STOP_HOOKS),), name="sweep-stop", daemon=True).start()
    handler = signal.getsignal(signal.SIGUSR1) if hasattr(signal, "SIGUSR1") else None
    tune_listens = callable(handler) and handler is not on_interrupt
    if first and IN_FIT.is_set() and not tune_listens:
        print(f"\n[sweep] {signal.Signals(signum).name} while the trials start: the launch stops once Tune is up",
              file=sys.stderr, flush=True)
        return
    if first and IN_FIT.is_set() and tune_listens:
        print("\n[sweep] interrupted: stopping the trials and saving the state (interrupt again to abort at once)",
              file=sys.stderr, flush=True)
        _FOR_TUNE.set()
        os.kill(os.getpid(), signal.SIGUSR1)
        return
    raise KeyboardInterrupt


def route_usr1() -> None:
    """Put :func:`_on_usr1` in front of Tune's SIGUSR1 handler. Called in the main thread once Tune installed its
    handler for a ``fit`` (a Tune callback's set-up: :class:`orchestration.launch.trialsignals.PassOnUsr1`)."""
    tune_handler = signal.getsignal(signal.SIGUSR1)
    if getattr(tune_handler, "passes_to_tune", None) is not None or not callable(tune_handler):
        return

    def on_usr1(signum: int, frame: Any) -> None:
        if _FOR_TUNE.is_set() or not PREEMPT_HOOKS:
            _FOR_TUNE.clear()
            tune_handler(signum, frame)  # Tune's graceful stop: it saves the experiment state and stops the trials
        elif not INTERRUPTED.is_set():
            INTERRUPTED.set()
            print("\n[sweep] SIGUSR1 (a time limit ahead): every running trial writes a checkpoint, then the launch "
                  "stops; the same command with --resume auto continues it", file=sys.stderr, flush=True)
            threading.Thread(target=_preempt_then_stop, args=(list(PREEMPT_HOOKS),), name="sweep-usr1",
                             daemon=True).start()
        # else: a second SIGUSR1 while the trials write their checkpoints; the stop follows them

    on_usr1.passes_to_tune = tune_handler  # type: ignore[attr-defined]
    signal.signal(signal.SIGUSR1, on_usr1)


def stop_if_interrupted() -> None:
    """Tune's graceful stop at once when a stop signal came while ``fit`` started, before Tune listened (called
    from the same set-up as :func:`route_usr1`, in the main thread)."""
    if INTERRUPTED.is_set() and IN_FIT.is_set():
        _FOR_TUNE.set()
        os.kill(os.getpid(), signal.SIGUSR1)


def _preempt_then_stop(hooks: list[Callable[[], None]]) -> None:
    _run_hooks(hooks)
    _FOR_TUNE.set()
    os.kill(os.getpid(), signal.SIGUSR1)   # now Tune's graceful stop (handlers run in the main thread)


def _run_hooks(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        try:
            hook()
        except Exception as e:  # noqa: BLE001 - the graceful stop goes on; the next launch ends what is left
            print(f"[sweep] warning: on the stop signal: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


# What Tune logs when it stops a run gracefully, by logger: its own "Stop signal received … Press CTRL+C to skip",
# an ERROR listing the trials the stop left unfinished, its `Tuner.restore(...)` advice (which does not resume a
# sweep: our resume line does) and, for every trial not started yet, a FileNotFoundError for its missing result
# files (Tune reads them for a results table the sweep never uses). After our interrupt they only look like a crash
# above the resume line (issue 34), so they are dropped while INTERRUPTED is set, and kept otherwise.
TUNE_STOP_LINES = {
    "ray.tune.tune": ("Stop signal received", "Trials did not complete", "Experiment has been interrupted",
                      "Training has been interrupted"),
    "ray.tune.analysis.experiment_analysis": ("Failed to fetch metrics for",),
}


class _TuneStopLines(logging.Filter):
    """Drops a record that starts with one of ``starts`` while the launch is interrupted (:data:`TUNE_STOP_LINES`)."""

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not (INTERRUPTED.is_set() and record.getMessage().startswith(self.starts))


def quiet_tune_stop() -> None:
    """Attach the :data:`TUNE_STOP_LINES` filters to Tune's loggers (once)."""
    for name, starts in TUNE_STOP_LINES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _TuneStopLines) for f in logger.filters):
            logger.addFilter(_TuneStopLines(starts))


def handle_interrupts() -> None:
    """Route SIGINT, SIGTERM (``kill``, a scheduler's preemption) and SIGUSR1 through :func:`on_interrupt`, and
    quiet Tune's lines about the graceful stop that follows (:func:`quiet_tune_stop`). Called again after
    ``ray.init``, which installs its own aborting SIGTERM handler."""
    quiet_tune_stop()
    if threading.current_thread() is threading.main_thread():
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # Tune's own SIGINT handler would hide the interrupt
        signal.signal(signal.SIGINT, on_interrupt)
        signal.signal(signal.SIGTERM, on_interrupt)
        signal.signal(signal.SIGUSR1, on_interrupt)  # outside a phase; during one route_usr1's handler has it
