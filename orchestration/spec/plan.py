"""From a validated sweep spec to the trials it runs: grid trials (cell × fold), smoke trials, search studies.

A *grid trial* is one cell on one fold with a fixed config (``kind=grid``; ``kind=smoke`` under ``--smoke``: every
cell on the first fold with the smoke overrides). A *search study* is one Optuna study over ``search.space`` for one
searched cell on one search fold; its ``n_trials`` trials are created by the searcher at run time, so the plan only
knows how many there are and their iteration budget (ASHA may stop some early). A *refit slot* is a searched cell
on one refit fold: after the search it becomes a trial of ``kind=refit`` with the best parameters set.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from mutexmatch.config import config_hashes, parse_config

from orchestration.contract import KIND_GRID, KIND_REFIT, KIND_SMOKE, trial_key, tuned_levels
from orchestration.spec.models import SearchSpec, SweepSpec
from orchestration.spec.sweepfile import Cell, expand_cells, search_cells, set_dotted, spec_hash, trial_config

__all__ = ["GridTrial", "SearchStudy", "RefitSlot", "SweepPlan", "REFIT_PHASE", "build_plan", "expected_runs"]

REFIT_PHASE = "refit"  # the Tune phase (and launch-plan entry) of the refit trials


class _OnFold:
    """``key``: ``<cell id>/fold<k>`` of a trial's or a study's cell and fold (the MLflow run name of a grid trial)."""

    cell: Cell
    fold: int

    @property
    def key(self) -> str:
        return trial_key(self.cell.id, self.fold)


@dataclass(frozen=True)
class GridTrial(_OnFold):
    """One cell on one fold. ``key`` (``<cell id>/fold<k>``) is the MLflow run name and unique in the sweep."""

    kind: str                 # "grid" or "smoke"
    cell: Cell
    fold: int
    config: dict[str, Any]    # raw RunConfig mapping (output_dir and train.device are added by the trainable)
    config_hash: str          # the current rule's: the tag of a new run
    iterations: int
    evaluations: int
    legacy_hashes: tuple[str, ...] = ()   # the same config under earlier hash rules (mutexmatch.config.config_hashes)

    @property
    def hashes(self) -> frozenset[str]:
        """The config hashes a FINISHED run may carry to count as this trial (``mutexmatch.config.config_hashes``:
        current and legacy): what the sweep skips, and the only runs the summary, the status and (through the
        recorded expected runs) the report count for it."""
        return frozenset({self.config_hash, *self.legacy_hashes})


@dataclass(frozen=True)
class SearchStudy(_OnFold):
    """One Optuna study: ``n_trials`` trials of ``cell`` on ``fold`` sampling ``search.space``."""

    index: int
    cell: Cell
    fold: int
    config: dict[str, Any]    # raw RunConfig mapping before the sampled parameters are set
    search: SearchSpec
    n_trials: int
    max_concurrent: int | None
    iterations: int
    evaluations: int
    search_hash: str

    @property
    def phase(self) -> str:
        return f"search{self.index:02d}"


@dataclass(frozen=True)
class RefitSlot:
    """A searched cell on one refit fold, waiting for the search's best parameters: the grid's config of that cell
    plus ``search.refit.base``. :meth:`trial` makes the refit trial once the parameters are known."""

    cell: Cell                # the searched cell (the refit trial's cell adds tuned=true)
    fold: int
    config: dict[str, Any]    # raw RunConfig mapping before the best parameters are set
    iterations: int
    evaluations: int

    @property
    def tuned_cell(self) -> Cell:
        return Cell(tuned_levels(self.cell.levels))

    @property
    def key(self) -> str:
        return trial_key(self.tuned_cell.id, self.fold)

    def trial(self, params: dict[str, Any]) -> GridTrial:
        """The refit trial with ``params`` (dotted RunConfig paths → config values) set; its config hash covers
        them, so a relaunch skips it only when the same parameters already FINISHED."""
        raw = self.config
        for path, value in params.items():
            raw = set_dotted(raw, path, value)
        (h, *legacy), iters, evals = _budget(raw)
        return GridTrial(KIND_REFIT, self.tuned_cell, self.fold, raw, h, iters, evals, tuple(legacy))


@dataclass
class SweepPlan:
    spec: SweepSpec
    spec_hash: str
    smoke: bool
    grid: list[GridTrial] = field(default_factory=list)
    searches: list[SearchStudy] = field(default_factory=list)
    refits: list[RefitSlot] = field(default_factory=list)
    settings_digest: str = ""         # of the amended sweep YAML (orchestration.spec.overrides.load_sweep sets it)

    @property
    def num_trials(self) -> int:
        return len(self.grid) + sum(s.n_trials for s in self.searches) + len(self.refits)


def expected_runs(plan: SweepPlan, refits: Iterable[GridTrial] = ()) -> dict[str, dict[str, list[str]]]:
    """The runs ``plan`` counts, by trial key: the config hashes of its grid (or smoke) trials and of the refit
    trials known so far, the search hashes of its studies. The sweep records it for the report
    (``contract.expected_runs_artifact``); the report's tables take no other run."""
    def table(trials: Iterable[GridTrial]) -> dict[str, list[str]]:
        return {t.key: sorted(t.hashes) for t in trials}

    return {"grid": table(plan.grid), "search": {s.key: [s.search_hash] for s in plan.searches},
            "refit": table(refits)}


def _budget(raw: dict[str, Any]) -> tuple[tuple[str, ...], int, int]:
    """(config hashes, current first; iterations; evaluations) of a raw trial config."""
    cfg = parse_config(raw)
    evals = -(-cfg.train.iterations // cfg.train.eval_interval)
    return config_hashes(cfg), cfg.train.iterations, evals


def build_plan(spec: SweepSpec, project_dir: str | Path, *, smoke: bool = False, n_trials: int | None = None,
               max_concurrent: int | None = None) -> SweepPlan:
    """Expand ``spec`` (already validated by :func:`orchestration.spec.sweepfile.load_spec`) into trials.

    ``smoke``: every cell on ``folds[0]`` with the smoke overrides, no search. ``n_trials``/``max_concurrent``
    override the search section's values (``--n-trials``, ``--max-concurrent``).
    """
    project = Path(project_dir).resolve()
    plan = SweepPlan(spec=spec, spec_hash=spec_hash(spec), smoke=smoke)
    folds = spec.folds[:1] if smoke else spec.folds
    for cell in expand_cells(spec):
        for fold in folds:
            raw = trial_config(spec, cell, fold, project_dir=project, smoke=smoke)
            (h, *legacy), iters, evals = _budget(raw)
            plan.grid.append(GridTrial(KIND_SMOKE if smoke else KIND_GRID, cell, fold, raw, h, iters, evals,
                                       tuple(legacy)))
    if smoke or spec.search is None:
        return plan
    search = spec.search
    if n_trials is not None and n_trials < 1:
        raise ValueError(f"--n-trials={n_trials}: must be >= 1")
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError(f"--max-concurrent={max_concurrent}: must be >= 1")
    trials = n_trials or search.n_trials
    for cell in search_cells(spec):
        for fold in search.folds or spec.folds[:1]:
            raw = trial_config(spec, cell, fold, project_dir=project, search=True)
            hashes, iters, evals = _budget(raw)
            # what follows the search (refit, where the study is stored) does not change its trials; the config's
            # oldest hash (config_hashes) keeps a study's identity, and its Optuna name, across hash rules
            ident = {"config_hash": hashes[-1],
                     "search": search.model_dump(mode="json", exclude={"max_concurrent", "refit", "storage"}),
                     "n_trials": trials}
            search_hash = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
            plan.searches.append(SearchStudy(len(plan.searches), cell, fold, raw, search, trials,
                                             max_concurrent or search.max_concurrent, iters, evals, search_hash))
        if search.refit.enabled:
            for fold in search.refit.folds or spec.folds:
                raw = trial_config(spec, cell, fold, project_dir=project, refit=True)
                _, iters, evals = _budget(raw)
                plan.refits.append(RefitSlot(cell, fold, raw, iters, evals))
    return plan
