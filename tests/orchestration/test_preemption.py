"""The back-off before a failed trial's next attempt (issue 31, ``orchestration.trial.preemption``): none after a
first attempt or one that did not fail; after a FAILED one 10 s doubling per attempt, at most 10 min, so that
``--max-failures -1`` never spins on a trial that always fails. And a trial actor's SIGTERM handler, which raises
nothing (issue 34)."""

from __future__ import annotations

import pytest

from orchestration.trial.preemption import RETRY_BACKOFF_MAX_S, retry_backoff_s


@pytest.mark.parametrize("previous, attempt, wait", [
    (None, 1, 0.0), ("KILLED", 2, 0.0), ("RUNNING", 3, 0.0),   # first attempt, a preemption, a killed driver
    ("FAILED", 2, 10.0), ("FAILED", 3, 20.0), ("FAILED", 4, 40.0), ("FAILED", 8, 600.0), ("FAILED", 60, 600.0),
])
def test_the_wait_doubles_after_failed_attempts_up_to_its_cap(previous, attempt, wait):
    assert retry_backoff_s(previous, attempt) == wait <= RETRY_BACKOFF_MAX_S


def test_a_trial_actor_takes_sigterm_without_raising(monkeypatch):
    """Issue 34 item 1: Ray's worker handler turns SIGTERM (Ray's shutdown at a sweep's end) into SystemExit(1)
    wherever the trial actor is, e.g. in a weakref callback, where Python prints ``Exception ignored in: …
    SystemExit: 1`` (three trial actors' logs of this machine's Ray sessions before issue 31). The trial class's
    set-up puts the trainer's handler in its place, which only raises the stop flag."""
    import os
    import signal

    from ray.tune.trainable.function_trainable import FunctionTrainable

    from mutexmatch.training import preemption
    from orchestration.trial.preemption import preemptible

    def rays_handler(signum, frame):  # what ray._private.worker's main loop installs
        raise SystemExit(1)

    trial_class = preemptible(lambda config: None)
    monkeypatch.setattr(FunctionTrainable, "setup", lambda self, config: None)   # Tune's own set-up: not under test
    previous = signal.getsignal(signal.SIGUSR1), signal.signal(signal.SIGTERM, rays_handler)
    try:
        trial_class.setup(object.__new__(trial_class), {})
        os.kill(os.getpid(), signal.SIGTERM)
        assert preemption.requested() == "SIGTERM"
    finally:
        signal.signal(signal.SIGUSR1, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        preemption.clear()
