"""One line per trial event on the driver's console, instead of Tune's full status tables (``--tune-verbose``
brings those back). The callback holds no state, so it works unchanged when ``Tuner.restore`` unpickles it."""

from __future__ import annotations

import logging
import os
from typing import Any

from ray import tune

from orchestration.contract import TEST_ACC, TEST_BEST_ACC, VAL_BEST_ACC

__all__ = ["ProgressPrinter", "trial_label", "quiet_tune_console", "quiet_said_failures", "SaidByTheTrial"]

_SHOWN = (TEST_ACC, TEST_BEST_ACC, VAL_BEST_ACC)


def quiet_tune_console(verbose: int) -> None:
    """At ``--tune-verbose 0`` (the default), Tune's older console, which prints nothing at verbose 0: its newer one
    (``RAY_AIR_NEW_OUTPUT``, Ray 2.60's default) prints, whatever the verbosity, a box-drawn table per phase, "View
    detailed results here" and a TensorBoard command for files the sweep does not use (issue 40 item 6). Read by
    ``Tuner.fit`` when it starts; a user's own ``RAY_AIR_NEW_OUTPUT`` wins."""
    if verbose == 0:
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


# Tune's driver logs every failed attempt with its ~40-line traceback under this logger
TUNE_CONTROLLER_LOGGER = "ray.tune.execution.tune_controller"


# failures said in one line already: a full disk by the trial (``trainable.DiskFull``), a worker killed by Ray's memory
# monitor by the driver's progress line (``oomkill.KilledForMemory``)
_SAID = ("DiskFull", "KilledForMemory")


class SaidByTheTrial(logging.Filter):
    """Drops Tune's "Trial task failed" traceback for an attempt a full disk stopped (the trial has said it in one
    line naming the file and the way out: ``trainable.DiskFull``, adversarial finding #4) or Ray's memory monitor
    killed (:class:`ProgressPrinter` says it in one line); any other failure keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        names = {c.__name__ for c in type(error).__mro__}
        return not any(said in names or said in str(error) for said in _SAID)


def quiet_said_failures() -> None:
    """Install :class:`SaidByTheTrial` on Tune's controller logger (once per process)."""
    logger = logging.getLogger(TUNE_CONTROLLER_LOGGER)
    if not any(isinstance(f, SaidByTheTrial) for f in logger.filters):
        logger.addFilter(SaidByTheTrial())


def trial_label(trial: Any) -> str:
    """The grid key (``<cell id>/fold<k>``) or the sampled search parameters of a Tune trial."""
    cfg = trial.config or {}
    if "trial" in cfg:
        return str(cfg["trial"])
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(cfg.items()))


class ProgressPrinter(tune.Callback):
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        print(f"[trial {trial.trial_id}] started: {trial_label(trial)}", flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        r = trial.last_result or {}
        shown = ", ".join(f"{k}={r[k]:.4f}" for k in _SHOWN if isinstance(r.get(k), float))
        print(f"[trial {trial.trial_id}] done at step {r.get('step', '?')}: {trial_label(trial)}"
              + (f" — {shown}" if shown else ""), flush=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if _said_memory_kill(trial, retried=False):
            return
        print(f"[trial {trial.trial_id}] FAILED: {trial_label(trial)} (error file: {trial.error_file})", flush=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if _said_memory_kill(trial, retried=True):
            return
        print(f"[trial {trial.trial_id}] failed, restarting from its last checkpoint: {trial_label(trial)}",
              flush=True)


def _said_memory_kill(trial: Any, retried: bool) -> bool:
    """A trial whose worker Ray's memory monitor killed gets its one line (:mod:`orchestration.launch.oomkill`)."""
    from orchestration.launch.oomkill import killed_for_memory, memory_kill_line

    error = killed_for_memory(trial)
    if error is not None:
        print(f"[trial {trial.trial_id}] {trial_label(trial)}: {memory_kill_line(error, retried)}", flush=True)
    return error is not None
