"""Refit: the search's best parameters trained on the refit folds with the grid's config (the full schedule, no
validation split) — tune, then evaluate.

Each searched cell takes the best FINISHED search trial over its studies (one per search fold), by the search's
validation metric and mode (:func:`orchestration.launch.best.best_by_cell`); its parameters are set on every refit slot
of the cell (``plan.refits``), giving trials of kind ``refit`` under the cell id plus ``tuned=true``. Their config hash
covers the parameters, so a relaunch skips a refit trial only when the same parameters already FINISHED, and a search
that finds better ones trains again.
"""

from __future__ import annotations

from orchestration import contract as C
from orchestration.launch.best import BestTrial, best_by_cell
from orchestration.spec.plan import GridTrial, SweepPlan
from orchestration.store.store import Store

__all__ = ["BestTrial", "best_by_cell", "refit_trials", "pending_refits"]


def refit_trials(plan: SweepPlan, best: dict[str, BestTrial]) -> tuple[dict[str, GridTrial], list[str]]:
    """The refit trials (by key) of every searched cell that has a best trial, and one line per cell that has
    none (all its search trials failed)."""
    trials: dict[str, GridTrial] = {}
    missing: list[str] = []
    for slot in plan.refits:
        if slot.cell.id in best:
            trials[slot.key] = slot.trial(best[slot.cell.id].params)
        elif slot.cell.id not in missing:
            missing.append(slot.cell.id)
    return trials, [f"refit of {cell}: no FINISHED search trial, nothing to refit" for cell in missing]


def pending_refits(trials: dict[str, GridTrial], store: Store, *, force: bool) -> tuple[list[str], list[str]]:
    """Of ``trials`` (:func:`refit_trials`), the keys still to run and those already FINISHED with the same
    parameters (``force``: none is finished)."""
    done = {} if force else store.finished_grid_hashes(kind=C.KIND_REFIT)
    todo = [k for k, t in trials.items() if not t.hashes & done.get(k, set())]
    return todo, [k for k in trials if k not in todo]
