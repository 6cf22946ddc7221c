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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from mutexmatch.config import (SEED_MAX, SWEEP_ONLY_KEY, TRAIN_COMMAND, ConfigError, DataConfig, RunConfig,
                               has_validation, parse_config, search_value)
from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.plugins import load_plugins, with_resolved_plugins
from mutexmatch.yamlfile import YamlFileError, read_yaml_mapping
from mutexmatch.checks import validation_error_lines
from mutexmatch.dotted import deep_merge, flatten_dotted, set_dotted  # noqa: F401  (deep_merge, set_dotted re-exported)

from orchestration.contract import cell_id
from orchestration.spec.madeby import missing_made_files, with_project_pretrained
from orchestration.spec.models import (_OWNED, _UNSEARCHABLE, SMOKE_DEFAULT, CategoricalParam, FloatParam, IntParam,
                                       Resources, SearchSpec, SpecError, SweepSpec, _searchable_paths,
                                       inner_int_values)

__all__ = [
    "Cell",
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
    if spec.plugins and isinstance(raw.get("plugins", []), list):   # not a list: RunConfig's to name
        raw["plugins"] = [*spec.plugins, *raw.get("plugins", [])]
    for axis, level in cell.levels:
        raw = deep_merge(raw, spec.axes[axis][level] or {})
    if search and spec.search is not None:
        raw = deep_merge(raw, spec.search.base)
    if refit and spec.search is not None:
        raw = deep_merge(raw, spec.search.refit.base)
    if smoke:
        raw = deep_merge(raw, SMOKE_DEFAULT if spec.smoke is None else spec.smoke)
    # A trial shows no bar; a value that is not a boolean is left as it is for the RunConfig validation to name.
    bar = raw["train"].get("progress", False) if isinstance(raw.get("train"), dict) else False
    raw = deep_merge(raw, {"data": {"fold": fold}, "train": {"progress": False if isinstance(bar, bool) else bar}})
    seed = raw["train"].get("seed", 0) if isinstance(raw.get("train"), dict) else None
    if spec.seed_per_fold and isinstance(seed, int) and not isinstance(seed, bool):
        # A bad seed is left as it is for the RunConfig validation to name.
        raw["train"]["seed"] = seed + fold
    root = Path(raw["data"].get("root", "data")) if isinstance(raw.get("data"), dict) else Path("data")
    if not root.is_absolute():
        root = (project_dir / root).resolve()
    raw["data"]["root"] = str(root)
    return with_project_pretrained(raw, project_dir)


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


@dataclass
class _DataFolders:
    """The data folders the failing trial configs name that are not there, and whether anything else is wrong: kept
    as facts while the lines are written, so ``load_sweep(need_data=False)`` never parses the lines (issue 29)."""
    missing: set[str]
    other: bool = False

    def note(self, raw: dict[str, Any]) -> None:
        """Record why the trial config ``raw`` failed: its missing data folder, and whether it fails without it."""
        from mutexmatch.data.section import missing_data_root  # lazy: the dataset registry's torch start-up cost

        try:
            root = missing_data_root(DataConfig.model_validate(raw.get("data")))
        except ValidationError:  # a bad data section is a problem of its own
            root = None
        if root is None:
            self.other = True
            return
        self.missing.add(root)
        # data.download switches off exactly the missing-folder check (the rule above), so what still fails with it
        # is another problem; an image folder, which download cannot fetch, keeps failing and so stays an error.
        self.other |= bool(_config_errors("", deep_merge(raw, {"data": {"download": True}})))


def _config_errors(prefix: str, raw: dict[str, Any], folders: _DataFolders | None = None) -> list[str]:
    try:
        parse_config(raw)
    except ConfigError as e:
        if folders is not None:
            folders.note(raw)
        return [f"{prefix}: {line}" for line in str(e).splitlines()]
    return []


def _inherited_hint(spec: SweepSpec, raw: dict[str, Any], line: str) -> str:
    """For a cell whose level switches the algorithm away from the base's: which base parameter the line is about,
    and that every level inherits it (issue 33: sweep-level-switches-algo said only 'not used by algorithm')."""
    base = spec.base.get("algorithm")
    name = (raw.get("algorithm") or {}).get("name")
    if not isinstance(base, dict) or name == base.get("name", name) or name not in ALGORITHMS:
        return ""
    foreign = [p for p in base if p != "name" and p not in ALGORITHMS[name].Params.model_fields]
    hit = next((p for p in foreign if line.startswith(f": algorithm.{p}=")), None)
    return "" if hit is None else (f" (from base.algorithm, which every level inherits: move {hit} into the levels "
                                   f"that run {base['name']})")


def _split_errors(raw: dict[str, Any], workers: int) -> list[str]:
    """``resources.workers`` > 1 (issue 30): the global batch must split evenly over the ranks, as the trainer
    requires (:meth:`mutexmatch.training.distributed.DataParallel.check`); found here before any trial starts."""
    if workers <= 1:
        return []
    try:
        cfg = parse_config(raw)
    except ConfigError:
        return []  # _config_errors reports it
    unlabeled = cfg.train.batch_size * cfg.train.mu * ALGORITHMS[cfg.algorithm.name].uses_unlabeled
    return [f": {field}={rows}: must be divisible by resources.workers={workers} (each worker forwards an equal "
            "share of the global batch); change it or resources.workers"
            for field, rows in (("train.batch_size", cfg.train.batch_size), ("train.batch_size x train.mu",
                                                                              unlabeled)) if rows % workers]


def _space_path_errors(search: SearchSpec) -> list[str]:
    allowed = _searchable_paths()
    errors = []
    for path in search.space:
        if path == "algorithm.name":  # its refit row "fixmatch (tuned)" could be a UDA run (issue 33: search-algoname)
            errors.append("search.space.algorithm.name: a cell's algorithm is its axis level's, and its refit row is "
                          "named after it; search the algorithm's parameters, or make each algorithm a level")
        elif path not in allowed:
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
    load_plugins(spec.plugins, error=SpecError)   # first: every check below reads the names they register
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
    errors += missing_made_files(spec.made_by, project_dir)   # each trial's config would say only "no such file"
    if errors:  # configs built from a broken structure would only repeat these problems
        raise SpecError("\n".join(errors))
    errors = _seed_errors(spec, cells, project_dir)
    if errors:  # every later fold's config would repeat it as a bare "train.seed=... must be <=" line
        raise SpecError("\n".join(errors))

    folders = _DataFolders(set())
    for cell in cells:
        by_problem: dict[str, list[int]] = {}
        for fold in spec.folds:
            raw = trial_config(spec, cell, fold, project_dir=project_dir)
            for line in _config_errors("", raw, folders) + _split_errors(raw, spec.resources.workers):
                by_problem.setdefault(line + _inherited_hint(spec, raw, line), []).append(fold)
        for line, folds in by_problem.items():
            where = "all folds" if len(folds) == len(spec.folds) > 1 else f"fold {','.join(map(str, folds))}"
            errors.append(f"cell {cell.id} {where}{line}")
        if not by_problem:  # a smoke problem is only news when the grid config itself is fine
            errors += _config_errors(f"smoke cell {cell.id} fold {spec.folds[0]}",
                                     trial_config(spec, cell, spec.folds[0], project_dir=project_dir, smoke=True),
                                     folders)
    if spec.search is not None:
        errors += _search_errors(spec, project_dir, folders)
    if errors:
        raise SpecError("\n".join(dict.fromkeys(errors)), () if folders.other else tuple(folders.missing))


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


def _search_errors(spec: SweepSpec, project_dir: Path, folders: _DataFolders) -> list[str]:
    search = spec.search
    assert search is not None
    errors = []
    for cell in search_cells(spec):
        if search.refit.enabled:
            for fold in search.refit.folds or spec.folds:
                errors += _config_errors(f"refit cell {cell.id} fold {fold}",
                                         trial_config(spec, cell, fold, project_dir=project_dir, refit=True), folders)
        for fold in search.folds or spec.folds[:1]:
            where = f"search cell {cell.id} fold {fold}"
            raw = trial_config(spec, cell, fold, project_dir=project_dir, search=True)
            base_errors = _config_errors(where, raw, folders)
            errors += base_errors
            if base_errors:
                continue
            before = len(errors)
            cfg = parse_config(raw)
            if not has_validation(cfg.data):
                errors.append(f"{where}: data.val_per_class=0: search.metric={search.metric!r} needs a validation "
                              "split; set e.g. `search.base: {data: {val_per_class: 10}}` (or give an imagefolder "
                              "a val/ folder)")
            evals = -(-cfg.train.iterations // cfg.train.eval_interval)
            if search.scheduler.type == "asha" and search.scheduler.grace_period > evals:
                errors.append(f"search.scheduler.grace_period={search.scheduler.grace_period}: must be <= the "
                              f"{evals} evaluations of a search trial (train.iterations / train.eval_interval)")
            folders.other |= len(errors) > before  # the search's own problems, none of them a data folder
            for path, p in search.space.items():
                before = len(errors)
                for bound, value in _bound_values(p):
                    try:  # what the value stands for is the parameter's own type's to say
                        converted = search_value(raw, path, value)
                    except ValueError as e:
                        errors.append(f"search.space.{path}.{bound}={value!r}: {e}")
                        folders.other = True
                        continue
                    errors += _config_errors(f"{where}: search.space.{path}.{bound}={value!r}",
                                             set_dotted(raw, path, converted), folders)
                if isinstance(p, IntParam) and len(errors) == before:
                    errors += _inner_int_errors(where, raw, path, p)
    return errors


def _inner_int_errors(where: str, raw: dict[str, Any], path: str, p: IntParam) -> list[str]:
    """One line when values Optuna may sample between the bounds are refused by the config rules (finding #1:
    data.num_labels in [20, 60] on 10 classes passed its bounds, then every trial that drew 31 failed at start)."""
    values = inner_int_values(p)
    refused = []
    for value in values:
        try:
            lines = _config_errors("", set_dotted(raw, path, search_value(raw, path, value)))
        except ValueError as e:
            lines = [f": {path}={value}: {e}"]
        if lines:
            refused.append(lines[0].removeprefix(": "))
    if not refused:
        return []
    count = p.high - p.low + 1
    share = (f"{len(refused)} of the {count} values in [{p.low}, {p.high}]" if len(values) == count - 2 else
             f"{len(refused)} of the {len(values) + 2} values checked of the {count} in [{p.low}, {p.high}]")
    return [f"{where}: search.space.{path}: {share} are refused, e.g. {refused[0]}; search only allowed values "
            f"(`type: categorical` with their `choices: [...]`)"]


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
    """:func:`read_spec_file`, then :func:`parse_spec` (the paths in ``plugins:`` made absolute: the YAML's folder)."""
    return parse_spec(with_resolved_plugins(read_spec_file(path), path), project_dir)


def spec_hash(spec: SweepSpec) -> str:
    """Short sha256 over what changes the trials (description and report layouts excluded)."""
    d = spec.model_dump(mode="json", exclude={"description", "tables", "figures", "axis_wins", "tracking", "made_by"})
    if d["resources"]["workers"] == Resources.DEFAULT_WORKERS:
        del d["resources"]["workers"]  # added by issue 30: a one-process sweep keeps the hash it had before
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
