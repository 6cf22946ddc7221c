"""Issue 40 item 2: trials that write one SQLite store at the same moment never collide. MLflow's SQL store checks
then inserts, so two trials logging the same dataset input for the first time got ``UNIQUE constraint failed:
datasets.experiment_id, datasets.name, datasets.digest`` (the trial failed and was retried, silently), and a run's
dataset input named another run's split as its source.

The writers are forked processes running the trial's real bookkeeping (:class:`orchestration.trial.tracking.TrialRun`:
open, start_attempt, log_start, log_eval, finish), released together by a barrier before every write that used to
race; no Ray (the trainable adds nothing to these writes)."""

from __future__ import annotations

import json
import multiprocessing as mp
import traceback
from pathlib import Path

import numpy as np

from mutexmatch.training import EvalEvent, RunFolder, StartEvent
from orchestration import contract as C
from orchestration.trial import tracking

WRITERS = 8
SPLITS = 3  # rounds: every writer logs the same new split at once, three times over (one collision is likely per round)


def _store(uri: str, experiment: str):
    from mlflow import MlflowClient

    from orchestration.store.store import Store

    client = MlflowClient(uri)
    return Store(client, client.get_experiment_by_name(experiment).experiment_id)


def _writer(uri: str, experiment: str, index: int, folder: str, barrier, errors) -> None:
    """One trial's MLflow bookkeeping, each write that shares a row with the other writers' released at once."""
    try:
        store = _store(uri, experiment)
        trial = tracking.TrialRun.open(store, trial_id=f"t{index}", launch_id="L",
                                       tags={C.ROLE: C.ROLE_TRIAL, C.TRIAL_ID: f"t{index}", C.LAUNCH_ID: "L"},
                                       run_name=f"cell/fold{index}")
        trial.start_attempt({"train": {"seed": 0}}, node_id="n", tune_checkpoint=False)
        run = RunFolder(Path(folder) / f"run{index}")
        run.path.mkdir()
        run.config.write_text("data: {dataset: digits, num_labels: 20}\n")
        run.dataset.write_text("{}")
        for split in range(SPLITS):
            run.split.write_text(json.dumps({"labeled": [split], "writer": index}))
            trial._run = store.client.get_run(trial.run_id)  # as a new attempt would see it
            barrier.wait(timeout=120)
            trial.log_start(StartEvent(step=0, iterations=2, run=run, config_hash="h",
                                       split_digest=f"{split:x}" * 64))
        trial.log_eval(EvalEvent(step=2, metrics={C.TRAIN_LOSS: 0.5, C.TEST_ACC: 0.5},
                                 class_counts={"pseudo_label_counts": np.eye(2, dtype=int)}))
        trial.finish({"wall_s": 1.0})
    except BaseException:  # noqa: BLE001 - reported to the test
        errors.put(f"writer {index}: {traceback.format_exc()}")
        barrier.abort()  # the others stop waiting for this one


def test_trials_writing_one_store_at_once_never_collide(tmp_path):
    uri = tracking.resolve_tracking_uri(str(tmp_path / "mlflow.db"), tmp_path)
    ctx = mp.get_context("fork")  # the store is opened only in the children: no SQLite handle crosses a fork
    setup = ctx.Process(target=_create, args=(uri, "race"))
    setup.start()
    setup.join(120)
    assert setup.exitcode == 0
    barrier, errors = ctx.Barrier(WRITERS), ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(uri, "race", i, str(tmp_path), barrier, errors))
               for i in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(240)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert [w.exitcode for w in writers] == [0] * WRITERS
    store = _store(uri, "race")
    runs = list(store.runs())
    assert len(runs) == WRITERS and {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:  # every split the run logged, each pointing at the run's own split.json
        inputs = run.inputs.dataset_inputs
        assert len(inputs) == SPLITS, run.info.run_name
        for given in inputs:
            assert json.loads(given.dataset.source)["uri"] == f"runs:/{run.info.run_id}/{C.SPLIT_ARTIFACT}"
            assert given.dataset.name == "digits (20 labels)"


def _create(uri: str, experiment: str) -> None:
    from mlflow import MlflowClient

    tracking.ensure_experiment(MlflowClient(uri), experiment, uri)
