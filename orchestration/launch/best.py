"""The best trial of each search study and of each searched cell, read from the MLflow search runs: what the refit
trains, what the sweep logs as ``best.*`` on its parent run and what a relaunch checks the finished refits against.
The rule itself (which trial is best, ties, failed and ASHA-stopped trials) is :func:`orchestration.contract
.best_trial`, the one the report uses too.

Values are typed: a search run carries the values Tune's searcher sampled (tag ``mutexmatch.sampled``, JSON), and
the config values they stand for are the chosen algorithm's parameter model's to say
(:func:`orchestration.spec.sweepfile.sampled_config_values`), exactly as the trial trained them. A run logged before
that tag has only its MLflow params (``str`` of each config value); they are read back by :func:`legacy_config_value`,
the reading its refit was made with, so a stored refit keeps its config hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mutexmatch.yamlfile import YamlFileError, load_text
from orchestration import contract as C
from orchestration.spec.plan import SearchStudy, SweepPlan
from orchestration.spec.sweepfile import sampled_config_values
from orchestration.store.store import Store, as_store

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["BestTrial", "legacy_config_value", "best_of_study", "best_by_cell"]


@dataclass(frozen=True)
class BestTrial:
    """A study's (or a cell's) best search trial: the config values it trained with (dotted path → value), its
    sampled values (None for a run logged before the ``mutexmatch.sampled`` tag), its objective and MLflow run."""

    params: dict[str, Any]
    sampled: dict[str, Any] | None
    value: float
    run_id: str


def legacy_config_value(logged: str) -> Any:
    """A config value back from its MLflow param string, for a run without the ``mutexmatch.sampled`` tag: ints and
    floats exactly (YAML 1.1 would read ``1e-05`` as a string), then ``None`` and YAML booleans, else the string
    (``0.6C``)."""
    for convert in (int, float):
        try:
            return convert(logged)
        except ValueError:
            pass
    if logged == "None":  # str(None): YAML's null is spelled differently
        return None
    try:
        value = load_text(logged, "a logged param")
    except YamlFileError:  # not YAML, or YAML 1.1's octal or base 60: text, as it was logged
        return logged
    return value if isinstance(value, bool) else logged


def _outcomes(store: Store, study: SearchStudy, position: int) -> list[C.SearchOutcome]:
    """The study's FINISHED search runs as the rule weighs them (the query keeps only FINISHED runs)."""
    return [C.SearchOutcome(run.data.metrics.get(study.search.metric), True, position, run.info.start_time or 0,
                            run.info.run_id, ref=run)
            for run in store.finished_search_runs(study.search_hash)]


def _best_trial(found: C.SearchOutcome, study: SearchStudy) -> BestTrial:
    run = found.ref
    sampled = C.read_sampled(run.data.tags)
    if sampled is not None:
        params = sampled_config_values(study.config, sampled)
    else:
        params = {p: legacy_config_value(run.data.params.get(p, "?")) for p in study.search.space}
    assert found.value is not None  # scored
    return BestTrial(params, sampled, found.value, run.info.run_id)


def best_of_study(store: Store, study: SearchStudy) -> BestTrial | None:
    """The best FINISHED search trial of ``study`` (None before one has a value)."""
    found = C.best_trial(_outcomes(store, study, 0), study.search.mode)
    return None if found is None else _best_trial(found, study)


def best_by_cell(plan: SweepPlan, store: Store | MlflowClient, experiment_id: str | None = None
                 ) -> dict[str, BestTrial]:
    """Searched cell id → its best FINISHED search trial over every study of the cell (search-fold order breaks
    ties, :func:`orchestration.contract.best_trial`); cells without one are missing. (``experiment_id``: only with
    a client for ``store``, see :func:`orchestration.store.store.as_store`.)"""
    store = as_store(store, experiment_id)
    by_cell: dict[str, list[tuple[SearchStudy, list[C.SearchOutcome]]]] = {}
    for study in plan.searches:
        studies = by_cell.setdefault(study.cell.id, [])
        studies.append((study, _outcomes(store, study, len(studies))))
    best = {}
    for cell, studies in by_cell.items():
        found = C.best_trial((o for _, outcomes in studies for o in outcomes), studies[0][0].search.mode)
        if found is not None:
            best[cell] = _best_trial(found, studies[found.study][0])
    return best
