"""A copied project writes nothing into the original (orchestration.store.location, issue 34): ``cp -r`` of a
project with its SQLite store, then runs logged through the copy; a store moved without its artifacts is refused."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def scratch(tmp_path_factory):
    shm = Path("/dev/shm")  # MLflow's ~60 schema migrations fsync each: tmpfs halves the cost
    root = Path(tempfile.mkdtemp(prefix="location-", dir=shm)) if shm.is_dir() else tmp_path_factory.mktemp("loc")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_copied_project_writes_nothing_into_the_original(scratch, capsys):
    from mlflow import MlflowClient

    from orchestration.store.location import ForeignArtifacts
    from orchestration.trial.tracking import ensure_experiment

    original, copy, moved = scratch / "A", scratch / "B", scratch / "C"
    original.mkdir()
    uri = f"sqlite:///{original / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = ensure_experiment(client, "e", uri)
    old_run = client.create_run(exp).info.run_id
    client.log_text(old_run, "weights", "weights/best_model.pt")
    client.set_terminated(old_run)
    subprocess.run(["cp", "-r", str(original), str(copy)], check=True)   # exactly what a user does
    before = _tree(original)

    from mlflow.tracking._tracking_service import utils
    utils._artifact_repos_cache.clear()  # what this process knows of old_run: a command in the copy starts afresh
    copied_uri = f"sqlite:///{copy / 'mlflow.db'}"
    copied = MlflowClient(copied_uri)
    assert ensure_experiment(copied, "e", copied_uri) == exp
    said = capsys.readouterr().out
    assert "copied or moved from" in said and str(copy / "mlruns") in said     # relocated, said aloud
    new_run = copied.create_run(exp).info.run_id
    copied.log_text(new_run, "new weights", "weights/best_model.pt")
    copied.log_text(old_run, "resumed", "weights/final_model.pt")             # a copied run, continued
    assert _tree(original) == before
    assert (copy / "mlruns" / new_run / "artifacts" / "weights" / "best_model.pt").read_text() == "new weights"
    assert (copy / "mlruns" / old_run / "artifacts" / "weights" / "final_model.pt").read_text() == "resumed"
    assert ensure_experiment(copied, "e", copied_uri) == exp and capsys.readouterr().out == ""  # once only

    moved.mkdir()   # the database alone, its artifacts left behind: refused before anything is written
    shutil.copy(original / "mlflow.db", moved / "mlflow.db")
    moved_uri = f"sqlite:///{moved / 'mlflow.db'}"
    with pytest.raises(ForeignArtifacts, match=r"outside this store.s folder .*\(cp -r \S*/A/mlruns "):
        ensure_experiment(MlflowClient(moved_uri), "e", moved_uri)
    assert _tree(original) == before and not (moved / "mlruns").exists()


def _default_run_and_model(client, where: Path) -> tuple[str, str]:
    """What stores made before issue 40 hold: a run and a logged model in MLflow's Default experiment, whose location
    is a plain path (``<cwd>/mlruns/0``, not a ``file:`` URI)."""
    run = client.create_run("0").info.run_id
    client.log_text(run, "old", "notes.txt")
    model = client.create_logged_model(experiment_id="0", name="model", source_run_id=run).model_id
    (where / "MLmodel").write_text("old model")
    client.log_model_artifacts(model, str(where))
    return run, model


def test_a_copy_relocates_the_default_experiment_and_plain_paths_too(scratch, capsys, monkeypatch):
    """Issue 40 item 3: a ``cp -r`` copy's Default experiment (a plain path, ``<original>/mlruns/0``), its runs and
    logged models are moved like the ``file:`` locations, so nothing a run in the copy writes lands in the original,
    file by file; the copy's message says so, Default included."""
    from mlflow import MlflowClient
    from mlflow.tracking._tracking_service import utils

    from orchestration.trial.tracking import ensure_experiment

    original, copy = scratch / "A", scratch / "B"
    original.mkdir()
    monkeypatch.chdir(original)     # the quickstart's commands run in the project: Default is <project>/mlruns/0
    uri = f"sqlite:///{original / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = ensure_experiment(client, "e", uri)
    assert client.get_experiment("0").artifact_location == str(original / "mlruns" / "0")
    (scratch / "files").mkdir()
    old_run, old_model = _default_run_and_model(client, scratch / "files")
    subprocess.run(["cp", "-r", str(original), str(copy)], check=True)
    before = _tree(original)

    monkeypatch.chdir(copy)
    utils._artifact_repos_cache.clear()
    copied_uri = f"sqlite:///{copy / 'mlflow.db'}"
    copied = MlflowClient(copied_uri)
    assert ensure_experiment(copied, "e", copied_uri) == exp
    said = capsys.readouterr().out
    assert "'Default'" in said and "1 logged model(s)" in said and f"nothing is written into {original}" in said
    copied.log_text(old_run, "continued", "more.txt")                         # an old Default run, continued
    new_run = copied.create_run("0").info.run_id                              # a new run and model in Default
    copied.log_text(new_run, "new", "notes.txt")
    new_model = copied.create_logged_model(experiment_id="0", name="model", source_run_id=new_run).model_id
    copied.log_model_artifacts(new_model, str(scratch / "files"))
    copied.log_text(copied.create_run(exp).info.run_id, "w", "weights/best_model.pt")
    assert _tree(original) == before
    home = copy / "mlruns"
    assert (home / "0" / old_run / "artifacts" / "more.txt").read_text() == "continued"
    assert (home / "0" / new_run / "artifacts" / "notes.txt").read_text() == "new"
    assert copied.get_logged_model(old_model).artifact_location.startswith(str(home))
    assert (Path(copied.get_logged_model(new_model).artifact_location) / "MLmodel").is_file()
    assert ensure_experiment(copied, "e", copied_uri) == exp and capsys.readouterr().out == ""   # once only


def test_an_empty_default_elsewhere_is_pinned_and_one_with_files_elsewhere_refused(scratch, capsys, monkeypatch):
    """A store made from another working directory has its Default experiment there: pinned to the store's own
    ``mlruns/0`` while it is empty (nothing to move, nothing said); holding runs that its folder lacks, refused
    with the copy that fixes it."""
    from mlflow import MlflowClient

    from orchestration.store.location import ForeignArtifacts
    from orchestration.trial.tracking import ensure_experiment

    store, cwd = scratch / "store", scratch / "elsewhere"
    store.mkdir(), cwd.mkdir()
    monkeypatch.chdir(cwd)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)
    ensure_experiment(client, "e", uri)                     # makes the store: Default is <cwd>/mlruns/0
    ensure_experiment(client, "e", uri)
    assert client.get_experiment("0").artifact_location == (store / "mlruns" / "0").as_uri()
    assert capsys.readouterr().out == ""

    other = scratch / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    uri2 = f"sqlite:///{other / 'mlflow.db'}"
    client2 = MlflowClient(uri2)
    client2.search_experiments()                            # makes the store: Default is <other>/mlruns/0
    monkeypatch.chdir(cwd)
    (scratch / "files").mkdir()
    _default_run_and_model(client2, scratch / "files")
    shutil.move(other / "mlflow.db", store / "other.db")   # the database alone, Default's files left behind
    moved = f"sqlite:///{store / 'other.db'}"
    with pytest.raises(ForeignArtifacts, match=rf"'Default' keep their artifacts in {other}/mlruns/0, outside .*"
                                               rf"\(mkdir -p {store}/mlruns && cp -r {other}/mlruns/0 {store}/mlruns/0\)"):
        ensure_experiment(MlflowClient(moved), "e", moved)


def test_trial_models_an_earlier_version_left_in_default_move_to_their_runs(scratch, capsys):
    """A store logged before issue 40 holds every trial's model in the Default experiment: the next command moves
    each (with its tags and params) to its run's experiment, where ``runs:/<run>/model`` finds it; a model of a run
    that is not the project's stays."""
    import mlflow.artifacts
    from mlflow import MlflowClient
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from orchestration import contract as C
    from orchestration.trial.tracking import ensure_experiment

    uri = f"sqlite:///{scratch / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = ensure_experiment(client, "e", uri)
    trial = client.create_run(exp, tags={C.ROLE: C.ROLE_TRIAL}).info.run_id
    other = client.create_run(exp).info.run_id
    (scratch / "files").mkdir()
    (scratch / "files" / "MLmodel").write_text("a model")
    old = [client.create_logged_model(experiment_id="0", name="model", source_run_id=run, tags={"k": "v"},
                                      params={"p": "1"}).model_id for run in (trial, other)]
    client.log_model_artifacts(old[0], str(scratch / "files"))
    ensure_experiment(client, "e", uri)
    assert "1 trial model(s) that an earlier version logged into MLflow's Default" in capsys.readouterr().out
    moved, kept = client.get_logged_model(old[0]), client.get_logged_model(old[1])
    assert (moved.experiment_id, moved.tags.get("k"), moved.params, kept.experiment_id) == (exp, "v", {"p": "1"}, "0")
    with _use_tracking_uri(uri):
        local = mlflow.artifacts.download_artifacts(f"runs:/{trial}/model", dst_path=str(scratch / "dl"))
    assert (Path(local) / "MLmodel").read_text() == "a model"
    ensure_experiment(client, "e", uri)
    assert capsys.readouterr().out == ""


def test_a_store_made_elsewhere_with_old_trial_models_in_default_is_used_not_refused(scratch, capsys, monkeypatch):
    """A store made by a command run in another folder before issue 40: Default (``<that folder>/mlruns/0``) holds
    only trial models. They move to their runs' experiments, keeping their files where they are, and Default, empty,
    is pinned to the store's folder: no refusal."""
    from mlflow import MlflowClient

    from orchestration import contract as C
    from orchestration.trial.tracking import artifact_location, ensure_experiment

    store, cwd = scratch / "store", scratch / "cwd"
    store.mkdir(), cwd.mkdir()
    monkeypatch.chdir(cwd)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)                             # as the earlier version left it: no check yet
    exp = client.create_experiment("e", artifact_location=artifact_location(uri))
    trial = client.create_run(exp, tags={C.ROLE: C.ROLE_TRIAL}).info.run_id
    model = client.create_logged_model(experiment_id="0", name="model", source_run_id=trial)
    assert model.artifact_location.startswith(str(cwd / "mlruns" / "0"))
    ensure_experiment(client, "e", uri)
    assert "1 trial model(s)" in capsys.readouterr().out
    assert client.get_logged_model(model.model_id).experiment_id == exp
    assert client.get_experiment("0").artifact_location == (store / "mlruns" / "0").as_uri()
