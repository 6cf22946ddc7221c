"""A single training run logged to MLflow (issue 26): ``python -m orchestration.train`` runs the trainer's own
command line with the sweep trials' MLflow bookkeeping attached through the callback seam."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from mutexmatch.config import apply_overrides, config_hash, parse_config
from orchestration import contract as C
from orchestration.train import DEFAULT_EXPERIMENT, main

TINY = {"data.dataset": "digits", "data.num_labels": 20, "data.fold": 1, "model.backbone": "small_cnn",
        "train.iterations": 4, "train.eval_interval": 2, "train.batch_size": 4, "train.mu": 2,
        "train.progress": "false", "train.num_threads": 1}


def _args(out: Path) -> list[str]:
    items = [f"{k}={v}" for k, v in TINY.items()] + [f"output_dir={out}"]
    return [a for item in items for a in ("--set", item)]


def _artifacts(client, run_id, path=None):
    found = []
    for a in client.list_artifacts(run_id, path):
        found += _artifacts(client, run_id, a.path) if a.is_dir else [a.path]
    return found


@pytest.fixture()
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}", MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def test_a_run_logs_the_trial_layout(tmp_path, store, capsys):
    uri, client = store
    out = tmp_path / "run"
    assert main(_args(out) + ["--tracking-uri", uri]) == 0
    assert f"in experiment '{DEFAULT_EXPERIMENT}'" in capsys.readouterr().err
    (run,) = client.search_runs([client.get_experiment_by_name(DEFAULT_EXPERIMENT).experiment_id])
    cfg = parse_config(apply_overrides({}, _args(out)[1::2]))   # the config the trainer ran
    tags = run.data.tags
    assert run.info.status == "FINISHED" and run.info.run_name == "mutexmatch · fold 1 · single"
    assert (tags[C.ROLE], tags[C.KIND], tags[C.CELL], tags[C.FOLD]) == ("trial", "single", "algorithm=mutexmatch", "1")
    assert tags[C.CONFIG_HASH] == config_hash(cfg) and tags[C.SPLIT_DIGEST] and C.PARENT_RUN_ID not in tags
    assert run.data.params["train.iterations"] == "4" and run.data.params["algorithm.name"] == "mutexmatch"
    assert [m.step for m in client.get_metric_history(run.info.run_id, C.TEST_ACC)] == [2, 4]
    arts = set(_artifacts(client, run.info.run_id))
    assert {C.CONFIG_ARTIFACT, C.SPLIT_ARTIFACT, C.class_counts_artifact(2), C.class_counts_artifact(4),
            f"{C.WEIGHTS_DIR}/best_model.pt", f"{C.WEIGHTS_DIR}/final_model.pt"} <= arts
    assert any(a.startswith(f"{C.CHECKPOINTS_DIR}/") for a in arts)


def test_stop_then_resume_continues_the_same_mlflow_run(tmp_path, store):
    uri, client = store
    out = tmp_path / "run"
    assert main(_args(out) + ["--tracking-uri", uri, "--stop-at", "2"]) == 0
    (stopped,) = client.search_runs([client.get_experiment_by_name(DEFAULT_EXPERIMENT).experiment_id])
    assert stopped.info.status == "KILLED" and "--stop-at" in stopped.data.tags[C.ENDED_BY]
    assert main(["--resume", str(out), "--tracking-uri", uri]) == 0
    (run,) = client.search_runs([stopped.info.experiment_id])
    assert run.info.run_id == stopped.info.run_id and run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, C.TEST_ACC)] == [2, 4]



def test_a_diverged_run_records_the_trainers_error_line(tmp_path, store, capsys):
    # Issue 33 item 6 (otrain-nan-http): the FAILED run said only "the trainer exited with code 1"
    uri, client = store
    assert main(_args(tmp_path / "run") + ["--set", "algorithm.name=fixmatch", "--set", "algorithm.lambda_p=1.0e+300",
                                           "--tracking-uri", uri]) == 1
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    (run,) = client.search_runs([client.get_experiment_by_name(DEFAULT_EXPERIMENT).experiment_id])
    assert run.info.status == "FAILED" and said == [f"error: {run.data.tags[C.ERROR]}"], (said, run.data.tags)
    assert run.data.tags[C.ERROR].startswith("non-finite loss term 'loss' at step 0 (algorithm fixmatch)")


def test_a_bad_store_is_one_line_before_any_work(tmp_path, capsys):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    assert main(_args(tmp_path / "run") + ["--tracking-uri", str(junk)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "junk.db" in line and not (tmp_path / "run").exists()


def test_the_plain_trainer_says_it_does_not_log_to_mlflow(tmp_path, monkeypatch, capsys):
    from mutexmatch.training import main as train_main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    assert train_main(_args(tmp_path / "run")) == 0
    assert "`python -m orchestration.train` takes the same arguments and logs the run" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()
