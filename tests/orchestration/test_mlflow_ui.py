"""What the MLflow UI shows of a sweep (orchestration.store.mlflow_ui): the printed link and the experiment's runs
view, which holds exactly the runs the report counts (issue 34)."""

from __future__ import annotations

from orchestration.store import mlflow_ui


def test_the_printed_link_opens_the_runs_view(tmp_path, monkeypatch):
    view = "#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=mutexmatch-trials"
    assert mlflow_ui.ui_hint("http://mlflow:5000/", "7") == f"http://mlflow:5000/{view}"
    # a SQLite store: the command that serves it on this machine only, and the same view's address
    monkeypatch.setattr("sys.executable", str(tmp_path / "nowhere" / "python"))
    assert mlflow_ui.ui_hint("sqlite:////x/mlflow.db", "7") == (
        "mlflow ui --backend-store-uri sqlite:////x/mlflow.db "
        f"--host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000/{view}")


def test_the_printed_command_is_the_environments_own_mlflow(tmp_path, monkeypatch):
    """Issue 40 item 6: `make quickstart` printed `mlflow ui …`, which a shell without the venv activated does not
    find (or finds another MLflow, which may not read the store)."""
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "mlflow").write_text("#!/bin/sh\n")
    monkeypatch.setattr("sys.executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert mlflow_ui.ui_command("sqlite:////x/m.db").startswith(".venv/bin/mlflow ui --backend-store-uri ")
    monkeypatch.chdir("/")
    assert mlflow_ui.ui_command("sqlite:////x/m.db").startswith(f"{venv_bin / 'mlflow'} ui ")


def test_the_experiment_opens_on_a_runs_view_with_the_key_columns():
    import json

    tags = mlflow_ui.experiment_tags(["method", "setting"])
    assert tags[mlflow_ui.EXPERIMENT_KIND] == "custom_model_development"
    view = json.loads(tags[mlflow_ui.SHARED_VIEW_TAG + mlflow_ui.RUNS_VIEW_KEY])
    # a store before the counted tag: every grid trial (no search trial), no parent row
    assert view["searchFilter"] == "tags.`mutexmatch.role` = 'trial' AND tags.`mutexmatch.kind` = 'grid'"
    # grouped by the cell in words (issue 40 item 6: the cell ids were cut to "method=mutexmatch,settin…" for
    # default and tuned alike), the report's protocol (best, the layout's default) first
    assert view["groupBy"] == {"aggregateFunction": "average",
                               "groupByKeys": [{"mode": "tag", "groupByData": "mutexmatch.group"}]}
    assert view["selectedColumns"][:4] == ["metrics.`test/best_acc_pct`", "metrics.`test/acc_pct`",
                                           "tags.`mutexmatch.axis.method`", "tags.`mutexmatch.axis.setting`"]
    assert "tags.`mutexmatch.fold`" in view["selectedColumns"]
    assert view["columnOrder"][0] == "attributes.`Run Name`" and view["columnWidths"]["attributes.`Run Name`"] >= 260


def test_the_views_first_column_is_the_metric_of_the_report_tables_protocol():
    import json

    def first(tables):
        tags = mlflow_ui.experiment_tags(["method"], "d", tables)
        return json.loads(tags[mlflow_ui.SHARED_VIEW_TAG + mlflow_ui.RUNS_VIEW_KEY])["selectedColumns"][:2]

    assert first([{"id": "main", "rows": "method", "protocol": "final"}]) == ["metrics.`test/acc_pct`",
                                                                             "metrics.`test/best_acc_pct`"]
    assert first([{"id": "main", "protocol": "median20"}, {"id": "b", "protocol": "final"}])[0] == \
        "metrics.`test/median_acc_pct`"
    assert first([{"id": "main", "rows": "method"}])[0] == first([])[0] == "metrics.`test/best_acc_pct`"


def test_the_group_label_says_the_cell_in_words_and_tells_tuned_from_default():
    from orchestration import contract as C

    default = [("method", "mutexmatch"), ("setting", "digits-20")]
    assert C.group_label(default) == "mutexmatch · digits-20"
    assert C.group_label(C.tuned_levels(default)) == "mutexmatch (tuned) · digits-20"
    assert C.cell_levels(C.cell_id(C.tuned_levels(default))) == list(C.tuned_levels(default))
    tags = C.trial_tags(parent_run_id="p", kind=C.KIND_REFIT, cell_levels=iter(C.tuned_levels(default)),
                        cell_id=C.cell_id(C.tuned_levels(default)), fold=0, variant="mutexmatch", config_hash="h",
                        commit="c", trial_id="t", launch_id="l")
    assert tags[C.GROUP] == "mutexmatch (tuned) · digits-20" and tags[C.axis_tag("setting")] == "digits-20"


def test_a_settings_view_filters_its_counted_runs_and_every_link_names_it():
    import json

    tags = mlflow_ui.experiment_tags(["method"], "0123abcd")
    view = json.loads(tags[mlflow_ui.SHARED_VIEW_TAG + "mutexmatch-0123abcd"])
    assert view == json.loads(tags[mlflow_ui.SHARED_VIEW_TAG + mlflow_ui.RUNS_VIEW_KEY])  # the latest launch's
    assert view["searchFilter"] == ("tags.`mutexmatch.role` = 'trial' AND tags.`mutexmatch.counted.0123abcd` = "
                                    "'true'")
    link = "#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=mutexmatch-0123abcd"
    assert mlflow_ui.ui_hint("sqlite:////x/mlflow.db", "7", "0123abcd").endswith(f"http://127.0.0.1:5000/{link}")
    text = mlflow_ui.description("sqlite:////x/mlflow.db", "7", "0123abcd", ["a=1"], "cell  folds\nm=x   2/2")
    assert f"(http://127.0.0.1:5000/{link})" in text and "--set a=1" in text and "m=x   2/2" in text


def _trial(client, exp_id: str, parent: str, method: str, fold: int, config_hash: str, pct: float, *,
           kind: str = "grid", start: int = 0, status: str = "FINISHED") -> str:
    from orchestration import contract as C

    tags = C.trial_tags(parent_run_id=parent, kind=kind, cell_levels=[("method", method)],
                        cell_id=C.cell_id([("method", method)]), fold=fold, variant=method,
                        config_hash=config_hash, commit="c", trial_id=f"t{fold}{config_hash}", launch_id="l")
    run = client.create_run(exp_id, start_time=1_000_000 + start, tags=tags, run_name=C.trial_key(method, fold))
    client.log_metric(run.info.run_id, C.TEST_ACC, pct / 100, step=10)
    client.log_metric(run.info.run_id, C.percent_metric(C.TEST_ACC), pct, step=10)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_the_view_holds_exactly_the_runs_the_report_counts(tmp_path_factory):
    """The sweep's marking (its summary's rule) and the report's selection (reports.selection) pick the same runs from
    one store: no search trial, no --set try-out, no older duplicate, no failed run; the view's filter finds them,
    also while a launch goes on (a run marked as it finishes)."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from orchestration import contract as C
    from orchestration.launch.summary import _newest_matching
    from orchestration.store.store import Store
    from reports.runs import SqliteRunSource
    from reports.selection import select_trials, split_by_settings

    import tempfile
    from pathlib import Path

    shm = Path("/dev/shm")  # MLflow's ~60 schema migrations fsync each: tmpfs halves the cost
    tmp_path = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "mlruns").as_uri())
    parent = client.create_run(exp, tags={C.ROLE: C.ROLE_SWEEP}).info.run_id
    counted = {_trial(client, exp, parent, "mutexmatch", 0, "h0", 90.0, start=2),
               _trial(client, exp, parent, "mutexmatch", 1, "h1", 91.0, start=2),
               _trial(client, exp, parent, "fixmatch", 0, "f0", 80.0, start=2)}
    older = _trial(client, exp, parent, "mutexmatch", 0, "h0", 50.0, start=1)       # superseded (--force)
    _trial(client, exp, parent, "mutexmatch", 1, "try", 10.0, start=3)               # a --set try-out
    _trial(client, exp, parent, "mutexmatch", 0, "s0", 20.0, start=3, kind=C.KIND_SEARCH)
    _trial(client, exp, parent, "fixmatch", 0, "f0", 30.0, start=3, status="FAILED")
    client.set_tag(older, C.counted_tag("d1"), "true")                               # marked by an earlier launch
    expected = {"method=mutexmatch/fold0": {"h0"}, "method=mutexmatch/fold1": {"h1"}, "method=fixmatch/fold0": {"f0"}}

    found, other = _newest_matching(Store(client, exp), C.KIND_GRID,
                                    {k: SimpleNamespace(hashes=v) for k, v in expected.items()})
    assert {r.info.run_id for r in found.values()} == counted and len(other) == 1   # the try-out, said aloud
    client.delete_tag(min(counted), C.GROUP)                                         # a run from before the tag
    mlflow_ui.mark_counted(client, exp, "d1", [r.info.run_id for r in found.values()])
    in_view = {r.info.run_id for r in client.search_runs([exp], mlflow_ui.runs_view(["method"], "d1")["searchFilter"])}
    assert in_view == counted
    assert {client.get_run(r).data.tags.get(C.GROUP) for r in counted} == {"mutexmatch", "fixmatch"}  # filled in

    with SqliteRunSource(uri, tmp_path / "mlflow.db") as source:
        trials, ignored = split_by_settings(source.trials(exp, ["method"]), expected)
        used, duplicates, _ = select_trials(trials, [0, 1])
    assert set(used["run_id"]) == counted and list(duplicates["run_id"]) == [older] and len(ignored) == 1
    means = {c: sum(client.get_run(r).data.metrics["test/acc_pct"] for r in ids) / len(ids)
             for c, ids in used.groupby("cell")["run_id"]}
    assert means == {"method=fixmatch": 80.0, "method=mutexmatch": 90.5}             # what MLflow's average shows

    # a --force relaunch's trial, marked as it finishes: it replaces its cell and fold's run in the view at once
    newer = _trial(client, exp, parent, "mutexmatch", 0, "h0", 92.0, start=4)
    mlflow_ui.mark_counted_run(client, exp, "d1", newer, "method=mutexmatch", 0)
    in_view = {r.info.run_id for r in client.search_runs([exp], mlflow_ui.runs_view(["method"], "d1")["searchFilter"])}
    replaced = {r for r in counted if client.get_run(r).data.tags[C.FOLD] == "0" and
                client.get_run(r).data.tags[C.CELL] == "method=mutexmatch"}
    assert in_view == (counted - replaced) | {newer} and len(replaced) == 1
