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
