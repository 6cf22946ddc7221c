"""Reused trials whose source run is gone (issue 33 item 4), as the report finds them.

A reused trial's link run holds no results of its own: they are the run it names
(:data:`orchestration.contract.REUSED_FROM`). When that run was deleted (MLflow's trash), sits in a deleted
experiment or was purged (``mlflow gc``), the link stands for nothing: it is not counted (the contract's rule,
:class:`orchestration.contract.TrialRow` ``lost``), the report says which trials lost their source, and the table
shows "—" there rather than a run whose metric reads as NaN ("diverged?"). Why a source is lost is the contract's
:func:`orchestration.contract.source_lost`; this module only asks the store about the links it finds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from orchestration import contract as C

if TYPE_CHECKING:
    from reports.runs import RunSource

__all__ = ["mark_lost", "lost_lines"]


def _why(client: Any, run_id: str) -> str:
    """Why the run ``run_id`` holds no results ("" when it does)."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        return C.source_lost(False)
    return C.source_lost(True, run.info.lifecycle_stage, client.get_experiment(run.info.experiment_id).lifecycle_stage)


def mark_lost(source: "RunSource", trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` (:meth:`reports.runs.RunSource.trials`, whose ``run_id`` of a link row is its source's and whose
    ``lost_source`` is None there) with ``lost_source`` filled for the FINISHED links (the only ones a table could
    count, as :meth:`orchestration.store.store.Store.lost_sources`): why the source holds no results, "" when it
    does."""
    links = trials["lost_source"].isna() & (trials["status"] == "FINISHED")
    if not links.any():
        return trials
    why = {rid: _why(source.client, rid) for rid in sorted(set(trials.loc[links, "run_id"]))}
    out = trials.copy()
    out.loc[links, "lost_source"] = out.loc[links, "run_id"].map(why)
    return out


def lost_lines(trials: pd.DataFrame) -> list[str]:
    """One line per trial run of ``trials`` (marked by :func:`mark_lost`) whose reused source is gone."""
    lost = trials[trials["lost_source"].fillna("") != ""].sort_values(["run_name", "run_id"])
    return [C.lost_source_line(name, rid, "", why)
            for name, rid, why in zip(lost["run_name"], lost["run_id"], lost["lost_source"])]
