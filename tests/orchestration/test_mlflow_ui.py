"""What the MLflow UI shows of a sweep (orchestration.store.mlflow_ui): the printed link and the experiment's runs
view."""

from __future__ import annotations

from orchestration.store import mlflow_ui


def test_the_printed_link_opens_the_runs_view():
    view = "#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=mutexmatch-trials"
    assert mlflow_ui.ui_hint("http://mlflow:5000/", "7") == f"http://mlflow:5000/{view}"
    # a SQLite store: the command that serves it on this machine only, and the same view's address
    assert mlflow_ui.ui_hint("sqlite:////x/mlflow.db", "7") == (
        "mlflow ui --backend-store-uri sqlite:////x/mlflow.db "
        f"--host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000/{view}")


def test_the_experiment_opens_on_a_runs_view_with_the_key_columns():
    import json

    tags = mlflow_ui.experiment_tags(["method", "setting"])
    assert tags[mlflow_ui.EXPERIMENT_KIND] == "custom_model_development"
    view = json.loads(tags[mlflow_ui.SHARED_VIEW_TAG + mlflow_ui.RUNS_VIEW_KEY])
    assert view["searchFilter"] == "tags.`mutexmatch.role` = 'trial'"  # flat: no collapsed parent row
    assert view["selectedColumns"][:4] == ["metrics.`test/acc_pct`", "metrics.`test/best_acc_pct`",
                                           "tags.`mutexmatch.axis.method`", "tags.`mutexmatch.axis.setting`"]
    assert "tags.`mutexmatch.fold`" in view["selectedColumns"]
    assert view["columnOrder"][0] == "attributes.`Run Name`" and view["columnWidths"]["attributes.`Run Name`"] >= 260
