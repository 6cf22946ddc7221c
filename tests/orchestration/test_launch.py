"""The Launch (orchestration.launch): what every step of one launch reads, and where its phases and studies live."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestration.launch.launch import Launch, SweepOptions
from orchestration.trial.tracking import ParentInfo


def test_a_launch_knows_where_its_phases_and_studies_live(tmp_path):
    plan = SimpleNamespace(spec=SimpleNamespace(search=None))
    launch = Launch(SweepOptions(spec_path=tmp_path / "s.yaml"), plan, f"sqlite:///{tmp_path}/db/mlflow.db",
                    "/ray/results/", "exp", tmp_path)
    assert launch.spec_path == tmp_path / "s.yaml"
    assert launch.optuna_storage == f"sqlite:///{tmp_path}/db/optuna.db"   # beside the MLflow store
    with pytest.raises(AssertionError, match="parent run"):
        launch.exp_root  # no phase runs before the parent run is open
    launch.parent = ParentInfo("run-id", "20261127-1300-abcd", "/ray/results/")
    assert launch.exp_root == "/ray/results/exp/20261127-1300-abcd"
    plan.spec.search = SimpleNamespace(storage="postgresql://db/optuna")
    assert launch.optuna_storage == "postgresql://db/optuna"
