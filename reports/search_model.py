"""What a report holds of a search (issue 14), apart from how it is read and drawn (:mod:`reports.search`): the
YAML's ``search`` section as the report needs it, one study's trials, what the search part of a build wrote, and the
names of a trial's states."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["MIN_IMPORTANCE_TRIALS", "COMPLETE", "PRUNED", "FAILED", "RUNNING", "STATES", "SearchInfo", "StudyTrials",
           "SearchOutput"]

MIN_IMPORTANCE_TRIALS = 5
"""fANOVA fits a random forest to the trials with an objective; with fewer than five that ran to the end (the
quickstart's four trials, three of them stopped by ASHA) its numbers say nothing and are not printed."""
COMPLETE, PRUNED, FAILED, RUNNING = "complete", "pruned (ASHA)", "failed", "running"
STATES = (COMPLETE, PRUNED, FAILED, RUNNING)
_STEM = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class SearchInfo:
    """What a report needs of the YAML's ``search`` (orchestration validates the rest when it sweeps)."""

    metric: str
    mode: str
    space: dict[str, dict[str, Any]]
    storage: str | None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> "SearchInfo":
        """``ValueError`` naming the field when ``metric``, ``mode`` or ``space`` is not what the sweep accepts."""
        metric, mode, space = raw.get("metric"), raw.get("mode", "max"), raw.get("space")
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"search.metric={metric!r}: must name the search's validation metric (val/best_acc)")
        if mode not in ("max", "min"):
            raise ValueError(f"search.mode={mode!r}: must be max or min")
        if not isinstance(space, dict) or not space or not all(
                isinstance(p, dict) and p.get("type") in ("float", "int", "categorical") for p in space.values()):
            raise ValueError(f"search.space={space!r}: must map dotted config keys to {{type: float|int|categorical, "
                             "...}}")
        storage = raw.get("storage")
        return cls(metric, mode, {str(k): v for k, v in space.items()}, storage if isinstance(storage, str) else None)

    def distributions(self) -> dict[str, Any]:
        """The space as Optuna distributions (the ones the sweep's searcher samples)."""
        import optuna.distributions as D

        out: dict[str, Any] = {}
        for path, p in self.space.items():
            if p["type"] == "categorical":
                out[path] = D.CategoricalDistribution(p["choices"])
            else:
                kind = D.FloatDistribution if p["type"] == "float" else D.IntDistribution
                out[path] = kind(p["low"], p["high"], log=bool(p.get("log", False)))
        return out


@dataclass
class StudyTrials:
    """One study: where its trials were read and one row per trial (``trial``, each parameter, ``objective``,
    ``state``, ``run_id``, ``best``)."""

    cell: str
    fold: int
    search_hash: str
    name: str                  # the Optuna study name (contract.study_name)
    origin: str                # where the trials were read, in words
    study: Any                 # optuna.Study: the durable one, or rebuilt in memory from MLflow
    trials: pd.DataFrame
    durable: bool              # read from the Optuna storage (else rebuilt from MLflow)
    label: str = ""            # the cell in words (the YAML's row/column labels), set by write_searches

    @property
    def stem(self) -> str:
        levels = [lv.partition("=")[2] for lv in self.cell.split(",")]
        return _STEM.sub("-", "search-" + "-".join(levels) + f"-fold{self.fold}")

    @property
    def title(self) -> str:
        return f"Search: {self.label or self.cell.replace(',', ', ')}, fold {self.fold}"


@dataclass
class SearchOutput:
    """What :func:`write_searches` wrote: the files, the studies, the ``index.md`` section, the LaTeX files to
    ``\\input`` and the figures (stem, caption) for report.tex."""

    files: list[Path] = field(default_factory=list)
    studies: list[StudyTrials] = field(default_factory=list)
    markdown: str = ""
    tex_inputs: list[str] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
