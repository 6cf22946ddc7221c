"""Search trials: the typed ``mutexmatch.sampled`` tag, and THE rule that picks a search's best trial (the sweep
refits it, the report shows it). Standard library only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from orchestration.contract.tags import SAMPLED

__all__ = ["sampled_json", "read_sampled", "SearchOutcome", "best_trial"]


def sampled_json(sampled: dict[str, Any]) -> str:
    """The ``mutexmatch.sampled`` tag of a search trial: its sampled values as Tune's searcher gave them (dotted path
    → value), in JSON, which keeps an int an int and a float a float (MLflow params are ``str`` of config values)."""
    return json.dumps(sampled, sort_keys=True)


def read_sampled(tags: dict[str, str]) -> dict[str, Any] | None:
    """A search run's sampled values (:func:`sampled_json`); None for a run logged before the tag existed."""
    text = tags.get(SAMPLED)
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class SearchOutcome:
    """One search trial as :func:`best_trial` weighs it. ``finished``: it ran to its end or ASHA stopped it (MLflow
    FINISHED, Optuna COMPLETE; an ASHA-stopped trial counts with the value it reached, as TPE saw it); a failed,
    killed, running or Optuna-PRUNED trial does not. ``study``: its study's place among those of its cell (search-fold
    order); ``start_time``: when its run started (ms)."""

    value: float | None
    finished: bool
    study: int = 0
    start_time: int = 0
    run_id: str = ""
    ref: Any = field(default=None, compare=False)   # what the caller keeps with it (the run, the Optuna trial)

    def scored(self) -> bool:
        return self.finished and self.value is not None and math.isfinite(self.value)


def best_trial(outcomes: Iterable[SearchOutcome], mode: str) -> SearchOutcome | None:
    """THE best search trial (of a study, or of every study of a cell), which the refit trains, the sweep logs as
    ``best.*`` and a relaunch checks the refit against: the best last value of the objective (``mode`` max or min)
    among the :meth:`~SearchOutcome.scored` trials; ties go to the earlier study (search-fold order), then the run
    started last, then the smaller run id — the order the sweep always picked in, so a stored refit keeps its
    parameters. None when no trial has a value."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}: must be max or min")
    sign = -1.0 if mode == "max" else 1.0
    scored = [o for o in outcomes if o.scored()]
    return min(scored, key=lambda o: (sign * o.value, o.study, -o.start_time, o.run_id), default=None)
