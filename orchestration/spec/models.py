"""The sweep YAML's schema: names, resources, the search (parameters, scheduler, refit) and the sweep itself, as
pydantic models (cells, trial configs, validation and loading: :mod:`orchestration.spec.sweepfile`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.checks import at_least
from mutexmatch.config import ConfigError, RunConfig, owned_fields, search_value, unsearchable_fields
from mutexmatch.plugins import checked_entries

from orchestration.contract import VALIDATION_METRICS
from orchestration.contract.tracking_uri import journal_file

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")  # \Z: `$` also matches before a final newline
NAME_RULE = ("must start with an ASCII letter or digit and use only ASCII letters, digits, `_`, `-`, `.`, `+` (it "
             "names a folder)")


def is_name(v: str) -> bool:
    """Whether ``v`` may name an experiment, an axis or a level (:data:`NAME_RULE`): it becomes a folder name."""
    return bool(_NAME.match(v))


def name_fault(v: str) -> str:
    """Where ``v`` breaks :data:`NAME_RULE`, to follow the rule in a message (``; 'é' (U+00E9) at position 2 is not
    allowed``), '' for a name: é, 固 and a Cyrillic е are letters, so "use letters" did not say what was wrong."""
    if is_name(v):
        return ""
    if not v:
        return "; it is empty"
    i = next((i for i, c in enumerate(v) if not (c.isascii() and (c.isalnum() or i > 0 and c in "_.+-"))), 0)
    return f"; {v[i]!r} (U+{ord(v[i]):04X}) at position {i + 1} is not allowed"
# --smoke without a `smoke:` section: a few steps of every cell, enough to exercise load, train, eval, checkpoint.
SMOKE_DEFAULT: dict[str, Any] = {"train": {"iterations": 4, "eval_interval": 2, "batch_size": 4, "mu": 2}}
# Both derived from the roles declared on the RunConfig fields (mutexmatch.config.roles).
# Set per trial by orchestration; a value in the YAML would be silently replaced, so it is refused instead.
_OWNED = {tuple(path.split(".")): why for path, why in owned_fields().items()}
# Owned fields, and fields that do not change results (a search over them would re-run one trial n times).
_UNSEARCHABLE = unsearchable_fields()


class SpecError(ConfigError):
    """A problem in a sweep YAML; one ``field=value: what is allowed`` line per problem. ``missing_roots`` (sorted) is
    set only when every problem is a data folder that is not there: a plan without the data reads that fact here,
    never from the wording of the lines."""

    def __init__(self, message: str, missing_roots: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing_roots = tuple(sorted(missing_roots))


class _Strict(BaseModel):
    # strict: YAML's "0.5" string must not become a float; extra=forbid: a typo'd key is an error, not a default.
    model_config = ConfigDict(extra="forbid", strict=True)


def _none_to_dict(v: Any) -> Any:
    return {} if v is None else v


class Resources(_Strict):
    """Per-trial resources, passed to ``tune.with_resources``. Fractional GPUs share one device (scheduling only:
    Ray does not isolate GPU memory). With ``workers`` > 1, ``cpu`` and ``gpu`` are per worker and a trial is a Ray
    Train ``TorchTrainer`` of that many data-parallel ranks (issue 30: :mod:`orchestration.trial.spanning`)."""

    # Left out of the spec hash at its default (sweepfile.spec_hash), so every sweep written before it keeps its hash.
    DEFAULT_WORKERS: ClassVar[int] = 1

    cpu: Annotated[float, AfterValidator(at_least(0, strict=True))] = Field(
        1.0, description="CPUs per trial, per worker when `workers` > 1 (also the torch thread count of each "
        "process, rounded, at least 1).")
    gpu: Annotated[float, AfterValidator(at_least(0))] = Field(
        0.0, description="GPUs per trial, per worker when `workers` > 1; a fraction < 1 packs several trials on one "
        "GPU.")
    workers: Annotated[int, AfterValidator(at_least(1))] = Field(
        1, description="Data-parallel ranks per trial: 1 trains in one process (the default); N > 1 runs each trial "
        "as a Ray Train TorchTrainer of N workers (gloo on CPU, NCCL on GPUs), each with `cpu` CPUs and `gpu` GPUs, "
        "splitting the config's global batch (`train.batch_size` and `train.mu` times it must divide by N). Results "
        "equal one process's within float summation order; wall time is about 1/N of it plus communication.")

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("must be a fraction in [0, 1] or a whole number of GPUs")
        return v

    @model_validator(mode="after")
    def _one_device_per_rank(self) -> "Resources":
        if self.workers > 1 and self.gpu > 1:
            raise ValueError(f"gpu={self.gpu:g} with workers={self.workers}: each worker trains on one device; use "
                             f"gpu: 1 and workers: {self.workers * int(self.gpu)}")
        return self


class _RangeParam(_Strict):
    """What the float and int distributions share: bounds, log scale and their check (``_SHOW`` formats a bound in
    messages)."""

    _SHOW: ClassVar[str] = ""
    type: str
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> "_RangeParam":
        low, high = format(self.low, self._SHOW), format(self.high, self._SHOW)
        if not self.low < self.high:
            raise ValueError(f"low={low}, high={high}: need low < high")
        if self.log and self.low <= 0:
            raise ValueError(f"low={low}: must be > 0 when log is true")
        return self


class FloatParam(_RangeParam):
    """A float in [low, high], log-uniform when ``log``. What a sampled value stands for is the parameter's own
    type's to say (:func:`mutexmatch.config.search_value`): on MutexMatch's ``algorithm.k`` a fraction of C."""

    _SHOW: ClassVar[str] = "g"
    type: Literal["float"]


class IntParam(_RangeParam):
    """An integer in [low, high] (both inclusive), log-uniform when ``log``."""

    type: Literal["int"]
    low: int
    high: int


class CategoricalParam(_Strict):
    """One of ``choices`` (strings, numbers, booleans or null)."""

    type: Literal["categorical"]
    choices: list[Union[bool, int, float, str, None]] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _unique(cls, v: list) -> list:
        if len({json.dumps(c) for c in v}) != len(v):
            raise ValueError(f"{v!r}: choices must be distinct")
        return v


ParamSpec = Annotated[Union[FloatParam, IntParam, CategoricalParam], Field(discriminator="type")]


class SchedulerSpec(_Strict):
    """Early stopping of search trials, counted in evaluations (Tune's ``training_iteration``)."""

    type: Literal["asha", "none"] = "asha"
    grace_period: Annotated[int, AfterValidator(at_least(1))] = Field(
        1, description="Evaluations every trial gets before ASHA may stop it.")
    reduction_factor: Annotated[float, AfterValidator(at_least(1, strict=True))] = Field(
        2.0, description="ASHA's η: the top 1/η of trials are promoted at each rung.")


# A partial RunConfig where YAML's empty value (`base:`) means no overrides; a fold list that may be left out.
Overrides = Annotated[dict[str, Any], BeforeValidator(lambda v: _none_to_dict(v))]
OptionalFolds = Annotated[list[int] | None, AfterValidator(lambda v: None if v is None else _check_folds(v))]


class RefitSpec(_Strict):
    """After a search: its best parameters trained on ``folds`` with the grid's config (the full schedule, no
    validation split) — runs of kind ``refit`` under the searched cell's id plus ``tuned=true``."""

    enabled: bool = Field(True, description="Refit the best parameters after the search (`refit: false` turns it "
                          "off).")
    folds: OptionalFolds = Field(None, description="Folds refit (default: the sweep's folds).")
    base: Overrides = Field(default_factory=dict, description="Overrides for refit trials only, applied over "
                                 "the grid's config (the search's own `base` is not used).")

def check_journal_url(url: str) -> str:
    """``url`` if its journal file names a file whose folder exists (a relative path is checked at the launch,
    against the project folder); else ``ValueError`` saying what is allowed."""
    path = journal_file(url)
    if not path or path.endswith("/"):
        raise ValueError(f"{url!r}: a journal storage names its file: journal:///abs/path/optuna.journal (an Optuna "
                         "JournalFileBackend, for shared filesystems) or journal:relative/path.journal")
    if Path(path).is_absolute() and not Path(path).expanduser().parent.is_dir():
        raise ValueError(f"{url!r}: the folder {Path(path).parent} does not exist; create it first")
    return url


def check_rdb_url(url: str) -> str:
    """``url`` if it is a database URL whose dialect SQLAlchemy (so Optuna) knows and, for SQLite, whose folder exists;
    else ``ValueError`` saying what is allowed (a garbage URL passed --dry-run, then the launch trained the whole
    grid and crashed in the search phase)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        raise ValueError("must be a database URL Optuna can open, e.g. sqlite:////abs/path/optuna.db or "
                         "postgresql://user@host/db (or leave it out: optuna.db beside the MLflow store)") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise ValueError(f"its folder {folder} does not exist; create it or give another path")
    return url


class SearchSpec(_Strict):
    """An Optuna (TPE) search with ASHA over the searched cells; the objective is a validation metric only."""

    cells: list[dict[str, str]] = Field(default_factory=lambda: [{}], description="Partial cells searched "
                                        "(`{}` matches every cell).")
    metric: str = Field(description="Objective: val/acc, val/best_acc or val/balanced_acc (never test/*).")
    mode: Literal["max", "min"] = "max"
    n_trials: Annotated[int, AfterValidator(at_least(1))] = Field(
        8, description="Optuna trials per searched cell and fold (--n-trials overrides).")
    max_concurrent: Annotated[int | None, AfterValidator(at_least(1, or_none=True))] = Field(
        None, description="Trials running at once (--max-concurrent overrides); null = as many as the resources "
        "allow.")
    folds: OptionalFolds = Field(None, description="Folds searched (default: the sweep's first fold). Each "
                                    "(cell, fold) is its own Optuna study.")
    base: Overrides = Field(default_factory=dict, description="Overrides for search trials only (typically a "
                                 "validation split: `data: {val_per_class: 10}`).")
    space: dict[str, ParamSpec] = Field(min_length=1, description="Dotted RunConfig paths → distributions.")
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    refit: RefitSpec = Field(default_factory=RefitSpec, description="What follows the search: its best parameters "
                             "trained on every fold (`false` turns it off).")
    storage: str | None = Field(None, description="Optuna storage of the studies: an RDB URL, or "
                                "`journal:///abs/path/optuna.journal` (one append-only file: on a shared filesystem, "
                                "where SQLite corrupts) (default: `optuna.db` beside the MLflow SQLite store, else in "
                                "the project folder); a relaunch continues the same study.")

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is not None and journal_file(v) is not None:
            return check_journal_url(v)
        return v if v is None else check_rdb_url(v)

    @field_validator("refit", mode="before")
    @classmethod
    def _refit_bool(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else _none_to_dict(v)

    @field_validator("cells")
    @classmethod
    def _cells(cls, v: list[dict[str, str]]) -> list[dict[str, str]]:
        if not v:  # an empty list would silently search nothing
            raise ValueError("needs at least one partial cell (`{}` searches every cell); to search nothing, remove "
                             "the `search:` section")
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in VALIDATION_METRICS:
            raise ValueError(f"must be a validation metric: {' or '.join(VALIDATION_METRICS)} (the test set never "
                             "selects hyper-parameters)")
        return v

class TrackingSpec(_Strict):
    """What each trial's MLflow run records besides its training curves. It changes no trial: left out of the spec
    hash and the settings digest (a launch with other values resumes and counts the same runs)."""

    system_metrics: bool = Field(True, description="MLflow's system metrics on every trial's run (`system/…`: CPU, "
                                 "memory, disk, network; GPU where `nvidia-ml-py` is installed), sampled by a thread "
                                 "of the trial's process; `false` turns them off.")
    system_metrics_interval: Annotated[float, AfterValidator(at_least(1))] = Field(
        10.0, description="Seconds between two system-metrics samples (MLflow's sampling interval); besides, a "
        "trial's attempt logs one sample when it starts and one when it stops.")


class SweepSpec(_Strict):
    """One experiment: the grid (cells × folds), an optional search, and the report layouts (opaque here)."""

    name: str = Field(description="MLflow experiment name; also the folder name under the Ray storage.")
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict, description="Partial RunConfig applied to every trial.")
    folds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], description="Labeled folds.")
    seed_per_fold: bool = Field(True, description="Fold k trains with `train.seed` + k, as the released code seeds "
                                "each fold's run with its fold seed; false: every fold uses `train.seed` (the folds "
                                "then differ only by their labeled split).")
    axes: dict[str, dict[str, dict[str, Any] | None]] = Field(description="axis → level → partial RunConfig.")
    axis_wins: dict[str, str] = Field(default_factory=dict, description="field → the axis whose level sets it where "
                                      "several axes do (the last of them: levels merge in axis order); any other "
                                      "field set by two axes is refused.")
    exclude: list[dict[str, str]] = Field(default_factory=list, description="Partial cells to drop.")
    resources: Resources = Field(default_factory=Resources)
    plugins: Annotated[list[str], BeforeValidator(checked_entries)] = Field(
        default_factory=list, exclude_if=lambda v: not v, description="Plugins every trial imports (a run config's "
        "`plugins:`: module names, or `.py` files and package folders relative to the YAML), shipped to every trial "
        "by Ray (docs/plugins.md).")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, description="What trial runs record besides "
                                   "their training curves (system metrics).")
    made_by: dict[str, str] = Field(
        default_factory=dict, exclude_if=lambda v: not v, description="Files the trials read that a command of this "
        "project makes (a weight file trained here): path relative to the project → that command. A missing one is "
        "refused before any work, naming the command; a relative `model.pretrained` is read from the project.")
    smoke: dict[str, Any] | None = Field(None, description=f"Overrides for --smoke (default {SMOKE_DEFAULT}).")
    search: SearchSpec | None = None
    tables: list[Any] = Field(default_factory=list, description="Report tables (validated by reports).")
    figures: list[Any] = Field(default_factory=list, description="Report figures (validated by reports).")

    @field_validator("base", mode="before")
    @classmethod
    def _none_base(cls, v: Any) -> Any:
        return _none_to_dict(v)

    @field_validator("exclude", "tables", "figures", mode="before")
    @classmethod
    def _none_lists(cls, v: Any) -> Any:
        return [] if v is None else v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(NAME_RULE + name_fault(v))
        return v

    @field_validator("folds")
    @classmethod
    def _folds(cls, v: list[int]) -> list[int]:
        return _check_folds(v)

    @field_validator("axes")
    @classmethod
    def _axes(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not v:
            raise ValueError("needs at least one axis with at least one level")
        for axis, levels in v.items():
            if not _NAME.match(axis):
                raise ValueError(f"axis {axis!r}: use ASCII letters, digits, `_`, `-`, `.`, `+` (no `=` or `,`)"
                                 f"{name_fault(axis)}")
            if not levels:
                raise ValueError(f"axis {axis!r}: needs at least one level")
            for level, override in levels.items():
                if not _NAME.match(level):
                    raise ValueError(f"level {axis}.{level!r}: use ASCII letters, digits, `_`, `-`, `.`, `+`"
                                     f"{name_fault(level)}")
                if override is None:  # it trained the base config under the level's name
                    raise ValueError(f"level {axis}.{level}: is null; give its settings, or {{}} for a level that "
                                     "keeps the base config")
        return {a: {lv: _none_to_dict(o) for lv, o in levels.items()} for a, levels in v.items()}


def _check_folds(v: list[int]) -> list[int]:
    if not v:
        raise ValueError("needs at least one fold")
    if any(f < 0 for f in v):
        raise ValueError("folds must be >= 0")
    if len(set(v)) != len(v):
        raise ValueError("folds must be distinct")
    return v


def _searchable_paths() -> set[str]:
    """Every RunConfig field, plus the parameters of every registered algorithm — one registered after the
    config's algorithm section was built declares its own (``algorithm.<param>``) — less the unsearchable ones."""
    paths = set()
    for section, field in RunConfig.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths |= {f"{section}.{f}" for f in ann.model_fields}
    paths |= {f"algorithm.{f}" for alg in ALGORITHMS.values() for f in alg.Params.model_fields}
    return paths - _UNSEARCHABLE


def inner_int_values(p: IntParam, limit: int = 64) -> list[int]:
    """The values of ``p`` strictly between its bounds that a sweep checks: all of them up to ``limit``; beyond,
    the 16 after ``low``, the 16 before ``high`` and 32 spread between (a rule like divisibility by the classes
    fails next to a bound)."""
    if p.high - p.low + 1 <= limit:
        return list(range(p.low + 1, p.high))
    spread = (p.low + round(i * (p.high - p.low) / 33) for i in range(1, 33))
    return sorted({*range(p.low + 1, p.low + 17), *range(p.high - 16, p.high), *spread} - {p.low, p.high})
