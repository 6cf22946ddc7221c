"""A trial told to stop by a signal, and a trial started again after a failure (issue 31).

- :func:`preemptible`: Tune's class for the function trainable, whose set-up routes SIGTERM and SIGUSR1 to the
  trainer's flag (:mod:`mutexmatch.training.preemption`). The set-up runs in the Ray actor's main thread, the only
  one where Python installs a signal handler (the training function runs in a thread of its own); it replaces Ray's
  SIGTERM handler, which would exit the worker at once and lose up to one evaluation interval of training.
- :func:`keep_preempted`: what the trainable does once the trainer stopped on the signal with a checkpoint of every
  step: hand that checkpoint to Tune (so a restart or ``--resume auto`` continues from it), mark the MLflow run
  KILLED by the signal, and wait for the stop that follows (the node going away, the driver's graceful stop);
  without one the attempt ends with an error and Tune restarts it from that checkpoint.
- :func:`retry_backoff_s`: the wait before a failed trial's next attempt, doubling per attempt
  (``--max-failures -1`` retries without end; a back-off keeps a trial that always fails from spinning).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from mutexmatch.training import preemption

from orchestration import contract as C
from orchestration.trial import tracking

if TYPE_CHECKING:
    from orchestration.spec.plan import SearchStudy
    from orchestration.trial.trainable import TrialCallback

__all__ = ["preemptible", "keep_preempted", "retry_backoff_s", "TrialPreempted", "RETRY_BACKOFF_S",
           "RETRY_BACKOFF_MAX_S", "WAIT_FOR_STOP_S"]

RETRY_BACKOFF_S = 10.0        # the wait before the second attempt of a trial whose last attempt FAILED
RETRY_BACKOFF_MAX_S = 600.0   # doubled per attempt up to this
WAIT_FOR_STOP_S = 60.0        # after a preemption checkpoint: how long the trial waits for the stop that follows


class TrialPreempted(RuntimeError):
    """The attempt stopped on a signal and nothing stopped it afterwards: Tune restarts it from the checkpoint."""


def preemptible(trainable: Callable[..., Any]) -> type:
    """Tune's trainable class for the function ``trainable`` (``tune.with_parameters(run_trial, ...)``), whose
    set-up installs the trainer's SIGTERM/SIGUSR1 handler. Its ``_name`` (Tune's trial and folder names, the
    name ``Tuner.restore`` checks) is the function's, as before."""
    from ray.tune.trainable.function_trainable import wrap_function

    base = wrap_function(trainable)

    class Preemptible(base):  # type: ignore[misc, valid-type]
        def setup(self, config: dict[str, Any]) -> None:
            preemption.install()   # a signal now sets the flag the training loop checks between steps
            super().setup(config)

    Preemptible.__name__ = Preemptible.__qualname__ = base.__name__
    return Preemptible


def keep_preempted(stopped: preemption.Preempted, callback: TrialCallback, trial_run: tracking.TrialRun, *,
                   report: Callable[[dict[str, float], Any], None], study: SearchStudy | None) -> None:
    """The trainer stopped on a signal at ``stopped.step`` with ``stopped.checkpoint`` written. Tune gets that
    checkpoint with the last evaluation's metrics (a grid or refit trial that has not evaluated yet in this attempt:
    with its step alone), unless the phase's scheduler counts reports as evaluations (a ``study`` with ASHA, whose
    rungs and ``max_t`` an extra report would shift) or a search trial has no evaluation in this attempt (its report
    needs the searched metric): Tune then keeps the last evaluation's checkpoint. Raises :class:`TrialPreempted` if
    no stop follows within :data:`WAIT_FOR_STOP_S`."""
    counts_iterations = study is not None and study.search.scheduler.type == "asha"
    handed = not counts_iterations and (callback.last_metrics is not None or study is None)
    if handed:
        report({**(callback.last_metrics or {}), "step": stopped.step},
               callback.stage(stopped.step, stopped.checkpoint))
    trial_run.client.set_tag(trial_run.run_id, C.ENDED_BY, f"signal {stopped.signal_name} at step {stopped.step}")
    trial_run.system.stop()
    tracking.end_run(trial_run.client, trial_run.run_id, "KILLED")
    print(f"[trial {trial_run.run_id}] {stopped.signal_name}: checkpoint of step {stopped.step} written"
          + (" and handed to Tune" if handed else "; Tune continues from the last evaluation's checkpoint"),
          file=sys.stderr, flush=True)
    time.sleep(WAIT_FOR_STOP_S)
    raise TrialPreempted(f"stopped by {stopped.signal_name} at step {stopped.step}; restarted from its checkpoint")


def retry_backoff_s(previous_status: str | None, attempt: int) -> float:
    """Seconds to wait before attempt ``attempt`` of a trial: none for a first attempt or after one that did not
    fail (a preemption, a killed driver); after a FAILED one ``RETRY_BACKOFF_S · 2^(attempt − 2)``, at most
    :data:`RETRY_BACKOFF_MAX_S` (10 s, 20 s, 40 s, … 10 min)."""
    if previous_status != "FAILED" or attempt < 2:
        return 0.0
    return min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2.0 ** (attempt - 2))
