"""What the MLflow UI shows of a sweep: the experiment's kind, description and shared runs view (the runs the report
counts, marked as each finishes and settled at the end of each launch), the link a command prints, and a trial's
Dataset column. Not part of the layout contract: no reader depends on it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

from orchestration.contract import (CELL, EXPERIMENT_KIND, EXPERIMENT_KIND_ML, FOLD, GROUP, KIND, KIND_GRID, ROLE,
                                    ROLE_TRIAL, SHARED_VIEW_TAG, SPLIT_ARTIFACT, TEST_ACC, TEST_BEST_ACC,
                                    TEST_MEDIAN_ACC, axis_tag, cell_levels, counted_changes, counted_filter,
                                    counted_tag, group_label, percent_metric)
from orchestration.contract.filters import all_of, tag_equals
from orchestration.contract.ui_links import (RUNS_VIEW_KEY, UI_HOST, UI_PORT, runs_view_url, ui_command,  # noqa: F401
                                             ui_hint, view_key)

if TYPE_CHECKING:
    from mlflow import MlflowClient


def dataset_input(data: dict, split_digest: str, run_id: str) -> dict[str, str]:
    """MLflow's Dataset column for a trial: the dataset and its label budget, the labeled split's digest (16
    characters identify a split) and the run (12 characters of its id; MLflow keeps 36), found in the run's own
    ``split.json``. MLflow keeps one dataset per experiment, name and digest, with the source of the run that logged
    it first: without the run in the digest, every run of a split named the first run's ``split.json`` (issue 40)."""
    labels = data.get("num_labels")
    return {"name": f"{data.get('dataset', '?')} ({labels} labels)" if labels else str(data.get("dataset", "?")),
            "digest": f"{split_digest[:16]}-{run_id[:12]}", "source_type": "local",
            "source": json.dumps({"uri": f"runs:/{run_id}/{SPLIT_ARTIFACT}"})}


# The metric each report protocol reads (reports.tables): the view's first column, so that the group average is the
# report's number; MLflow has no "max over steps" of its own.
_PROTOCOL_METRIC = {"best": TEST_BEST_ACC, "final": TEST_ACC, "median20": TEST_MEDIAN_ACC}


def view_protocol(tables: Iterable[object] = ()) -> str:
    """The protocol of the first report table (the one the sweep's summary and the view stand for); ``best``, the
    layout's default, without one."""
    for table in tables:
        if isinstance(table, dict):
            protocol = table.get("protocol", "best")
            return protocol if protocol in _PROTOCOL_METRIC else "best"
    return "best"


def runs_view(axes: Iterable[str], digest: str = "", protocol: str = "best") -> dict:
    """The shared view of the runs the settings with ``digest`` count, exactly the report's
    (:func:`orchestration.contract.counted_filter`: no search trial, no try-out, no older duplicate), grouped by cell
    in words (:func:`orchestration.contract.group_label`: ``mutexmatch (tuned) · digits-20``) with MLflow's
    *average* per group (the mean over folds; MLflow aggregates min, max and average only, so the std is in the
    experiment's description, :func:`description`), with the test accuracy in % the report's ``protocol`` reads
    first (four decimals, :func:`orchestration.contract.with_percent`: their average rounds to the report's figure),
    then the final and best ones, the level on each axis and the fold as columns beside the run name. Without
    ``digest``: every grid trial (a store before the counted tag)."""
    run_name = "attributes.`Run Name`"
    first = _PROTOCOL_METRIC.get(protocol, TEST_BEST_ACC)
    shown = [first] + [m for m in (TEST_ACC, TEST_BEST_ACC) if m != first]
    metrics = [f"metrics.`{percent_metric(m)}`" for m in shown]
    levels = [f"tags.`{axis_tag(a)}`" for a in axes]
    columns = [*metrics, *levels, f"tags.`{FOLD}`", "attributes.`Source`"]
    # widths in pixels: the header of a tag column is the tag's name, which MLflow cuts to the column; a group's
    # average prints five decimals and "(average)", cut at 150 ("87.32395 (avera…", seen in the UI)
    widths = {run_name: 290, **{m: 180 for m in metrics}, **{t: 195 for t in levels}, f"tags.`{FOLD}`": 130}
    found = counted_filter(digest) if digest else all_of(tag_equals(ROLE, ROLE_TRIAL), tag_equals(KIND, KIND_GRID))
    return {"searchFilter": found, "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
            "selectedColumns": columns, "columnOrder": [run_name, *columns], "columnWidths": widths,
            "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": GROUP}]}}


def experiment_tags(axes: Iterable[str], digest: str = "", tables: Iterable[object] = ()) -> dict[str, str]:
    """The tags a sweep's experiment carries: MLflow's kind (model training, not GenAI) and :func:`runs_view` (the
    protocol of the first of the YAML's report ``tables``) under the settings' own key and the default one (the
    latest launch's settings)."""
    view = json.dumps(runs_view(axes, digest, view_protocol(tables)))
    keys = {view_key(), view_key(digest)}
    return {EXPERIMENT_KIND: EXPERIMENT_KIND_ML, **{SHARED_VIEW_TAG + key: view for key in keys}}


def description(tracking_uri: str, experiment_id: str, digest: str, overrides: Iterable[str], summary: str) -> str:
    """The experiment's description (MLflow shows it on the experiment's page, one click from the UI's start page):
    the per-cell mean ± std over folds the report counts (the sweep's summary, same rule) and the link to the runs
    behind them."""
    given = " ".join(f"--set {i}" for i in overrides) or "no --set"
    return (f"**Runs the report counts** (settings {digest}, {given}): [open them grouped by cell, mean per cell]"
            f"({runs_view_url(tracking_uri, experiment_id, digest)})\n\nTest accuracy %, mean ± std over "
            f"folds (final = last evaluation, best = max over evaluations):\n\n```\n{summary}\n```\n")


def mark_counted(client: MlflowClient, experiment_id: str, digest: str, counted: Iterable[str]) -> None:
    """Tag exactly the runs ``counted`` with :func:`orchestration.contract.counted_tag` (``digest``) in the experiment,
    deleting the tag from runs no longer counted (an older duplicate after ``--force``), so the view's filter holds
    the report's runs."""
    from mlflow.entities import ViewType

    tag = counted_tag(digest)
    marked = {r.info.run_id for r in client.search_runs([experiment_id], counted_filter(digest), ViewType.ACTIVE_ONLY,
                                                       max_results=50_000)}
    add, drop = counted_changes(marked, counted)
    for run_id in sorted(add):
        client.set_tag(run_id, tag, "true")
    for run_id in sorted(drop):
        client.delete_tag(run_id, tag)
    # runs made before the group tag: the view's groups need it (a link run of a reused trial too)
    for run in client.search_runs([experiment_id], counted_filter(digest), ViewType.ACTIVE_ONLY, max_results=50_000):
        if GROUP not in run.data.tags and run.data.tags.get(CELL):
            client.set_tag(run.info.run_id, GROUP, group_label(cell_levels(run.data.tags[CELL])))


def mark_counted_run(client: MlflowClient, experiment_id: str, digest: str, run_id: str, cell: str,
                     fold: int | str) -> None:
    """As a trial's run FINISHES with the settings' config (the newest FINISHED run of its cell and fold, so the one
    they count): tag it for the view and untag an older run of the same cell and fold (a ``--force`` relaunch's
    predecessor), so the view holds the report's runs while a launch goes on; :func:`mark_counted` at its end
    settles the rest."""
    tag = counted_tag(digest)
    found = all_of(counted_filter(digest), tag_equals(CELL, cell), tag_equals(FOLD, str(fold)))
    for run in client.search_runs([experiment_id], found, max_results=1000):
        if run.info.run_id != run_id:
            client.delete_tag(run.info.run_id, tag)
    client.set_tag(run_id, tag, "true")
