"""The launch's summary of its trials (orchestration/launch/summary.py): a trial that needed more than one attempt
is said, with the failure that made Tune retry it (issue 40 item 2: a trial that lost an MLflow race was retried
silently)."""

from __future__ import annotations

from types import SimpleNamespace

from mlflow import MlflowClient

from orchestration import contract as C
from orchestration.launch.summary import format_statuses, trial_statuses
from orchestration.store.store import Store
from orchestration.trial import tracking


def test_a_retried_trial_is_said_in_the_summary(tmp_path):
    uri = tracking.resolve_tracking_uri(str(tmp_path / "mlflow.db"), tmp_path)
    client = MlflowClient(uri)
    store = Store(client, tracking.ensure_experiment(client, "summary", uri))
    parent = client.create_run(store.experiment_id, tags={C.ROLE: C.ROLE_SWEEP}).info.run_id
    for fold, attempts, error in ((0, "1", None), (1, "2", "MlflowException: UNIQUE constraint failed: datasets.x\n"
                                                            "(Background on this error ...)"), (2, "3", None)):
        tags = {C.PARENT_RUN_ID: parent, C.ROLE: C.ROLE_TRIAL, C.KIND: C.KIND_GRID, C.CELL: "fixmatch",
                C.FOLD: str(fold), C.ATTEMPTS: attempts, **({C.ERROR: error} if error else {})}
        tracking.end_run(client, client.create_run(store.experiment_id, tags=tags).info.run_id, "FINISHED")
    keys = [C.trial_key("fixmatch", str(f)) for f in range(3)]
    st = trial_statuses(store, parent, SimpleNamespace(searches=[]), keys, [], [])
    lines = format_statuses(st).splitlines()
    assert lines[0] == "finished (3): fixmatch folds 0,1,2"
    assert lines[1] == ("retried (2): fixmatch/fold1 (2 attempts; a failed one: MlflowException: UNIQUE constraint "
                        "failed: datasets.x); fixmatch/fold2 (3 attempts)")
