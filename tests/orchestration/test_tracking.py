"""The MLflow side without Ray: URIs every process can use, the experiment with its artifact root, flattened
params, a trial's run across attempts (the reconciliation of a dead driver's runs: test_store.py)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from mutexmatch.training import EvalEvent, RunSummary, StartEvent
from mutexmatch.training import RunFolder
from orchestration import contract as C
from orchestration.store import mlflow_ui
from orchestration.trial import tracking
from orchestration.store.store import Store
from orchestration.sweep import check_resources, resolve_storage
from orchestration.spec.models import Resources


def test_tracking_uri_is_absolute_for_sqlite_and_refuses_the_file_store(tmp_path):
    assert tracking.resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert tracking.resolve_tracking_uri("sqlite:///sub/x.db", tmp_path) == f"sqlite:///{tmp_path / 'sub/x.db'}"
    assert tracking.resolve_tracking_uri("sqlite:////abs/y.db", tmp_path) == "sqlite:////abs/y.db"
    assert tracking.resolve_tracking_uri("z.db", tmp_path) == f"sqlite:///{tmp_path / 'z.db'}"
    assert tracking.resolve_tracking_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"
    for bad in ("./mlruns", "file:///tmp/mlruns"):
        with pytest.raises(ValueError, match=f"--tracking-uri='{bad}': use sqlite"):
            tracking.resolve_tracking_uri(bad, tmp_path)
    assert resolve_storage(None, tmp_path) == str(tmp_path / "ray_results")
    assert resolve_storage("rr", tmp_path) == str(tmp_path / "rr")
    assert resolve_storage("s3://bucket/rr", tmp_path) == "s3://bucket/rr"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module (creating its schema takes seconds)."""
    project = tmp_path_factory.mktemp("store")
    uri = tracking.resolve_tracking_uri(None, project)
    return project, uri, MlflowClient(uri)


def test_experiment_artifacts_live_beside_the_database(store):
    project, uri, client = store
    exp_id = tracking.ensure_experiment(client, "artifacts", uri)
    tags = mlflow_ui.experiment_tags(["method", "setting"])
    assert tracking.ensure_experiment(client, "artifacts", uri, tags) == exp_id
    assert {k: client.get_experiment(exp_id).tags.get(k) for k in tags} == tags  # set on an existing experiment
    assert client.get_experiment(exp_id).artifact_location == (project / "mlruns").as_uri()
    client.delete_experiment(exp_id)
    assert tracking.ensure_experiment(client, "artifacts", uri) == exp_id  # restored from the trash, not duplicated


def test_flatten_params_uses_dotted_paths():
    flat = tracking.flatten_params({"algorithm": {"tau": 0.95, "k": "C"}, "train": {"compile": False},
                                    "data": {"image_size": None}, "output_dir": "o", "x": {"y": [1, 2]}})
    assert flat == {"algorithm.tau": "0.95", "algorithm.k": "C", "train.compile": "False",
                    "data.image_size": "None", "output_dir": "o", "x.y": "[1, 2]"}


NODES = [{"Alive": True, "Resources": {"CPU": 4.0}}, {"Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}},
         {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]


@pytest.mark.parametrize("cpu, gpu, policy, nodes, expected", [
    (1, 0.25, "error", NODES, {"cpu": 1, "gpu": 0.25}),
    (1, 0.5, "error", NODES[:1], "resources.gpu=0.5: the Ray cluster has no GPU"),
    (1, 0.5, "drop", NODES[:1], {"cpu": 1, "gpu": 0.0}),
    (1, 2, "error", NODES, "resources.gpu=2: no node of the Ray cluster has 2 GPUs (largest: 1)"),
    (8, 0, "error", NODES, "resources.cpu=8: no node of the Ray cluster has 8 CPUs (largest: 4)"),
])
def test_resource_requests_no_alive_node_can_satisfy_are_refused(cpu, gpu, policy, nodes, expected):
    from orchestration.sweep import SweepError

    if isinstance(expected, str):
        with pytest.raises(SweepError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            check_resources(Resources(cpu=cpu, gpu=gpu), policy, nodes)
    else:
        request, warns = check_resources(Resources(cpu=cpu, gpu=gpu), policy, nodes)
        assert request == expected
        assert bool(warns) == (policy == "drop")


def _event(step: int, loss: float) -> EvalEvent:
    return EvalEvent(step=step, metrics={C.TRAIN_LOSS: loss, C.TEST_ACC: 0.5},
                     class_counts={"pseudo_label_counts": np.eye(2, dtype=int)})


def _open(client, exp_id, trial_id="t1"):
    return tracking.TrialRun.open(Store(client, exp_id), trial_id=trial_id, launch_id="L",
                                  tags={C.ROLE: C.ROLE_TRIAL, C.TRIAL_ID: trial_id, C.LAUNCH_ID: "L"},
                                  run_name="cell/fold0")


def test_a_trial_run_continues_across_attempts_and_logs_each_evaluation_once(store, tmp_path):
    _, uri, client = store
    exp_id = tracking.ensure_experiment(client, "trial_runs", uri)
    first = _open(client, exp_id)
    assert (first.attempt, first.last_logged_step, first.finished) == (1, -1, False)
    first.start_attempt({"train": {"seed": 0}, "output_dir": "a"}, node_id="n1", tune_checkpoint=False)
    run = RunFolder(tmp_path / "run")
    run.path.mkdir()
    run.config.write_text("train: {seed: 0}\ndata: {dataset: digits, num_labels: 20}\n")
    run.split.write_text('{"labeled": []}')
    run.dataset.write_text("{}")
    first.log_start(StartEvent(step=0, iterations=6, run=run, config_hash="h", split_digest="d" * 64))
    for step in (2, 4):
        first.log_eval(_event(step, step / 10))
    # the worker dies; the restarted attempt resumes from the step-2 checkpoint and redoes the step-4 evaluation
    second = _open(client, exp_id)
    assert (second.run_id, second.attempt, second.last_logged_step) == (first.run_id, 2, 4)
    second.start_attempt({"train": {"seed": 0}, "output_dir": "b"}, node_id="n2", tune_checkpoint=True)
    for step in (4, 6):
        second.log_eval(_event(step, step / 10 + 1))
    second.finish({"setup_s": 1.0, "hooks_s": 0.5, "wall_s": 3.0})
    got = client.get_run(first.run_id)
    history = client.get_metric_history(first.run_id, C.TRAIN_LOSS)
    assert [(m.step, m.value) for m in history] == [(2, 0.2), (4, 0.4), (6, 1.6)]
    assert got.info.status == "FINISHED" and got.data.params["output_dir"] == "a"  # params of the first attempt
    t = got.data.tags
    assert (t[C.ATTEMPTS], t[C.attempt_tag(2, "node_id")], t[C.attempt_tag(2, "tune_checkpoint")]) == ("2", "n2", "yes")
    assert (t[C.SPLIT_DIGEST], t[C.attempt_tag(1, "start_step")], t[C.LAST_STEP]) == ("d" * 64, "0", "6")
    assert t[C.attempt_tag(2, "host")] == socket.gethostname()  # where the attempt ran: a container's name
    # MLflow's Dataset column: the data and its label budget, identified by the split (logged once, not per attempt)
    second.log_start(StartEvent(step=2, iterations=6, run=run, config_hash="h", split_digest="d" * 64))
    [given] = client.get_run(first.run_id).inputs.dataset_inputs
    assert (given.dataset.name, given.dataset.digest) == ("digits (20 labels)", f"{'d' * 16}-{first.run_id[:12]}")
    assert {(x.key, x.value) for x in given.tags} == {(C.DATASET_CONTEXT, "train")}
    # accuracies also in %, for the UI: the same evaluations, the contract's conversion
    pct = client.get_metric_history(first.run_id, C.percent_metric(C.TEST_ACC))
    assert [(m.step, m.value) for m in pct] == [(2, 50.0), (4, 50.0), (6, 50.0)]
    assert C.percent_metric(C.TRAIN_LOSS) not in got.data.metrics  # a loss is no accuracy
    assert t[C.overhead_tag("hooks_s")] == "0.500"
    arts = {a.path for a in client.list_artifacts(first.run_id)} | {
        a.path for a in client.list_artifacts(first.run_id, C.CLASS_COUNTS_DIR)}
    assert {C.CONFIG_ARTIFACT, C.SPLIT_ARTIFACT, C.class_counts_artifact(6)} <= arts
    done = _open(client, exp_id)
    assert done.finished and done.final_metrics() == {C.TRAIN_LOSS: 1.6, C.TEST_ACC: 0.5,
                                                      C.percent_metric(C.TEST_ACC): 50.0, "step": 6}


def test_a_trial_run_logged_before_the_last_step_tag_reads_its_metric_history(store):
    _, uri, client = store
    exp_id = tracking.ensure_experiment(client, "old_trial_runs", uri)
    old = client.create_run(exp_id, tags={C.ROLE: C.ROLE_TRIAL, C.TRIAL_ID: "t9", C.LAUNCH_ID: "L",
                                          C.ATTEMPTS: "1"})
    tracking.log_metrics(client, old.info.run_id, {C.TRAIN_LOSS: 1.0}, 20)  # as the previous version logged
    again = _open(client, exp_id, "t9")
    assert (again.run_id, again.attempt, again.last_logged_step) == (old.info.run_id, 2, 20)


def test_a_failed_trial_run_keeps_the_error(store):
    _, uri, client = store
    exp_id = tracking.ensure_experiment(client, "failed_trial_runs", uri)
    trial = _open(client, exp_id, "t3")
    trial.failed(ValueError("boom"))
    got = client.get_run(trial.run_id)
    assert got.info.status == "FAILED" and got.data.tags[C.ERROR] == "ValueError: boom"


def test_a_sqlite_tracking_uri_must_be_a_database_or_new(tmp_path):
    (tmp_path / "notes.db").write_text("not a database\n")
    (tmp_path / "folder.db").mkdir()
    (tmp_path / "empty.db").touch()
    with pytest.raises(ValueError, match=f"--tracking-uri '{tmp_path}/notes.db': {tmp_path}/notes.db is not an "
                                         "SQLite database"):
        tracking.resolve_tracking_uri(str(tmp_path / "notes.db"), tmp_path)
    with pytest.raises(ValueError, match="folder.db is a folder"):
        tracking.resolve_tracking_uri("sqlite:///folder.db", tmp_path)
    for fine in ("empty.db", "new.db"):  # the sweep creates the store in an empty or missing file
        assert tracking.resolve_tracking_uri(fine, tmp_path) == f"sqlite:///{tmp_path / fine}"


def test_the_run_folders_confusion_matrix_is_logged_when_the_run_ends(store, tmp_path):
    """Issue 41 item 2: ``confusion_matrix.json``, the run folder's last test confusion matrix, becomes the trial
    run's artifact of that name (every evaluation's matrix goes with its class counts)."""
    _, uri, client = store
    trial = _open(client, tracking.ensure_experiment(client, "confusion", uri), "t-confusion")
    run = RunFolder(tmp_path / "run")
    run.path.mkdir()
    run.confusion.write_text('{"step": 2, "matrix": [[3, 1], [0, 2]]}')
    trial.log_end(RunSummary(step=2, metrics={}, output_dir=run.path, final_checkpoint=None, best_weights=None,
                             final_weights=None))
    local = client.download_artifacts(trial.run_id, "confusion_matrix.json", str(tmp_path / "down"))
    assert json.loads(Path(local).read_text()) == {"step": 2, "matrix": [[3, 1], [0, 2]]}
