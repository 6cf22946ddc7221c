"""The sweep YAML (``experiments/<name>.yaml``): schema, cells, and validation of every trial config up front.

The format is fixed and shared with the reports (see orchestration/README.md): ``name``, ``description``, ``base`` (a partial
:class:`mutexmatch.config.RunConfig`), ``folds``, ``axes`` (named axes whose levels are partial RunConfig overrides;
cells are the product of the axes), ``exclude``, ``resources``, ``smoke``, ``search`` (Optuna TPE + ASHA), and the
report sections ``tables``/``figures``, which are kept opaque here (the reports validate them).

:func:`load_spec` validates the schema (unknown keys rejected, types strict) and then builds and validates the
merged RunConfig of every trial the sweep could start — each grid cell × fold, each smoke trial, and each search
trial at both ends of every search-space bound — with :func:`mutexmatch.config.parse_config`, before Ray or MLflow
is touched. Every problem is reported at once, one ``field=value: what is allowed`` line each, prefixed with where
it comes from (``cell method=fixmatch,setting=digits-20 fold 0: algorithm.tau=1.5: must be in (0, 1]``).

Fields orchestration owns and sets per trial (``output_dir``, ``data.fold``, ``train.device``) are rejected in the
YAML; relative ``data.root`` paths are resolved against the project folder because trials run with their working
directory inside Ray's temporary folder.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Mapping, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from mutexmatch.config import (SEED_MAX, SWEEP_ONLY_KEY, TRAIN_COMMAND, ConfigError, RunConfig, has_validation,
                               owned_fields, parse_config, search_value, unsearchable_fields)
from mutexmatch.yamlfile import YamlFileError, read_yaml_mapping
from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.checks import at_least, validation_error_lines  # noqa: F401  (re-exported)
from mutexmatch.dotted import deep_merge, flatten_dotted, set_dotted  # noqa: F401  (deep_merge, set_dotted re-exported)

from orchestration.contract import VALIDATION_METRICS, cell_id

__all__ = [
    "SpecError",
    "Resources",
    "FloatParam",
    "IntParam",
    "CategoricalParam",
    "SchedulerSpec",
    "SearchSpec",
    "SweepSpec",
    "Cell",
    "SMOKE_DEFAULT",
    "VALIDATION_METRICS",
    "load_spec",
    "read_spec_file",
    "parse_spec",
    "deep_merge",
    "set_dotted",
    "expand_cells",
    "search_cells",
    "trial_config",
    "sampled_config_values",
    "with_sampled",
    "spec_hash",
    "validate_spec",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")  # \Z: `$` also matches before a final newline
NAME_RULE = "must start with a letter or digit and use only letters, digits, `_`, `-`, `.`, `+` (it names a folder)"


def is_name(v: str) -> bool:
    """Whether ``v`` may name an experiment, an axis or a level (:data:`NAME_RULE`): it becomes a folder name."""
    return bool(_NAME.match(v))
# --smoke without a `smoke:` section: a few steps of every cell, enough to exercise load, train, eval, checkpoint.
SMOKE_DEFAULT: dict[str, Any] = {"train": {"iterations": 4, "eval_interval": 2, "batch_size": 4, "mu": 2}}
# Both derived from the roles declared on the RunConfig fields (mutexmatch.config.roles).
# Set per trial by orchestration; a value in the YAML would be silently replaced, so it is refused instead.
_OWNED = {tuple(path.split(".")): why for path, why in owned_fields().items()}
# Owned fields, and fields that do not change results (a search over them would re-run one trial n times).
_UNSEARCHABLE = unsearchable_fields()


class SpecError(ConfigError):
    """A problem in a sweep YAML; one ``field=value: what is allowed`` line per problem."""


class _Strict(BaseModel):
    # strict: YAML's "0.5" string must not become a float; extra=forbid: a typo'd key is an error, not a default.
    model_config = ConfigDict(extra="forbid", strict=True)


def _none_to_dict(v: Any) -> Any:
    return {} if v is None else v


class Resources(_Strict):
    """Per-trial resources, passed to ``tune.with_resources``. Fractional GPUs share one device (scheduling only:
    Ray does not isolate GPU memory)."""

    cpu: Annotated[float, AfterValidator(at_least(0, strict=True))] = Field(
        1.0, description="CPUs per trial (also the trial's torch thread count, rounded, at least 1).")
    gpu: Annotated[float, AfterValidator(at_least(0))] = Field(
        0.0, description="GPUs per trial; a fraction < 1 packs several trials on one GPU.")

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("must be a fraction in [0, 1] or a whole number of GPUs")
        return v


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
    metric: str = Field(description="Objective: val/acc or val/best_acc (never test/*).")
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
    storage: str | None = Field(None, description="Optuna RDB storage URL of the studies (default: `optuna.db` "
                                "beside the MLflow SQLite store, else in the project folder); a relaunch continues "
                                "the same study.")

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
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
            raise ValueError(NAME_RULE)
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
                raise ValueError(f"axis {axis!r}: use letters, digits, `_`, `-`, `.`, `+` (no `=` or `,`)")
            if not levels:
                raise ValueError(f"axis {axis!r}: needs at least one level")
            for level, override in levels.items():
                if not _NAME.match(level):
                    raise ValueError(f"level {axis}.{level!r}: use letters, digits, `_`, `-`, `.`, `+`")
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


# ------------------------------------------------------------------------------------------------ cells
@dataclass(frozen=True)
class Cell:
    """One point of the grid: ``levels`` maps each axis (YAML order) to its level."""

    levels: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        """``axis=level`` pairs joined by commas, axes in YAML order (the MLflow ``mutexmatch.cell`` tag)."""
        return cell_id(self.levels)

    def as_dict(self) -> dict[str, str]:
        return dict(self.levels)

    def matches(self, partial: Mapping[str, str]) -> bool:
        own = self.as_dict()
        return all(own.get(a) == lv for a, lv in partial.items())


def expand_cells(spec: SweepSpec) -> list[Cell]:
    """The product of the axes (YAML order) minus the ``exclude`` entries."""
    names = list(spec.axes)
    cells = [Cell(tuple(zip(names, combo))) for combo in itertools.product(*(list(spec.axes[a]) for a in names))]
    return [c for c in cells if not any(c.matches(ex) for ex in spec.exclude)]


def search_cells(spec: SweepSpec) -> list[Cell]:
    """The cells matched by ``search.cells`` (empty without a search section)."""
    if spec.search is None:
        return []
    return [c for c in expand_cells(spec) if any(c.matches(p) for p in spec.search.cells)]


# ------------------------------------------------------------------------------------------------ configs
def sampled_config_values(raw: dict[str, Any], sampled: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted path → the config value that a search's sampled value (``sampled``: a search trial's, or the best
    trial's for a refit) stands for in the raw config ``raw``: the chosen algorithm's parameter model converts its
    own parameters (:func:`mutexmatch.config.search_value`; a float ``algorithm.k`` is a fraction of C), every other
    field takes the value as sampled. ``ValueError`` naming the path when a value stands for none."""
    chosen = raw
    for path, value in sampled.items():  # the algorithm whose parameters these are, should the search choose it
        chosen = set_dotted(chosen, path, value)
    out = {}
    for path, value in sampled.items():
        try:
            out[path] = search_value(chosen, path, value)
        except ValueError as e:
            raise ValueError(f"{path}={value!r}: {e}") from None
    return out


def with_sampled(raw: dict[str, Any], sampled: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with the config values ``sampled`` stands for set (:func:`sampled_config_values`)."""
    for path, value in sampled_config_values(raw, sampled).items():
        raw = set_dotted(raw, path, value)
    return raw


def trial_config(spec: SweepSpec, cell: Cell, fold: int, *, project_dir: Path, search: bool = False,
                 smoke: bool = False, refit: bool = False) -> dict[str, Any]:
    """The raw (unvalidated) RunConfig mapping of one trial: base → axis levels → search.base (a search trial) or
    search.refit.base (a refit trial) → smoke, then the fold, an absolute ``data.root`` and ``train.progress: false``. ``output_dir`` and ``train.device`` are added by
    the trainable."""
    raw = copy.deepcopy(spec.base)
    for axis, level in cell.levels:
        raw = deep_merge(raw, spec.axes[axis][level] or {})
    if search and spec.search is not None:
        raw = deep_merge(raw, spec.search.base)
    if refit and spec.search is not None:
        raw = deep_merge(raw, spec.search.refit.base)
    if smoke:
        raw = deep_merge(raw, SMOKE_DEFAULT if spec.smoke is None else spec.smoke)
    raw = deep_merge(raw, {"data": {"fold": fold}, "train": {"progress": False}})
    seed = raw["train"].get("seed", 0) if isinstance(raw.get("train"), dict) else None
    if spec.seed_per_fold and isinstance(seed, int) and not isinstance(seed, bool):
        # A bad seed is left as it is for the RunConfig validation to name.
        raw["train"]["seed"] = seed + fold
    root = Path(raw["data"].get("root", "data")) if isinstance(raw.get("data"), dict) else Path("data")
    if not root.is_absolute():
        root = (project_dir / root).resolve()
    raw["data"]["root"] = str(root)
    return raw


def _owned_errors(where: str, raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return [f"{where}={raw!r}: must be a mapping of RunConfig sections"]
    errors = []
    for path, why in _OWNED.items():
        node: Any = raw
        for p in path:
            node = node.get(p, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            errors.append(f"{where}.{'.'.join(path)}={node!r}: {why}; remove it")
    return errors


_MISSING = object()


def _config_errors(prefix: str, raw: dict[str, Any]) -> list[str]:
    try:
        parse_config(raw)
    except ConfigError as e:
        return [f"{prefix}: {line}" for line in str(e).splitlines()]
    return []


def _space_path_errors(search: SearchSpec) -> list[str]:
    allowed = _searchable_paths()
    errors = []
    for path in search.space:
        if path not in allowed:
            close = difflib.get_close_matches(path, sorted(allowed), n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else "e.g. algorithm.tau, algorithm.k, optim.lr"
            owned = (" (set by orchestration)" if tuple(path.split(".")) in _OWNED else
                     " (does not change results)" if path in _UNSEARCHABLE else "")
            errors.append(f"search.space.{path}: not a searchable dotted RunConfig path{owned}; {hint}")
    return errors


def _bound_values(p: FloatParam | IntParam | CategoricalParam) -> list[tuple[str, Any]]:
    if isinstance(p, CategoricalParam):
        return [(f"choices[{i}]", c) for i, c in enumerate(p.choices)]
    return [("low", p.low), ("high", p.high)]


def validate_spec(spec: SweepSpec, project_dir: Path) -> None:
    """Cross-checks the schema cannot express, then every trial's merged RunConfig; raise :class:`SpecError`."""
    errors: list[str] = []
    errors += _owned_errors("base", spec.base)
    for axis, levels in spec.axes.items():
        for level, override in levels.items():
            errors += _owned_errors(f"axes.{axis}.{level}", override)
    if spec.smoke is not None:
        errors += _owned_errors("smoke", spec.smoke)
    all_cells = [Cell(tuple(zip(spec.axes, combo)))
                 for combo in itertools.product(*(list(v) for v in spec.axes.values()))]
    errors += _partial_cell_errors("exclude", spec.exclude, spec, all_cells)
    errors += _overlap_errors(spec)
    if spec.search is not None:
        errors += _space_path_errors(spec.search)
    cells = expand_cells(spec)
    if not cells:
        errors.append(f"exclude={spec.exclude!r}: excludes every cell; nothing would run")
    if spec.search is not None:
        errors += _owned_errors("search.base", spec.search.base)
        errors += _owned_errors("search.refit.base", spec.search.refit.base)
        errors += _partial_cell_errors("search.cells", spec.search.cells, spec, cells)
    if errors:  # configs built from a broken structure would only repeat these problems
        raise SpecError("\n".join(errors))
    errors = _seed_errors(spec, cells, project_dir)
    if errors:  # every later fold's config would repeat it as a bare "train.seed=... must be <=" line
        raise SpecError("\n".join(errors))

    for cell in cells:
        by_problem: dict[str, list[int]] = {}
        for fold in spec.folds:
            for line in _config_errors("", trial_config(spec, cell, fold, project_dir=project_dir)):
                by_problem.setdefault(line, []).append(fold)
        for line, folds in by_problem.items():
            where = "all folds" if len(folds) == len(spec.folds) > 1 else f"fold {','.join(map(str, folds))}"
            errors.append(f"cell {cell.id} {where}{line}")
        if not by_problem:  # a smoke problem is only news when the grid config itself is fine
            errors += _config_errors(f"smoke cell {cell.id} fold {spec.folds[0]}",
                                     trial_config(spec, cell, spec.folds[0], project_dir=project_dir, smoke=True))
    if spec.search is not None:
        errors += _search_errors(spec, project_dir)
    if errors:
        raise SpecError("\n".join(dict.fromkeys(errors)))


def _overlap_errors(spec: SweepSpec) -> list[str]:
    """A field set by levels of two axes: the later axis's level silently replaced the earlier one's (a level named
    ``fixmatch_tau05`` never trained tau = 0.5), so it is refused unless ``axis_wins`` names the winner."""
    setters: dict[str, list[str]] = {}
    for axis, levels in spec.axes.items():
        for path in sorted({p for o in levels.values() for p in flatten_dotted(o or {})}):
            setters.setdefault(path, []).append(axis)
    errors = []
    for path, axes in setters.items():
        winner = spec.axis_wins.get(path)
        if len(axes) > 1 and winner is None:
            errors.append(f"axes {' and '.join(axes)} both set {path}: each level of {axes[-1]} silently replaces "
                          f"the value the other axis's level gives; set {path} on one axis only, or declare "
                          f"`axis_wins: {{{path}: {axes[-1]}}}` if that is meant")
        elif len(axes) > 1 and winner != axes[-1]:
            errors.append(f"axis_wins.{path}={winner!r}: levels merge in axis order, so {axes[-1]} (the last of "
                          f"{', '.join(axes)}) wins; move axis {winner!r} after the others or name {axes[-1]!r}")
    errors += [f"axis_wins.{path}={winner!r}: not set by two axes ({', '.join(setters.get(path, [])) or 'by none'}); "
               "remove it" for path, winner in spec.axis_wins.items() if len(setters.get(path, [])) < 2]
    return errors


def _seed_errors(spec: SweepSpec, cells: list[Cell], project_dir: Path) -> list[str]:
    """With ``seed_per_fold``, fold k trains with ``train.seed`` + k: that sum must stay a valid seed for the last
    fold of the grid, the search and the refit (a seed that is itself too large is the config check's to name)."""
    if not spec.seed_per_fold:
        return []
    searched = set(search_cells(spec))
    by_problem: dict[str, list[str]] = {}
    for cell in cells:
        for kind, folds in _fold_sets(spec, searched_cell=cell in searched):
            flags = {kind: True} if kind else {}
            seed = trial_config(spec, cell, 0, project_dir=project_dir, **flags)["train"]["seed"]
            last = max(folds)
            if isinstance(seed, int) and not isinstance(seed, bool) and seed <= SEED_MAX < seed + last:
                problem = (f"train.seed={seed}: fold {last} trains with train.seed + {last} = {seed + last} "
                           f"(seed_per_fold), above the largest seed {SEED_MAX}; use train.seed <= {SEED_MAX - last}")
                by_problem.setdefault(problem, []).append(f"{kind + ' ' if kind else ''}cell {cell.id}")
    return [f"{'every cell' if len(where) >= len(cells) > 1 else ', '.join(where)}: {problem}"
            for problem, where in by_problem.items()]


def _fold_sets(spec: SweepSpec, searched_cell: bool) -> list[tuple[str, list[int]]]:
    """(trial kind as trial_config's flag, or "" for the grid; its folds) of the trials a cell runs."""
    sets = [("", spec.folds)]
    if searched_cell and spec.search is not None:
        sets.append(("search", spec.search.folds or spec.folds[:1]))
        if spec.search.refit.enabled:
            sets.append(("refit", spec.search.refit.folds or spec.folds))
    return sets


def _partial_cell_errors(field: str, partials: list[dict[str, str]], spec: SweepSpec, cells: list[Cell]
                         ) -> list[str]:
    errors = []
    for i, partial in enumerate(partials):
        for axis, level in partial.items():
            if axis not in spec.axes:
                errors.append(f"{field}[{i}].{axis}={level!r}: unknown axis; axes: {', '.join(spec.axes)}")
            elif level not in spec.axes[axis]:
                errors.append(f"{field}[{i}].{axis}={level!r}: unknown level; levels of {axis}: "
                              f"{', '.join(spec.axes[axis])}")
        if not errors and not any(c.matches(partial) for c in cells):
            errors.append(f"{field}[{i}]={partial!r}: matches no cell")
    return errors


def _search_errors(spec: SweepSpec, project_dir: Path) -> list[str]:
    search = spec.search
    assert search is not None
    errors = []
    for cell in search_cells(spec):
        if search.refit.enabled:
            for fold in search.refit.folds or spec.folds:
                errors += _config_errors(f"refit cell {cell.id} fold {fold}",
                                         trial_config(spec, cell, fold, project_dir=project_dir, refit=True))
        for fold in search.folds or spec.folds[:1]:
            where = f"search cell {cell.id} fold {fold}"
            raw = trial_config(spec, cell, fold, project_dir=project_dir, search=True)
            base_errors = _config_errors(where, raw)
            errors += base_errors
            if base_errors:
                continue
            cfg = parse_config(raw)
            if not has_validation(cfg.data):
                errors.append(f"{where}: data.val_per_class=0: search.metric={search.metric!r} needs a validation "
                              "split; set e.g. `search.base: {data: {val_per_class: 10}}` (or give an imagefolder "
                              "a val/ folder)")
            evals = -(-cfg.train.iterations // cfg.train.eval_interval)
            if search.scheduler.type == "asha" and search.scheduler.grace_period > evals:
                errors.append(f"search.scheduler.grace_period={search.scheduler.grace_period}: must be <= the "
                              f"{evals} evaluations of a search trial (train.iterations / train.eval_interval)")
            for path, p in search.space.items():
                for bound, value in _bound_values(p):
                    try:  # what the value stands for is the parameter's own type's to say
                        converted = search_value(raw, path, value)
                    except ValueError as e:
                        errors.append(f"search.space.{path}.{bound}={value!r}: {e}")
                        continue
                    errors += _config_errors(f"{where}: search.space.{path}.{bound}={value!r}",
                                             set_dotted(raw, path, converted))
    return errors


# ------------------------------------------------------------------------------------------------ loading
def _format_errors(err: ValidationError) -> str:
    return "\n".join(validation_error_lines(err, where=_where, allowed_keys=_allowed_keys,
                                             missing="required field is missing"))


def _where(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts[:2] == ["search", "space"] and len(parts) > 3:
        del parts[3]  # the discriminator tag pydantic inserts into a tagged-union member's location
    return ".".join(parts) or "spec"


def _allowed_keys(loc: tuple) -> list[str]:
    if loc[:2] == ("search", "space") and len(loc) == 4:
        return list({"float": FloatParam, "int": IntParam, "categorical": CategoricalParam}[loc[3]].model_fields)
    model: type[BaseModel] = SweepSpec
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a dict key (space path, axis name): stay on the same model
        ann = field.annotation
        for candidate in (ann, *getattr(ann, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
    return list(model.model_fields)


def parse_spec(raw: Any, project_dir: str | Path = ".") -> SweepSpec:
    """Validate a parsed YAML mapping into a :class:`SweepSpec` and validate every trial config; raise SpecError."""
    if not isinstance(raw, dict):
        raise SpecError(f"spec: must be a YAML mapping, got {type(raw).__name__}")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(_format_errors(err)) from None
    validate_spec(spec, Path(project_dir).resolve())
    return spec


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a sweep YAML, read with the project's YAML reader (duplicate keys refused at any depth);
    raise :class:`SpecError` with one line naming the file, also for a run config given instead (naming the
    trainer's command)."""
    try:
        raw = read_yaml_mapping(path, "spec",
                                expected="a sweep YAML mapping (name, axes, ...; see orchestration/README.md)")
    except YamlFileError as e:
        raise SpecError(str(e)) from None
    if SWEEP_ONLY_KEY not in raw and set(raw) <= set(RunConfig.model_fields):
        raise SpecError(f"spec {str(path)!r}: is a run config (sections {', '.join(raw)}), not a sweep YAML; train "
                        f"it with `{TRAIN_COMMAND} --config {path}`")
    return raw


def load_spec(path: str | Path, project_dir: str | Path = ".") -> SweepSpec:
    """:func:`read_spec_file`, then :func:`parse_spec`."""
    return parse_spec(read_spec_file(path), project_dir)


def spec_hash(spec: SweepSpec) -> str:
    """Short sha256 over what changes the trials (description and report layouts excluded)."""
    d = spec.model_dump(mode="json", exclude={"description", "tables", "figures", "axis_wins"})
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
