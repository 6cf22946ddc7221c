"""The search in the report (issue 14 items 4, 5): a table row of the refit runs (``tuned_rows``) with the paired
tuned − default comparison, and per search study a trials table, fANOVA importances and Optuna's plots.

The end-to-end tests build a real store: a tiny sweep with a search and its refit, run through the real CLI (Ray,
Optuna, MLflow), then ``reports.build`` on it, checked against what MLflow and the durable Optuna study hold."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path
from typing import Iterator

import numpy as np
import optuna
import pytest
import yaml

from orchestration import contract as C
from reports.build import BuildResult, build_report, main
from orchestration.contract.layout import TUNED_ROW, cell_id, validate_report
from reports.search import (COMPLETE, FAILED, MIN_IMPORTANCE_TRIALS, PRUNED, RUNNING, SearchInfo, StudyTrials,
                            _index_lines, importances, read_studies, render_latex, render_markdown)

REPO = Path(__file__).resolve().parents[2]
AXES = {"method": {"fixmatch": {"algorithm": {"name": "fixmatch"}},
                   "mutexmatch": {"algorithm": {"name": "mutexmatch"}}},
        "setting": {"d20": {"data": {"num_labels": 20}}}}
SEARCH = {"cells": [{"method": "mutexmatch"}], "metric": "val/best_acc", "n_trials": 4, "max_concurrent": 2,
          "base": {"data": {"val_per_class": 5}, "train": {"iterations": 8}},
          "space": {"algorithm.tau": {"type": "float", "low": 0.5, "high": 0.99},
                    "algorithm.k": {"type": "int", "low": 1, "high": 9}},
          "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2}}
TABLE = {"id": "main", "rows": "method", "columns": "setting", "row_levels": ["mutexmatch"],
         "row_labels": {"mutexmatch": "MutexMatch"}, "tuned_rows": {"mutexmatch": "MutexMatch (tuned)"},
         "metric": "test/acc", "paired": {"a": "mutexmatch+tuned", "b": "mutexmatch"}}


def _spec(**changes) -> dict:
    spec = {"name": "srch", "axes": AXES, "folds": [0, 1], "search": SEARCH, "tables": [TABLE], "figures": []}
    spec.update(changes)
    return spec


# ------------------------------------------------------------------------------------------------ layout
def test_a_tuned_row_follows_its_level_and_reads_the_refit_cell():
    table = validate_report(_spec(tables=[{**TABLE, "row_levels": None}])).tables[0]
    assert table.row_keys(AXES) == ["fixmatch", "mutexmatch", "mutexmatch" + TUNED_ROW]
    assert table.row_keys(AXES, tuned=False) == ["fixmatch", "mutexmatch"]
    assert table.row_label("mutexmatch" + TUNED_ROW) == "MutexMatch (tuned)"
    tuned = cell_id(table.cell(AXES, None, "mutexmatch" + TUNED_ROW, "d20"), AXES)
    levels = [("method", "mutexmatch"), ("setting", "d20")]
    assert tuned == C.cell_id(C.tuned_levels(levels)) == "method=mutexmatch,setting=d20,tuned=true"
    assert cell_id(table.cell(AXES, None, "mutexmatch", "d20"), AXES) == C.cell_id(levels)


@pytest.mark.parametrize("changes,message", [
    ({"tables": [{**TABLE, "tuned_rows": {"supervised": "S"}, "paired": []}]},
     r"tables\(main\)\.tuned_rows\.supervised='supervised': not a level of axis 'method'"),
    ({"search": None}, r"tables\(main\)\.tuned_rows\.mutexmatch: needs a `search` with refit on .*no search"),
    ({"search": {**SEARCH, "refit": False}}, r"tuned_rows\.mutexmatch: needs a `search` with refit on .*turned off"),
    ({"search": {**SEARCH, "refit": {"enabled": False}}}, r"tuned_rows\.mutexmatch: .*refit turned off"),
    ({"search": {**SEARCH, "cells": [{"method": "fixmatch"}]}},
     r"tuned_rows\.mutexmatch: search\.cells do not cover method=mutexmatch"),
])
def test_a_tuned_row_without_a_search_that_refits_it_is_refused_in_one_line(tmp_path, capsys, changes, message):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(_spec(**changes), sort_keys=False))
    out = tmp_path / "out"
    assert main([str(spec), "--tracking-uri", str(tmp_path / "none.db"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(message, err), err
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ from MLflow
def _run(run_id: str, start: int, search_hash: str, status: str = "FINISHED", tau: str = "0.8", k: str = "3",
         value: float | None = 0.5, early: bool = False) -> SimpleNamespace:
    tags = {C.CELL: "method=mutexmatch,setting=d20", C.FOLD: "0", C.SEARCH_HASH: search_hash}
    tags.update({C.EARLY_STOPPED: "true"} if early else {})
    return SimpleNamespace(info=SimpleNamespace(run_id=run_id, start_time=start, status=status),
                           data=SimpleNamespace(tags=tags, params={"algorithm.tau": tau, "algorithm.k": k},
                                                metrics={} if value is None else {"val/best_acc": value}))


def test_without_a_storage_the_newest_search_is_rebuilt_from_mlflow_with_asha_stops_and_failures(tmp_path):
    runs = [_run("old", 1, "h-old", value=0.99),  # an earlier search of the same cell: not this study
            _run("a", 10, "h-new", tau="0.75", k="2", value=0.6),
            _run("b", 11, "h-new", tau="0.9", value=0.7, early=True),
            _run("c", 12, "h-new", status="FAILED", value=None), _run("d", 13, "h-new", status="RUNNING", value=None),
            _run("e", 14, "h-new", tau="0.95", k="9", value=0.7)]
    source = SimpleNamespace(client=SimpleNamespace(search_runs=lambda *a, **kw: runs))
    (st,) = read_studies(SearchInfo.parse(SEARCH), "srch", source, "1", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not (tmp_path / C.OPTUNA_DB).exists()  # looked for, never created
    assert not st.durable and st.name == C.study_name("srch", "method=mutexmatch,setting=d20/fold0", "h-new")
    assert list(st.trials["run_id"]) == ["a", "b", "c", "d", "e"]
    assert list(st.trials["state"]) == [COMPLETE, PRUNED, FAILED, RUNNING, COMPLETE]
    assert list(st.trials["best"]) == [False, False, False, False, True]  # a tie: the trial started last, as the sweep
    assert st.trials.loc[0, "algorithm.tau"] == 0.75 and st.trials.loc[0, "algorithm.k"] == 2
    assert [t.value for t in st.study.trials] == [0.6, 0.7, 0.7]  # the trials with an objective, for the plots
    tex = render_latex(st, SearchInfo.parse(SEARCH), *importances(st.study))
    assert "Read from the MLflow search runs (no Optuna study found)." in tex and "`" not in tex
    assert tex.count(r"\textbf{") == 5  # every cell of the best row


def test_the_trials_table_names_its_columns_in_words_and_shows_accuracy_in_percent(tmp_path):
    """Issue 34: the table's headers were config keys (`algorithm.tau`, `val/best_acc`) and its objective a
    fraction (0.6) beside the report's %-figures; now τ, k and "best validation accuracy (%)" over 60.00, the keys
    named once in the note (what to --set)."""
    runs = [_run("a", 10, "h", tau="0.75", k="2", value=0.6), _run("b", 11, "h", tau="0.9", value=0.7315)]
    source = SimpleNamespace(client=SimpleNamespace(search_runs=lambda *a, **kw: runs))
    info = SearchInfo.parse(SEARCH)
    (st,) = read_studies(info, "srch", source, "1", f"sqlite:///{tmp_path / 'mlflow.db'}")
    md = render_markdown(st, info, None, "n/a", {})
    assert "| Trial | τ | k | best validation accuracy (%) | State |" in md
    assert "| 0 | 0.75 | 2 | 60.00 | complete |" in md and "| **1** | **0.9** | **3** | **73.15** |" in md
    assert "Columns: τ = `algorithm.tau`, k = `algorithm.k`; objective = `val/best_acc`." in md
    tex = render_latex(st, info, {"algorithm.tau": 0.75, "algorithm.k": 0.25}, "fANOVA")
    assert r"Trial & $\tau$ & k & best validation accuracy (\%) & State \\" in tex
    assert r"0 & 0.75 & 2 & 60.00 & complete \\" in tex and r"$\tau$ (algorithm.tau) & 0.75 \\" in tex
    lines = "\n".join(_index_lines(st, info, ("md",), {}))
    assert "→ val/best_acc 73.15 %" in lines


FLOAT_K = {**SEARCH, "space": {"algorithm.tau": {"type": "float", "low": 0.5, "high": 0.99},
                               "algorithm.k": {"type": "float", "low": 0.3, "high": 1.0}}}


def _sampled_run(run_id: str, start: int, tau: float, k: float, *, early: bool = False) -> SimpleNamespace:
    """A search run as the sweep logs it now: its params are config values (a float k is ``0.6C``), its
    ``mutexmatch.sampled`` tag the values the searcher sampled."""
    run = _run(run_id, start, "h", tau=str(tau), k=f"{k:.6g}C", value=0.5, early=early)
    run.data.tags[C.SAMPLED] = C.sampled_json({"algorithm.tau": tau, "algorithm.k": k})
    return run


def test_trials_are_read_and_matched_by_the_typed_sampled_values(tmp_path):
    """A float k is logged as the config value ``0.6C``, which no distribution reads back: the report takes the
    sampled values (typed) instead, to rebuild the study from MLflow and to match a durable study's trials."""
    info, uri = SearchInfo.parse(FLOAT_K), f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = [_sampled_run("a", 10, 0.7, 0.6), _sampled_run("b", 11, 0.8, 0.35, early=True)]
    experiment = SimpleNamespace(experiment_id="1", creation_time=0)  # whose study it is (issue 33 item 5)
    source = SimpleNamespace(client=SimpleNamespace(search_runs=lambda *a, **kw: runs,
                                                    get_experiment=lambda _id: experiment))
    (rebuilt,) = read_studies(info, "srch", source, "1", uri)
    assert not rebuilt.durable and list(rebuilt.trials["algorithm.k"]) == [0.6, 0.35]
    assert [t.params for t in rebuilt.study.trials] == [{"algorithm.tau": 0.7, "algorithm.k": 0.6},
                                                       {"algorithm.tau": 0.8, "algorithm.k": 0.35}]
    durable = optuna.create_study(study_name=C.study_name("srch", "method=mutexmatch,setting=d20/fold0", "h"),
                                  storage=f"sqlite:///{tmp_path / C.OPTUNA_DB}", direction="maximize")
    for tau, k in ((0.8, 0.35), (0.7, 0.6)):
        durable.add_trial(optuna.trial.create_trial(params={"algorithm.tau": tau, "algorithm.k": k}, value=0.5,
                                                    distributions=info.distributions()))
    (st,) = read_studies(info, "srch", source, "1", uri)
    assert st.durable and list(st.trials["run_id"]) == ["b", "a"] and list(st.trials["state"]) == [PRUNED, COMPLETE]


def test_importances_are_na_with_the_reason_when_the_trials_cannot_say_anything():
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for x in (0.1, 0.2):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=1.0))
    assert importances(study) == (None, f"n/a: fANOVA needs at least {MIN_IMPORTANCE_TRIALS} trials that ran to "
                                        "the end, the study has 2")
    for x in (0.3, 0.4, 0.5):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=1.0))
    assert importances(study) == (None, "n/a: all 5 trials with an objective have the same one (1)")
    # the quickstart's case: four trials, three stopped early by ASHA: their objectives say too little
    assert importances(study, pruned=3) == (None, f"n/a: fANOVA needs at least {MIN_IMPORTANCE_TRIALS} trials that "
                                                  "ran to the end, the study has 2 (and 3 stopped early by ASHA)")


# ------------------------------------------------------------------------------------------------ a real store
@dataclass(frozen=True)
class SweptStore:
    project: Path
    uri: str
    spec: Path
    report: BuildResult


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", C.TRACKING_URI_ENV)}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
                "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
    return env


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweptStore]:
    """grid (MutexMatch, 2 folds) → search (4 trials, ASHA) → refit (2 folds), 8 steps each, then the report."""
    project = tmp_path_factory.mktemp("swept")
    spec = _spec(base={"data": {"dataset": "digits", "num_labels": 20, "root": str(project / "data")},
                       "model": {"backbone": "small_cnn"},
                       "train": {"iterations": 8, "eval_interval": 4, "batch_size": 4, "mu": 2,
                                 "eval_batch_size": 512}},
                 axes={"method": {"mutexmatch": AXES["method"]["mutexmatch"]}, "setting": AXES["setting"]},
                 resources={"cpu": 1, "gpu": 0}, tables=[{**TABLE, "row_levels": None}])
    path = project / "srch.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "orchestration.sweep", path.name], cwd=project, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
    uri = f"sqlite:///{project / C.DEFAULT_DB}"
    report = build_report(path, tracking_uri=uri, out_dir=project / "report", formats=("md", "tex", "png"))
    yield SweptStore(project, uri, path, report)


def _runs(uri: str, kind: str | None) -> list:
    """The trial runs of ``kind``; None: the launch's parent run(s)."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("srch")
    flt = C.trials_filter(kind) if kind else f"tags.`{C.ROLE}` = '{C.ROLE_SWEEP}'"
    return client.search_runs([exp.experiment_id], flt, max_results=1000)


def _best_acc(uri: str, run_id: str) -> float:
    from mlflow import MlflowClient

    return 100.0 * max(m.value for m in MlflowClient(uri).get_metric_history(run_id, C.TEST_ACC))


@pytest.mark.slow
def test_the_tuned_row_holds_the_refit_runs_and_the_grid_row_only_grid_runs(swept):
    data = swept.report.tables["main"]
    grid = {int(r.data.tags[C.FOLD]): r.info.run_id for r in _runs(swept.uri, C.KIND_GRID)}
    refit = {int(r.data.tags[C.FOLD]): r.info.run_id for r in _runs(swept.uri, C.KIND_REFIT)}
    search = {r.info.run_id for r in _runs(swept.uri, C.KIND_SEARCH)}
    assert len(grid) == len(refit) == 2 and len(search) == 4
    default, tuned = data.cells[(None, "mutexmatch", "d20")], data.cells[(None, "mutexmatch+tuned", "d20")]
    assert default.run_ids == grid and tuned.run_ids == refit  # search and refit runs never join the grid cell
    for fold, run_id in refit.items():
        assert tuned.values[fold] == pytest.approx(_best_acc(swept.uri, run_id))
    (pair, results), = data.paired
    diff = results[(None, "d20")]
    assert (pair.a, pair.b, diff.n) == ("mutexmatch+tuned", "mutexmatch", 2)
    assert diff.mean_diff == pytest.approx(np.mean([tuned.values[f] - default.values[f] for f in (0, 1)]))
    md = (swept.project / "report" / "main.md").read_text()
    assert "| MutexMatch (tuned) |" in md and "Paired comparison MutexMatch (tuned) − MutexMatch" in md


def _study(swept: SweptStore) -> optuna.Study:
    (st,) = swept.report.searches.studies
    return optuna.load_study(study_name=st.name, storage=f"sqlite:///{swept.project / C.OPTUNA_DB}")


@pytest.mark.slow
def test_the_trials_table_is_the_durable_study_with_asha_stops_and_the_best_marked(swept):
    (st,) = swept.report.searches.studies
    study = _study(swept)
    assert st.origin.startswith(f"Optuna study `{st.name}`") and st.cell == "method=mutexmatch,setting=d20"
    trials = {t.number: t for t in study.trials}
    assert list(st.trials["trial"]) == sorted(trials) and len(trials) == 4
    early = {r.info.run_id: r.data.tags.get(C.EARLY_STOPPED) == "true" for r in _runs(swept.uri, C.KIND_SEARCH)}
    for _, row in st.trials.iterrows():
        t = trials[row["trial"]]
        assert (row["algorithm.tau"], row["algorithm.k"]) == (t.params["algorithm.tau"], t.params["algorithm.k"])
        assert row["run_id"] in early  # every trial matched to its MLflow run by its parameters
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert row["state"] == (PRUNED if early[row["run_id"]] else COMPLETE)
            assert row["objective"] == t.value
        else:
            assert row["state"] in (FAILED, PRUNED)
    tied = {t.number for t in study.get_trials(states=[optuna.trial.TrialState.COMPLETE])
            if t.value == study.best_value}
    (best,) = st.trials.loc[st.trials["best"], "trial"]  # one of them: the trial the sweep logged as best
    assert best in tied
    (parent,) = _runs(swept.uri, None)
    assert st.trials.loc[st.trials["best"], "run_id"].item() == parent.data.tags[C.BEST_PREFIX + "run_id"]
    md = (swept.project / "report" / f"{st.stem}.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip(" *").isdigit()]
    assert len(rows) == len(trials) and md.count("★ best") == 1
    tex = (swept.project / "report" / f"{st.stem}.tex").read_text()
    assert tex.count(r"\textbf{") == 5  # trial, tau, k, objective and state of the best trial
    assert rf"\input{{{st.stem}.tex}}" in (swept.project / "report" / "report.tex").read_text()
    assert f"### {st.title}" in (swept.project / "report" / "index.md").read_text()


@pytest.mark.slow
def test_importances_are_fanova_on_the_complete_trials_or_na_with_the_reason(swept):
    (st,) = swept.report.searches.studies
    md = (swept.project / "report" / f"{st.stem}.md").read_text()
    complete = _study(swept).get_trials(states=[optuna.trial.TrialState.COMPLETE])
    pruned = int((st.trials["state"] == PRUNED).sum())  # ASHA-stopped trials do not count towards the minimum
    if len(complete) - pruned < MIN_IMPORTANCE_TRIALS or len({t.value for t in complete}) == 1:
        assert "Parameter importances: n/a: " in md
        return
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and " (`algorithm." in ln]  # "| τ (`algorithm.tau`) |"
    assert {ln.split("`")[1] for ln in rows} == {"algorithm.tau", "algorithm.k"}
    assert sum(float(ln.rsplit("|", 2)[1]) for ln in rows) == pytest.approx(1.0, abs=0.002)
    assert f"fANOVA (seed 0) over the {len(complete)} trials with an objective" in md


@pytest.mark.slow
def test_history_and_slice_plots_are_written_as_png_and_vector(swept):
    (st,) = swept.report.searches.studies
    out = swept.project / "report"
    for kind in ("history", "slice"):
        png, pdf, svg = (out / f"{st.stem}-{kind}.{ext}" for ext in ("png", "pdf", "svg"))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
        assert pdf.read_bytes()[:5] == b"%PDF-" and b"<svg" in svg.read_bytes()[:400]
        assert f"![{st.stem} {kind}]({png.name})" in (out / f"{st.stem}.md").read_text()
        assert png.stem in [stem for stem, _ in swept.report.searches.figures]


@pytest.mark.slow
def test_without_the_optuna_study_the_trials_come_from_the_mlflow_search_runs(swept, tmp_path):
    shutil.copy(swept.project / C.DEFAULT_DB, tmp_path / C.DEFAULT_DB)  # no optuna.db beside this copy
    report = build_report(swept.spec, tracking_uri=f"sqlite:///{tmp_path / C.DEFAULT_DB}", out_dir=tmp_path / "out",
                          formats=("md",))
    (st,) = report.searches.studies
    (durable,) = swept.report.searches.studies
    assert st.origin.startswith("the MLflow search runs (no Optuna study")
    cols = ["algorithm.tau", "algorithm.k", "state", "run_id"]
    key = sorted(map(tuple, st.trials[cols].astype(str).values.tolist()))
    assert key == sorted(map(tuple, durable.trials[cols].astype(str).values.tolist()))
    by_run = dict(zip(durable.trials["run_id"], durable.trials["objective"]))
    for run_id, value in zip(st.trials["run_id"], st.trials["objective"]):
        assert (math.isnan(value) and math.isnan(by_run[run_id])) or value == pytest.approx(by_run[run_id])
    assert set(st.trials.loc[st.trials["best"], "run_id"]) == set(durable.trials.loc[durable.trials["best"],
                                                                                     "run_id"])
