"""What the MLflow UI shows of a sweep: the experiment's kind and shared runs view, the link a command prints, and
a trial's Dataset column. Not part of the layout contract: no reader depends on it."""

from __future__ import annotations

import json
from typing import Iterable

from orchestration.contract import (EXPERIMENT_KIND, EXPERIMENT_KIND_ML, FOLD, ROLE, ROLE_TRIAL, SHARED_VIEW_TAG,
                                    SPLIT_ARTIFACT, TEST_ACC, TEST_BEST_ACC, axis_tag, percent_metric)
from orchestration.contract.filters import tag_equals

# What the MLflow UI shows at first open. MLflow 3.17 opens an experiment on its GenAI overview unless the sidebar's
# "Model training" switch (kept per browser) or the URL says otherwise, so every printed link names the runs view
# with ``workflowType=machine_learning``; the experiment also carries MLflow's own kind tag (older MLflow 3 UIs
# choose the tab by it) and a shared view (MLflow's "Share" button stores one the same way) with the columns that
# matter, which the printed link opens.
RUNS_VIEW_KEY = "mutexmatch-trials"
UI_HOST, UI_PORT = "127.0.0.1", 5000


def dataset_input(data: dict, split_digest: str, run_id: str) -> dict[str, str]:
    """MLflow's Dataset column for a trial: the dataset and its label budget, identified by the labeled split's
    digest (MLflow keeps 36 characters; 16 identify a split) and found in the run's ``split.json``."""
    labels = data.get("num_labels")
    return {"name": f"{data.get('dataset', '?')} ({labels} labels)" if labels else str(data.get("dataset", "?")),
            "digest": split_digest[:16], "source_type": "local",
            "source": json.dumps({"uri": f"runs:/{run_id}/{SPLIT_ARTIFACT}"})}


def runs_view(axes: Iterable[str]) -> dict:
    """The shared view of the trial runs: one flat row per trial (the filter leaves the parent rows out, so nothing
    is collapsed), sorted by name, with the final and best test accuracy in %, the level on each axis and the fold
    as columns beside the run name, widened so the names fit."""
    run_name = "attributes.`Run Name`"
    metrics = [f"metrics.`{percent_metric(TEST_ACC)}`", f"metrics.`{percent_metric(TEST_BEST_ACC)}`"]
    levels = [f"tags.`{axis_tag(a)}`" for a in axes]
    columns = [*metrics, *levels, f"tags.`{FOLD}`", "attributes.`Source`"]
    # widths in pixels: the header of a tag column is the tag's name, which MLflow cuts to the column
    widths = {run_name: 290, **{m: 140 for m in metrics}, **{t: 195 for t in levels}, f"tags.`{FOLD}`": 130}
    return {"searchFilter": tag_equals(ROLE, ROLE_TRIAL), "orderByKey": "tags.`mlflow.runName`",
            "orderByAsc": True, "selectedColumns": columns, "columnOrder": [run_name, *columns],
            "columnWidths": widths}


def experiment_tags(axes: Iterable[str]) -> dict[str, str]:
    """The tags a sweep's experiment carries: MLflow's kind (model training, not GenAI) and :func:`runs_view`."""
    return {EXPERIMENT_KIND: EXPERIMENT_KIND_ML, SHARED_VIEW_TAG + RUNS_VIEW_KEY: json.dumps(runs_view(axes))}


def runs_view_url(base: str, experiment_id: str) -> str:
    """The runs view of experiment ``experiment_id`` at ``base`` (a server's address), opened on the shared view."""
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={RUNS_VIEW_KEY}")


def ui_hint(tracking_uri: str, experiment_id: str) -> str:
    """Where to look at the runs: the runs view of an ``mlflow server`` (not its GenAI overview), or for a SQLite
    store the command that serves it on this machine only, and the same view's address once it runs."""
    if tracking_uri.startswith(("http://", "https://")):
        return runs_view_url(tracking_uri, experiment_id)
    return (f"mlflow ui --backend-store-uri {tracking_uri} --host {UI_HOST} --port {UI_PORT}, then open "
            f"{runs_view_url(f'http://{UI_HOST}:{UI_PORT}', experiment_id)}")
