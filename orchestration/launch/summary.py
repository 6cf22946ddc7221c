"""What a sweep launch prints at the end, read back from MLflow: per-cell mean ± std over folds, the best search
parameters, and which trials finished, failed or did not run; and what the MLflow UI shows of it
(:func:`publish_counted`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from orchestration import contract as C
from orchestration.contract.filters import NEWEST_FIRST
from orchestration.spec.plan import SweepPlan
from orchestration.store import mlflow_ui
from orchestration.store.store import Store

__all__ = ["TrialStatus", "format_hours", "refit_expected", "grid_runs", "refit_runs", "runs_by_cell", "grid_summary",
           "trial_statuses", "format_statuses", "publish_counted"]

SUMMARY_METRICS = ((C.TEST_ACC, "final"), (C.TEST_BEST_ACC, "best"))


def refit_expected(store: Store, plan: SweepPlan) -> dict[str, Any]:
    """Refit key → the refit trial the searches' best parameters give now (none before a search has finished)."""
    if not plan.refits:
        return {}
    from orchestration.launch.refit import best_by_cell, refit_trials  # refit imports this module's package peers

    return refit_trials(plan, best_by_cell(plan, store))[0]


def _newest_matching(store: Store, kind: str, trials: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Trial key → the newest FINISHED run of ``kind`` whose config hash is one of that trial's
    (:attr:`orchestration.spec.plan.GridTrial.hashes`), and the labels of FINISHED runs of other settings (their cell
    and fold not in ``trials`` or another config hash): those enter no table. The rule is the report's and the UI
    view's (:func:`orchestration.contract.counted_rows`)."""
    runs = list(store.finished_trials(kind, order_by=NEWEST_FIRST))
    lost = store.lost_sources(runs)  # a reused trial whose source is gone counts as not run
    rows = [C.TrialRow(tg.get(C.CELL, "?"), tg.get(C.FOLD, "?"), tg.get(C.CONFIG_HASH, ""), run.info.status,
                       int(run.info.start_time or 0), run.info.run_id, run, lost.get(run.info.run_id, ""))
            for run in runs for tg in (run.data.tags,)]
    counted, other = C.counted_rows(rows, {key: t.hashes for key, t in trials.items()})
    return ({key: row.ref for key, row in counted.items()},
            [C.other_settings_label(r.cell, r.fold, r.config_hash) for r in other])


def grid_runs(store: Store, plan: SweepPlan) -> tuple[dict[str, Any], list[str]]:
    """Grid key → the newest FINISHED run with a planned config hash (from any launch of this experiment), and the
    FINISHED grid runs of other settings."""
    kind = C.KIND_SMOKE if plan.smoke else C.KIND_GRID
    return _newest_matching(store, kind, {t.key: t for t in plan.grid})


def refit_runs(store: Store, plan: SweepPlan) -> tuple[dict[str, Any], list[str]]:
    """Refit key → the newest FINISHED refit run with the parameters the searches' best give now, and the FINISHED
    refit runs of other settings (another search's best, another refit base)."""
    if not plan.refits or plan.smoke:
        return {}, []
    return _newest_matching(store, C.KIND_REFIT, refit_expected(store, plan))


def publish_counted(store: Store, plan: SweepPlan, tracking_uri: str, overrides: Sequence[str], summary: str) -> None:
    """The MLflow UI after a launch: the runs these settings count (:func:`grid_runs` and :func:`refit_runs`, the
    report's rule) marked for the view, the view and the experiment's description (``summary``, the per-cell mean ±
    std) set. A smoke launch records no settings and marks nothing."""
    if plan.smoke or not plan.settings_digest:
        return
    counted = [r.info.run_id for runs in (grid_runs(store, plan)[0], refit_runs(store, plan)[0]) for r in runs.values()]
    mlflow_ui.mark_counted(store.client, store.experiment_id, plan.settings_digest, counted)
    tags = {**mlflow_ui.experiment_tags(plan.spec.axes, plan.settings_digest, plan.spec.tables),
            C.NOTE: mlflow_ui.description(tracking_uri, store.experiment_id, plan.settings_digest, overrides, summary)}
    for key, value in tags.items():
        store.client.set_experiment_tag(store.experiment_id, key, value)


def format_hours(h: float) -> str:
    """Accelerator-hours with the digits that matter: ``2,464``, ``12.3``, ``0.00213`` (never a bare 0.0)."""
    return f"{h:,.0f}" if h >= 100 else f"{h:.1f}" if h >= 1 else f"{h:.3g}"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    pct = [C.percent(v) for v in values]
    std = statistics.stdev(pct) if len(pct) > 1 else 0.0
    return f"{statistics.fmean(pct):.2f} ± {std:.2f}"


def runs_by_cell(store: Store, plan: SweepPlan) -> tuple[dict[str, list[Any]], dict[str, int], list[str]]:
    """Cell id → the FINISHED runs its folds count (:func:`grid_runs`, :func:`refit_runs`; in fold order), a
    searched cell's refit (``…,tuned=true``) a cell of its own; the folds each cell plans; the labels of FINISHED runs
    of other settings. What the summary's rows and ``--register-model`` (:mod:`.register`) read."""
    (grid, other), (refit, other_refit) = grid_runs(store, plan), refit_runs(store, plan)
    runs = {**grid, **refit}
    slots = [(t.cell.id, t.key) for t in plan.grid] + [(r.tuned_cell.id, r.key) for r in plan.refits]
    cells: dict[str, list[Any]] = {}
    for cell, key in slots:
        cells.setdefault(cell, [])
        if key in runs:
            cells[cell].append(runs[key])
    return cells, {c: sum(1 for cell, _ in slots if cell == c) for c in cells}, other + other_refit


def grid_summary(store: Store, plan: SweepPlan) -> str:
    """Test accuracy (%) per cell: mean ± std over the finished folds, final (last evaluation) and best; a searched
    cell's refit (``…,tuned=true``) is a row of its own."""
    cells, folds_per_cell, ignored_runs = runs_by_cell(store, plan)
    header = ("cell", "folds", *(f"{label} test acc %" for _, label in SUMMARY_METRICS))
    rows = [header]
    for cell, cell_runs in cells.items():
        results = [store.results_run(r) for r in cell_runs]  # a reused trial's: the run it links to
        vals = [_mean_std([r.data.metrics[m] for r in results if m in r.data.metrics]) for m, _ in SUMMARY_METRICS]
        reused = sum(C.REUSED_FROM in r.data.tags for r in cell_runs)
        rows.append((cell, f"{len(cell_runs)}/{folds_per_cell[cell]}" + (f" ({reused} reused)" if reused else ""),
                     *vals))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ignored = C.other_settings_line(ignored_runs)
    return "\n".join(lines + ([ignored] if ignored else []))


@dataclass
class TrialStatus:
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)   # trials that took more than one attempt, and why
    lost: list[str] = field(default_factory=list)      # trials whose run was deleted while the launch ran


def trial_statuses(store: Store, parent_run_id: str | None, plan: SweepPlan, grid_keys: list[str],
                   study_phases: list[str], skipped: list[str]) -> TrialStatus:
    """Status of every trial this launch was meant to run, from its child runs."""
    st = TrialStatus(skipped=list(skipped))
    by_key: dict[str, list[str]] = {}
    if parent_run_id is not None:
        for run in store.children(parent_run_id):
            tg = run.data.tags
            key = _status_key(tg)
            by_key.setdefault(key, []).append(run.info.status)
            if (note := _retried(key, tg)) is not None:
                st.retried.append(note)
    if parent_run_id is not None:
        st.lost = _lost(store, parent_run_id, by_key)
    for key in grid_keys:
        statuses = by_key.get(key, [])
        (st.finished if "FINISHED" in statuses else st.failed if "FAILED" in statuses else st.not_finished
         ).append(key)
    for study in plan.searches:
        if study.phase not in study_phases:
            continue
        statuses = by_key.get(f"{study.phase}:{study.key}", [])
        done = statuses.count("FINISHED")
        failed = statuses.count("FAILED")
        label = f"search {study.key}"
        if done >= study.n_trials:
            st.finished.append(f"{label} ({done}/{study.n_trials} trials)")
        elif failed:
            st.failed.append(f"{label} ({done}/{study.n_trials} finished, {failed} failed)")
        else:
            st.not_finished.append(f"{label} ({done}/{study.n_trials} finished)")
    return st


def _retried(key: str, tags: dict[str, str]) -> str | None:
    """``cell/fold1 (2 attempts; a failed one: <its error line>)`` for a trial run Tune started more than once (a
    failure retried, or an interrupted trial resumed), else None: a retry is never silent (issue 40 item 2)."""
    attempts = tags.get(C.ATTEMPTS, "1")
    if not attempts.isdigit() or int(attempts) < 2:
        return None
    error = (tags.get(C.ERROR) or "").strip().splitlines()
    return f"{key} ({attempts} attempts" + (f"; a failed one: {error[0][:200]}" if error else "") + ")"


def _status_key(tags: dict[str, str]) -> str:
    """A trial run's key among the launch's statuses: its grid key, a search trial's prefixed by its phase."""
    key = C.trial_key(tags.get(C.CELL), tags.get(C.FOLD))
    return f"{tags.get(C.SEARCH_PHASE)}:{key}" if tags.get(C.KIND) == C.KIND_SEARCH else key


def _lost(store: Store, parent_run_id: str, by_key: dict[str, list[str]]) -> list[str]:
    """The launch's trial runs deleted (MLflow's trash) with no FINISHED run of their trial left (adversarial
    finding #6): a run that a restored launch deleted itself was replaced, and is not lost."""
    lost = []
    for run in store.deleted_children(parent_run_id):
        key = _status_key(run.data.tags)
        if "FINISHED" not in by_key.get(key, []):
            lost.append(f"{key} (its MLflow run {run.info.run_id} was deleted while the launch ran; a new launch of "
                        "the sweep, without --resume, trains it again)")
    return sorted(lost)


def _grouped(items: list[str]) -> str:
    """``cell/fold0, cell/fold1`` → ``cell folds 0,1`` (search entries are kept as they are)."""
    groups: dict[str, list[str]] = {}
    for item in items:
        parts = C.split_trial_key(item)
        if parts is not None and not item.startswith("search "):
            groups.setdefault(parts[0], []).append(parts[1])
        else:
            groups.setdefault(item, [])
    return "; ".join(f"{k} fold{'s' if len(v) > 1 else ''} {','.join(v)}" if v else k for k, v in groups.items())


def format_statuses(st: TrialStatus) -> str:
    lines = []
    for label, items in (("finished", st.finished), ("skipped (already FINISHED, same config)", st.skipped),
                         ("FAILED", st.failed), ("not finished", st.not_finished)):
        if items:
            lines.append(f"{label} ({len(items)}): {_grouped(items)}")
    for label, notes in (("retried", st.retried), ("lost", st.lost)):
        if notes:
            lines.append(f"{label} ({len(notes)}): {'; '.join(sorted(notes))}")
    return "\n".join(lines)
