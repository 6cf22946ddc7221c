"""Which of an experiment's trial runs a report counts: the runs its settings expect (the digest every launch of
the YAML and its ``--set`` records, :func:`read_settings`, :func:`split_by_settings`) and, of those, the newest
FINISHED run per cell and fold (:func:`select_trials`, the rule :mod:`orchestration.contract.counted` states for the
report, the summary and the MLflow view alike). The frames are :mod:`reports.runs`'s."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from orchestration import contract as C  # the layout's names only: standard library, no Ray, no MLflow
from reports.runs import PAGE, RunSource

__all__ = ["Settings", "read_settings", "trial_rows", "split_by_settings", "select_trials"]


@dataclass
class Settings:
    """Which runs the YAML (with ``--set``) counts: its settings digest and the runs its launches recorded
    (:func:`orchestration.contract.expected_runs_artifact`); ``expected`` is None for a store whose launches predate
    the record (then runs are chosen by cell and fold only, and ``note`` says so)."""

    digest: str
    expected: dict[str, dict[str, set[str]]] | None = None
    note: str = ""

    def hashes(self, section: str) -> dict[str, set[str]] | None:
        return None if self.expected is None else self.expected.get(section, {})


def read_settings(source: RunSource, experiment_id: str, digest: str, overrides: Sequence[str] = ()) -> Settings:
    """The expected runs every launch of these settings recorded (their union: a hash-rule change or a refit
    recorded later adds to it). ``ValueError`` when the experiment's launches recorded other settings only, naming
    the ``--set`` each launch was run with."""
    parents = source.client.search_runs([experiment_id], C.sweeps_filter(), max_results=PAGE)
    mine = [p for p in parents if p.data.tags.get(C.SETTINGS_TAG + digest) == "true"]
    if not mine:
        recorded = [p for p in parents if any(k.startswith(C.SETTINGS_TAG) for k in p.data.tags)]
        if not recorded:
            return Settings(digest, None, "no launch of this experiment recorded which runs its settings count (a "
                                          "store from before that record): runs are chosen by cell and fold only")
        sets = sorted({" ".join(f"--set {i}" for i in json.loads(p.data.tags.get(C.OVERRIDES, "[]"))) or "no --set"
                       for p in recorded})
        given = " ".join(f"--set {i}" for i in overrides) or "no --set"
        if given in sets:  # the same --set gave another digest: the file itself changed (report-after-yaml-edit)
            raise ValueError(f"experiment at {source.tracking_uri}: no launch of this YAML with these settings "
                             f"(settings digest {digest}), though a launch ran with {given}: the YAML was edited "
                             "since; report the YAML as it was launched, or launch the edited one (finished trials "
                             "are skipped)")
        raise ValueError(f"experiment at {source.tracking_uri}: no launch of this YAML with these settings ({given}; "
                         f"settings digest {digest}); its launches ran with: {'; '.join(sets)}. Pass the --set of "
                         "the launch to report, or launch these settings (finished trials are skipped)")
    expected: dict[str, dict[str, set[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in mine:
            path = source.client.download_artifacts(p.info.run_id, C.expected_runs_artifact(digest), tmp)
            for section, table in json.loads(Path(path).read_text()).items():
                for key, hashes in table.items():
                    expected.setdefault(section, {}).setdefault(key, set()).update(hashes)
    return Settings(digest, expected)


def trial_rows(trials: pd.DataFrame) -> list[C.TrialRow]:
    """The frame's runs as the contract's rule reads them (:mod:`orchestration.contract.counted`), ``ref`` = index."""
    return [C.TrialRow(cell, fold, config_hash, status, start, run_id, ref, lost or "") for ref, cell, fold,
            config_hash, status, start, run_id, lost in zip(trials.index, trials["cell"], trials["fold"],
            trials["config_hash"], trials["status"], trials["start_time"], trials["run_id"], trials["lost_source"])]


def split_by_settings(trials: pd.DataFrame, expected: dict[str, set[str]] | None) -> tuple[pd.DataFrame, list[str]]:
    """(the runs whose config hash is one the settings expect for their cell and fold, the labels of the FINISHED
    runs that are not: those enter no table). ``expected`` None: every run is kept."""
    if expected is None or trials.empty:
        return trials, []
    ok = pd.Series([C.settings_expect(expected, row) for row in trial_rows(trials)], index=trials.index, dtype=bool)
    other = trials[~ok & (trials["status"] == "FINISHED")].sort_values(["cell", "fold", "start_time"])
    labels = [C.other_settings_label(c, f, h) for c, f, h in zip(other["cell"], other["fold"], other["config_hash"])]
    return trials[ok].reset_index(drop=True), labels


def select_trials(trials: pd.DataFrame, folds: Iterable[int]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Split into (used, duplicates, unfinished).

    ``used``: FINISHED runs of the YAML's folds, one per (cell, fold) — the most recently started one, because a
    relaunched sweep (``--force``, or after the YAML changed) writes a new run and the newest reflects the current
    YAML (:func:`orchestration.contract.newest_finished`, the rule the sweep's summary and the MLflow UI's view use). ``duplicates``: older FINISHED runs of the same (cell, fold), left out. ``unfinished``: runs of the YAML's
    folds that are RUNNING, FAILED, KILLED or SCHEDULED.
    """
    in_folds = trials[trials["fold"].isin(list(folds))]
    newest = {row.ref for row in C.newest_finished(trial_rows(in_folds)).values()}  # the rule the UI's view shares
    is_used = in_folds.index.isin(list(newest))
    finished = (in_folds["status"] == "FINISHED") & (in_folds["lost_source"].fillna("") == "")  # lost: said apart
    used = in_folds[is_used].sort_values(["cell", "fold"]).reset_index(drop=True)
    duplicates = in_folds[finished & ~is_used].sort_values(["cell", "fold"]).reset_index(drop=True)
    unfinished = in_folds[in_folds["status"] != "FINISHED"].sort_values(["cell", "fold"]).reset_index(drop=True)
    return used, duplicates, unfinished
