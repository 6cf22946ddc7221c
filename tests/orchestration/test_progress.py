"""The driver's console: Tune's traceback for an attempt a full disk stopped is left out (adversarial finding #4), as
the trial has said it in one line; every other failure keeps Tune's traceback."""

from __future__ import annotations

import logging

import pytest
from ray.exceptions import RayTaskError

from orchestration.launch.progress import TUNE_CONTROLLER_LOGGER, quiet_said_failures
from orchestration.trial.trainable import DiskFull


def _as_tune_sees(error: Exception) -> Exception:
    """``error`` raised in a trial, as the driver receives it: a RayTaskError that is also the cause's class."""
    return RayTaskError("train", "Traceback (most recent call last): ...", error).as_instanceof_cause()


def _tune_logs(error: Exception) -> None:
    # Tune's own line (ray/tune/execution/tune_controller.py, _trial_task_failure)
    logging.getLogger(TUNE_CONTROLLER_LOGGER).error("Trial task failed for trial train_abc", exc_info=error)


@pytest.mark.parametrize("error, shown", [
    (DiskFull("no space left on the disk of /x/mlflow.db; … then resume the launch (--resume)"), False),
    (RuntimeError("CUDA error: an illegal memory access"), True),
    (OSError(28, "No space left on device"), True),   # not said by the trial: Tune's traceback is all there is
])
def test_tunes_traceback_only_for_failures_the_trial_did_not_say(error, shown, caplog) -> None:
    import ray.tune.execution.tune_controller as controller

    quiet_said_failures()
    quiet_said_failures()   # once per process, whatever the number of phases
    logger = logging.getLogger(TUNE_CONTROLLER_LOGGER)
    assert controller.logger is logger and len(logger.filters) == 1
    with caplog.at_level(logging.ERROR, logger=TUNE_CONTROLLER_LOGGER):
        _tune_logs(_as_tune_sees(error))
    assert ("Trial task failed" in caplog.text) is shown
