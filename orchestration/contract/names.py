"""Names: cell ids, trial keys, run names, the ``best.`` prefix and Optuna study names. Runs are found by their
tags, never by a run name. Standard library only."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from orchestration.contract.tags import KIND_GRID, TUNED_AXIS, TUNED_LEVEL

__all__ = ["cell_id", "cell_levels", "tuned_levels", "trial_key", "TRYOUT", "trial_run_name", "parent_run_name",
           "split_trial_key", "BEST_PREFIX", "best_param_prefix", "study_name"]


def cell_id(levels: Iterable[tuple[str, str]]) -> str:
    """``axis=level`` pairs joined by commas, axes in YAML order: the ``mutexmatch.cell`` tag."""
    return ",".join(f"{axis}={level}" for axis, level in levels)


def cell_levels(cell: str) -> list[tuple[str, str]]:
    """The ``(axis, level)`` pairs of a :func:`cell_id` (axis names and levels hold neither ``,`` nor ``=``)."""
    return [(axis, level) for axis, _, level in (pair.partition("=") for pair in cell.split(",") if pair)]


def tuned_levels(levels: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The levels of a searched cell's refit cell: the same levels plus ``tuned=true``."""
    return (*levels, (TUNED_AXIS, TUNED_LEVEL))


def trial_key(cell: str, fold: int | str) -> str:
    """``<cell id>/fold<k>``: what a grid trial is known by (launch plan, skipping, summaries), unique in a sweep."""
    return f"{cell}/fold{fold}"


TRYOUT = "try-out"  # the last word of a try-out's run name (orchestration.spec.tryouts)


def trial_run_name(levels: Iterable[tuple[str, str]], fold: int | str, kind: str = KIND_GRID,
                   tryout: bool = False) -> str:
    """The run name the MLflow UI lists, levels first so the run list does not cut them away:
    ``mutexmatch · cifar10-40 · fold 3`` (a search, refit or smoke trial ends in ``· search`` etc.; a refit's
    ``tuned=true`` level is said by that; a ``--set`` try-out's run, which the YAML's counted runs never include,
    ends in ``· try-out``). Runs are found by their tags, never by this name."""
    parts = [level for axis, level in levels if axis != TUNED_AXIS] + [f"fold {fold}"]
    return " · ".join(parts + ([] if kind == KIND_GRID else [kind]) + ([TRYOUT] if tryout else []))


def parent_run_name(sweep: str, started: datetime, smoke: bool = False) -> str:
    """``sweep table1_cifar_svhn · 2026-11-26 07:57``: a launch's parent run in the UI."""
    return f"sweep {sweep} · {started:%Y-%m-%d %H:%M}" + (" · smoke" if smoke else "")


def split_trial_key(key: str) -> tuple[str, str] | None:
    """``(cell id, fold)`` of a :func:`trial_key`, or None when ``key`` is not one."""
    cell, sep, fold = key.rpartition("/fold")
    return (cell, fold) if sep and fold.isdigit() else None


BEST_PREFIX = "best."  # parent run: params/tags/metrics of a search's best trial


def best_param_prefix(cell: str, fold: int | str) -> str:
    """The ``best.`` prefix of one study when a sweep has several (``=`` and ``,`` are not legal in MLflow keys)."""
    return f"{BEST_PREFIX}{cell.replace('=', '-').replace(',', '.')}.fold{fold}."


def study_name(sweep: str, key: str, search_hash: str) -> str:
    """An Optuna study's name: the sweep, the searched trial key and the search's hash (a changed search is a new
    study; a relaunch of the same one continues it)."""
    return f"{sweep}:{key}:{search_hash}"
