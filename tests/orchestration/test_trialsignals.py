"""The driver's SIGUSR1 (issue 31; ``orchestration.launch.interrupts.route_usr1`` and ``trialsignals``): during a
phase it first runs the preempt hooks (every running trial checkpoints), then hands the signal to Tune's own handler
(the graceful stop); the trials are sent SIGUSR1 by the pid their MLflow run names, and the driver waits for them."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from orchestration.launch import interrupts
from orchestration.launch.trialsignals import checkpoint_trials


@pytest.fixture
def usr1_restored():
    previous = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, previous)
    interrupts.INTERRUPTED.clear()
    interrupts.PREEMPT_HOOKS.clear()
    interrupts._FOR_TUNE.clear()


def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_usr1_in_a_phase_checkpoints_the_trials_then_reaches_tunes_handler(usr1_restored):
    order: list[str] = []
    hooks_done = threading.Event()
    signal.signal(signal.SIGUSR1, lambda signum, frame: order.append("tune"))  # as Tune's fit installs it
    interrupts.PREEMPT_HOOKS[:] = [lambda: (order.append("trials checkpoint"), hooks_done.set())]
    interrupts.route_usr1()
    interrupts.route_usr1()  # a second phase's callback set-up does not wrap it twice
    signal.raise_signal(signal.SIGUSR1)
    assert _wait(lambda: order == ["trials checkpoint", "tune"]), order
    assert interrupts.INTERRUPTED.is_set()


def test_sigterm_in_a_phase_goes_straight_to_tunes_stop(usr1_restored):
    order: list[str] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: order.append("tune"))
    interrupts.PREEMPT_HOOKS[:] = [lambda: order.append("trials checkpoint")]
    interrupts.route_usr1()
    interrupts.IN_FIT.set()
    try:
        interrupts.on_interrupt(signal.SIGTERM, None)  # sends this process the SIGUSR1 Tune listens to
        assert _wait(lambda: order == ["tune"]), order
    finally:
        interrupts.IN_FIT.clear()


def test_the_running_trials_are_signalled_by_their_runs_pid_and_waited_for(capsys):
    code = "import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(0)); print(1, flush=True); " \
           "time.sleep(60)"
    trial = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        trial.stdout.readline()  # its handler is installed
        run = SimpleNamespace(info=SimpleNamespace(run_id="r1"),
                              data=SimpleNamespace(tags={"mutexmatch.worker_pid": str(trial.pid),
                                                         "mutexmatch.node_id": ""}))
        status = lambda run_id: "RUNNING" if trial.poll() is None else "KILLED"  # noqa: E731
        store = SimpleNamespace(children=lambda parent, *clauses: iter([run]),
                                client=SimpleNamespace(get_run=lambda i: SimpleNamespace(
                                    info=SimpleNamespace(status=status(i)))))
        t0 = time.monotonic()
        assert checkpoint_trials(store, "parent", wait_s=30) == []
        assert time.monotonic() - t0 < 10 and trial.wait(5) == 0
    finally:
        if trial.poll() is None:
            trial.kill()
    assert "SIGUSR1: 1 of 1 running trial(s) wrote a checkpoint" in capsys.readouterr().err
