"""A trial whose MLflow store fails under it, and what the launch's summary says of its trials (issue 40): a trial
retried (item 2), its run deleted while it trains (adversarial finding
#6: a traceback in the console, exit 0, nothing in the summary) and the store's disk full (finding #4: six
tracebacks, "Trials did not complete"). The trial's own error path (orchestration/trial/trainable.py) and the
launch's summary (orchestration/launch/summary.py) against a real SQLite store; no Ray."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from mutexmatch.training import EvalEvent, RunFolder
from orchestration import contract as C
from orchestration.launch.summary import format_statuses, trial_statuses
from orchestration.store.store import Store
from orchestration.trial import tracking, trainable


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    uri = tracking.resolve_tracking_uri(str(folder / "mlflow.db"), folder)
    client = MlflowClient(uri)
    return Store(client, tracking.ensure_experiment(client, "faults", uri))


def _trial(store: Store, parent: str, fold: int) -> tracking.TrialRun:
    tags = {C.PARENT_RUN_ID: parent, C.ROLE: C.ROLE_TRIAL, C.KIND: C.KIND_GRID, C.CELL: "fixmatch",
            C.FOLD: str(fold), C.TRIAL_ID: f"t{fold}", C.LAUNCH_ID: "L"}
    return tracking.TrialRun.open(store, trial_id=f"t{fold}", launch_id="L", tags=tags, run_name=f"fixmatch/fold{fold}")


def _eval(step: int) -> EvalEvent:
    return EvalEvent(step=step, metrics={C.TRAIN_LOSS: 0.5, C.TEST_ACC: 0.5},
                     class_counts={"pseudo_label_counts": np.eye(2, dtype=int)})


def test_a_trial_whose_run_is_deleted_stops_in_one_line_and_the_summary_reports_it_lost(store, tmp_path, capsys):
    parent = store.client.create_run(store.experiment_id, tags={C.ROLE: C.ROLE_SWEEP}).info.run_id
    kept, gone = _trial(store, parent, 0), _trial(store, parent, 1)
    kept.finish({"wall_s": 1.0})
    gone.log_eval(_eval(2))
    store.client.delete_run(gone.run_id)  # a user cleaning the UI while the sweep runs
    with pytest.raises(MlflowException) as raised:
        gone.log_eval(_eval(4))
    handled = trainable._failed(gone, "t1", RunFolder(tmp_path / "run"), raised.value)
    err = capsys.readouterr().err.strip().splitlines()
    assert handled is True  # ended here: Tune neither retries it nor prints its traceback
    assert err == [f"[trial t1] its MLflow run {gone.run_id} was deleted while it trained: the trial stops here, "
                   "reported lost in the sweep's summary (a new launch of the sweep trains it again)"]
    keys = [C.trial_key("fixmatch", f) for f in (0, 1)]
    st = trial_statuses(store, parent, SimpleNamespace(searches=[]), keys, [], [])
    assert format_statuses(st).splitlines() == [
        "finished (1): fixmatch fold 0", "not finished (1): fixmatch fold 1",
        f"lost (1): fixmatch/fold1 (its MLflow run {gone.run_id} was deleted while the launch ran; a new launch of "
        "the sweep, without --resume, trains it again)"]


@pytest.mark.parametrize("error", [
    MlflowException("(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO metrics ...]"),
    OSError(errno.ENOSPC, "No space left on device", "/data/mlruns/1/abc/artifacts/weights/best_model.pt"),
])
def test_a_trial_on_a_full_disk_says_so_in_one_line_and_stays_resumable(store, tmp_path, capsys, error):
    parent = store.client.create_run(store.experiment_id, tags={C.ROLE: C.ROLE_SWEEP}).info.run_id
    trial = _trial(store, parent, 7)
    with pytest.raises(trainable.DiskFull) as raised:  # an error: Tune keeps it ERRORED, which --resume continues
        trainable._failed(trial, "t7", RunFolder(tmp_path / "run"), error)
    line = str(raised.value)
    assert "\n" not in line and raised.value.__suppress_context__
    assert line.startswith("no space left on the disk of ")
    assert line.endswith("; what was written is intact: free space there, then resume the launch (--resume)")
    assert (store.client.tracking_uri.removeprefix("sqlite:///") if isinstance(error, MlflowException)
            else error.filename) in line
    assert capsys.readouterr().err.strip() == f"[trial t7] {line}"
    assert C.ERROR not in store.client.get_run(trial.run_id).data.tags  # no write to a store that may be full


def test_a_retry_on_a_still_full_store_says_the_same_line(store, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO tags ...]")

    monkeypatch.setattr(tracking.TrialRun, "open", full)
    ctx = SimpleNamespace(parent_run_id="p", git_commit="c", launch_id="L", source="", color_axis="", color_levels=(),
                          tracking_uri=store.client.tracking_uri, experiment_id=store.experiment_id)
    ident = {"kind": C.KIND_GRID, "cell": SimpleNamespace(levels=(("method", "fixmatch"),), id="method=fixmatch"),
             "fold": 0, "extra": {}, "name": "method=fixmatch/fold0"}
    cfg = SimpleNamespace(algorithm=SimpleNamespace(name="fixmatch"),   # the RunConfig surface the opening reads
                          to_dict=lambda: {"algorithm": {"name": "fixmatch"}, "model": {"backbone": "small_cnn"},
                                           "data": {"dataset": "digits"}})
    monkeypatch.setattr(trainable, "config_hash", lambda cfg: "h")
    with pytest.raises(trainable.DiskFull, match="^no space left on the disk of .*mlflow.db; what was written"):
        trainable._open_trial_run(ctx, "t8", ident, cfg)
    assert capsys.readouterr().err.startswith("[trial t8] no space left on the disk of ")


def test_a_retried_trial_is_said_in_the_summary(store):
    # issue 40 item 2: a trial that lost an MLflow race was retried silently
    client = store.client
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
