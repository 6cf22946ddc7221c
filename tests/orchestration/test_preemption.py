"""The back-off before a failed trial's next attempt (issue 31, ``orchestration.trial.preemption``): none after a
first attempt or one that did not fail; after a FAILED one 10 s doubling per attempt, at most 10 min, so that
``--max-failures -1`` never spins on a trial that always fails."""

from __future__ import annotations

import pytest

from orchestration.trial.preemption import RETRY_BACKOFF_MAX_S, retry_backoff_s


@pytest.mark.parametrize("previous, attempt, wait", [
    (None, 1, 0.0), ("KILLED", 2, 0.0), ("RUNNING", 3, 0.0),   # first attempt, a preemption, a killed driver
    ("FAILED", 2, 10.0), ("FAILED", 3, 20.0), ("FAILED", 4, 40.0), ("FAILED", 8, 600.0), ("FAILED", 60, 600.0),
])
def test_the_wait_doubles_after_failed_attempts_up_to_its_cap(previous, attempt, wait):
    assert retry_backoff_s(previous, attempt) == wait <= RETRY_BACKOFF_MAX_S
