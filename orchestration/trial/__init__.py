"""The trial: what runs in a Ray worker for one Tune trial, and the MLflow runs a sweep writes.

- ``trainable.py``: the function trainable ``run_trial`` and its ``TrialContext``: one trainer run watched through
  the trainer's callbacks, Tune checkpoints of its run folder, a restart continuing from the last one.
- ``preemption.py``: a trial stopped by SIGTERM/SIGUSR1 (its checkpoint handed to Tune) and the back-off before a
  failed trial's next attempt.
- ``spanning.py``: a trial of ``resources.workers`` > 1 data-parallel ranks as a Ray Train ``TorchTrainer``,
  rank 0's events and files relayed to the trial's process, which keeps its MLflow run and Tune reports.
- ``scratch.py``: the trials' scratch folder on a worker, one per user (``$TMPDIR/mutexmatch_trials-<uid>``, 0700).
- ``tracking.py``: the MLflow runs: the launch's parent run, a trial's run (``TrialRun``), the tracking URI, the
  experiment, the code's commit.
- ``model_log.py``: a grid, refit or single run's final EMA weights as an MLflow pytorch model (signature, example).

Nothing is imported here: a worker that unpickles ``run_trial`` imports only ``trainable.py``, which closes the
network (:mod:`orchestration.runtime.env`) before MLflow or Ray is imported.
"""
