"""The report sections of an experiment YAML (``tables`` and ``figures``), typed and checked against its ``axes``.

Part of the contract: the sweep validates these sections at launch (a layout the report would reject fails before any
training) and the report builds from them. The sweep format itself (``base``, ``axes``, ``folds``, ``exclude`` …)
belongs to :mod:`orchestration.spec`; this module reads only what a report needs and imports nothing of
orchestration but the contract. A table lays one axis out as rows and one as columns (optionally
a third as row groups, like the paper's "Backbone: CNN-13 / Wide ResNet" blocks); every other axis with more than one
level must be fixed by ``where``. Every name a layout uses must be an axis or a level the YAML defines, and every
published number must sit on a (row, column) position of its table — checked here so a typo fails before any run is
read. A row the paper prints but the sweep does not run is a ``quoted_rows`` entry
(:mod:`orchestration.contract.published`).

Tables::

    tables:
      - id: main                        # file name stem: letters, digits, `_`, `-`
        caption: "Accuracy (%) on digits"
        rows: method                    # an axis
        columns: setting                # an axis
        row_groups: backbone            # optional axis: one block of rows per level, best marked per block
        where: {k: k10}                 # fixes every other axis that has several levels
        row_levels: [fixmatch, mutexmatch]   # optional subset/order; default all levels in YAML order
        column_levels: [...]            # likewise
        row_labels: {fixmatch: FixMatch}     # display names; default the level name
        column_labels: {digits-20: "20 labels"}
        row_group_labels: {cnn13: "Backbone: CNN-13"}
        row_header: Method              # heading of the label column; default the rows axis, capitalised
        column_groups: {"CIFAR-10": [cifar10-40]}   # optional two-level header; then every column in one group
        metric: test/acc
        protocol: best                  # best | final | median20
        published: {mutexmatch: {digits-20: "93.22±2.52"}}   # with row_groups: {group: {row: {column: …}}}
        paired: {a: mutexmatch, b: fixmatch}   # or a list of such pairs (row levels)
        paired_column: true             # the comparisons as a "Δ (p)" column in the table, not tables below it
        tuned_rows: {mutexmatch: "MutexMatch (tuned)"}   # a row of the search's refit runs after its level
        paper: true                     # false hides the Paper and Δ columns (the numbers stay in the YAML)
        value_columns: [ours, paper, delta]   # the sub-columns under each column with published numbers, in order
        quoted_rows:                    # rows the paper prints and we do not run (orchestration.contract.published)
          - {label: MixMatch, mark: "†", values: {digits-20: "52.46±11.50", digits-40: "-"}}
          - {label: CoMatch, mark: "*", level: comatch, values: {...}}   # a run row once `comatch` is a level
        footnotes: {"†": "reported in FixMatch", "*": "the paper authors' reimplementation"}   # per mark used

Figures (``type`` picks the kind; ``id`` defaults to ``<type><index>``)::

    figures:
      - {type: curves, cells: [{method: mutexmatch}], metrics: [test/acc, train/pl_acc], sharey: true}
      - {type: heatmap, cell: {method: mutexmatch, setting: digits-20}, step: null, fold: null,
         class_names: [airplane, automobile, ...]}
      - {type: sensitivity, axis: k, param: algorithm.k, series: method, where: {setting: c10-40},
         metric: test/acc, protocol: best}

A ``tuned_rows`` level needs a ``search`` that covers it with refit on: its row ``<level>+tuned`` (usable in
``paired`` and ``published``) reads the refit runs (kind ``refit``, cell id plus ``tuned=true``) of the cell, never
the grid's, so ``paired: {a: mutexmatch+tuned, b: mutexmatch}`` is tuned − default on the same folds.

When ``figures`` is absent or empty, each table gets a learning-curve figure over its cells. ``title`` replaces a
figure's generated caption.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from mutexmatch.checks import validation_error_lines
from mutexmatch.dotted import flatten_dotted

from orchestration import contract
from orchestration.contract.metrics import FIXED, is_logged, logged
from orchestration.contract.published import MARKS, LayoutError, PublishedValue, QuotedRow, parse_published

__all__ = [
    "PROTOCOLS",
    "METRIC_NAMES",
    "metric_name",
    "LayoutError",
    "Axes",
    "PublishedValue",
    "QuotedRow",
    "MARKS",
    "PairedSpec",
    "TableLayout",
    "CurvesFigure",
    "HeatmapFigure",
    "SensitivityFigure",
    "FigureLayout",
    "ReportLayout",
    "parse_axes",
    "cell_id",
    "TUNED_ROW",
    "parse_published",
    "sensitivity_param",
    "sensitivity_x",
    "validate_layout",
    "validate_report",
    "param_name",
]

PROTOCOLS = ("best", "final", "median20")
Terms = Optional[Iterable[str]]   # the algorithms' loss terms, where the caller knows them (validate_report)
Protocol = Literal["best", "final", "median20"]
# What the trainer's metrics are, in words, for captions and legends (unlisted ones are shown by their key).
METRIC_NAMES = {contract.TEST_ACC: "test accuracy (EMA model)", "test/acc_raw": "test accuracy (raw model)",
                contract.TEST_BEST_ACC: "best test accuracy so far", contract.VAL_ACC: "validation accuracy",
                contract.VAL_BEST_ACC: "best validation accuracy", "test/median_acc": "median test accuracy",
                contract.PL_ACC: "pseudo-label accuracy", contract.TRAIN_LOSS: "training loss",
                "train/cpa": "complementary-label accuracy", "train/mask_ratio": "share of confident samples"}


def metric_name(metric: str) -> str:
    """``metric`` in words (:data:`METRIC_NAMES`), else the key itself."""
    return METRIC_NAMES.get(metric, metric)


# Config keys in words for figure axes: the paper's symbol where it has one (``algorithm.tau`` → τ).
PARAM_NAMES = {"optim.lr": "learning rate", "optim.weight_decay": "weight decay", "train.ema": "EMA decay",
               "train.batch_size": "batch size B", "train.mu": "μ (unlabeled ratio)", "data.num_labels": "labels"}
_GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "eta": "η", "lambda": "λ", "mu": "μ", "tau": "τ"}


def param_name(key: str) -> str:
    """A dotted config key in words (:data:`PARAM_NAMES`), else its last part with Greek names as letters:
    ``algorithm.tau`` → ``τ``, ``algorithm.lambda_sep`` → ``λ_sep``, ``algorithm.k`` → ``k``."""
    if key in PARAM_NAMES:
        return PARAM_NAMES[key]
    head, _, tail = key.rpartition(".")[2].partition("_")
    return _GREEK.get(head, head) + (f"_{tail}" if tail else "")


_ID = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: `$` also matches before a final newline (main\n.md)


# ---------------------------------------------------------------------------------------------------------- axes --

Axes = dict[str, dict[str, dict[str, Any]]]
"""axis name → level name → partial RunConfig override, in YAML order (level names as strings, as in the tags)."""


def parse_axes(spec: dict[str, Any]) -> Axes:
    """Read ``axes`` from a sweep spec; level names become strings (the MLflow tags hold ``str(level)``)."""
    raw = spec.get("axes")
    if not isinstance(raw, dict) or not raw:
        raise LayoutError(f"axes={raw!r}: must be a non-empty mapping axis -> {{level: override}}")
    axes: Axes = {}
    for axis, levels in raw.items():
        if not isinstance(levels, dict) or not levels:
            raise LayoutError(f"axes.{axis}={levels!r}: must be a non-empty mapping level -> override")
        axes[str(axis)] = {}
        for level, override in levels.items():
            if override is not None and not isinstance(override, dict):
                raise LayoutError(f"axes.{axis}.{level}={override!r}: must be a mapping (a partial run config)")
            axes[str(axis)][str(level)] = override or {}
    return axes


def cell_id(cell: dict[str, str], axes: Axes) -> str:
    """The cell's id string, ``axis=level`` joined by commas in YAML axis order (as the ``mutexmatch.cell`` tag);
    a tuned row's cell (``tuned: "true"``, see :meth:`TableLayout.cell`) is the refit runs' id."""
    levels = [(a, cell[a]) for a in axes]
    return contract.cell_id(contract.tuned_levels(levels) if contract.TUNED_AXIS in cell else levels)


TUNED_ROW = "+tuned"
"""A table row ``<level>+tuned`` (``tuned_rows``): the refit runs of the search's best parameters on that level."""


# -------------------------------------------------------------------------------------------------------- tables --

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PairedSpec(_Strict):
    """Compare row level ``a`` against row level ``b`` on the same folds (difference = a − b)."""

    a: str
    b: str


class TableLayout(_Strict):
    """One report table (see the module docstring for the YAML)."""

    id: str
    caption: str = ""
    rows: str
    columns: str
    row_groups: str | None = None
    where: dict[str, str] = Field(default_factory=dict)
    row_levels: list[str] | None = None
    column_levels: list[str] | None = None
    row_labels: dict[str, str] = Field(default_factory=dict)
    column_labels: dict[str, str] = Field(default_factory=dict)
    row_group_labels: dict[str, str] = Field(default_factory=dict)
    column_groups: dict[str, list[str]] = Field(default_factory=dict)
    row_header: str | None = None       # heading of the label column; default the rows axis, capitalised
    metric: str = contract.TEST_ACC
    protocol: Protocol = "best"
    published: dict[str, Any] = Field(default_factory=dict)
    paired: list[PairedSpec] = Field(default_factory=list)
    paired_column: bool = False         # the paired comparisons as a Δ (p) sub-column, one pair per row at most
    paper: bool = True                  # False: no Paper/Δ columns even when `published` has numbers
    value_columns: list[Literal["ours", "paper", "delta"]] = Field(
        default_factory=lambda: ["ours", "paper", "delta"])
    tuned_rows: dict[str, str] = Field(default_factory=dict)   # row level → label of its refit (tuned) row
    quoted_rows: list[QuotedRow] = Field(default_factory=list)  # rows the paper prints and we do not run
    footnotes: dict[str, str] = Field(default_factory=dict)     # mark (†, ‡, *) → what it means

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError("must use only letters, digits, `_` and `-` (it names the output files)")
        return v

    @field_validator("paired", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else ([] if v is None else v)

    # Resolved views, valid once `_check_table` has passed.
    def row_keys(self, axes: Axes, tuned: bool = True) -> list[str]:
        """The row levels; with ``tuned``, each ``tuned_rows`` level followed by its ``<level>+tuned`` row."""
        levels = list(self.row_levels) if self.row_levels is not None else list(axes[self.rows])
        if not tuned:
            return levels
        rows = [r for lvl in levels for r in ([lvl, lvl + TUNED_ROW] if lvl in self.tuned_rows else [lvl])]
        return rows + [lvl + TUNED_ROW for lvl in self.tuned_rows if lvl not in levels]

    def group_keys(self, axes: Axes) -> list[str | None]:
        return [None] if self.row_groups is None else list(axes[self.row_groups])

    def column_keys(self, axes: Axes) -> list[str]:
        if self.column_groups:
            return [c for cols in self.column_groups.values() for c in cols]
        return list(self.column_levels) if self.column_levels is not None else list(axes[self.columns])

    def row_label(self, level: str) -> str:
        """The row's display name: ``row_labels``, a tuned row's label, the label of the quoted row it was (a
        quoted row's ``level``), else the level itself."""
        if level.endswith(TUNED_ROW) and level[:-len(TUNED_ROW)] in self.tuned_rows:
            return self.tuned_rows[level[:-len(TUNED_ROW)]]
        quoted = next((q.label for q in self.quoted_rows if q.level == level), level)
        return self.row_labels.get(level, quoted)

    def row_mark(self, group: str | None, level: str) -> str | None:
        """The paper's mark after a run row's label: the mark of the quoted row that became it (CoMatch*)."""
        return next((q.mark for q in self.quoted_rows if q.level == level and q.group == group), None)

    def quoted(self, axes: Axes, group: str | None) -> list[QuotedRow]:
        """The quoted rows printed as such in ``group``: those whose ``level`` is not a row the table runs."""
        rows = set(self.row_keys(axes))
        return [q for q in self.quoted_rows if q.group == group and q.level not in rows]

    def column_label(self, level: str) -> str:
        return self.column_labels.get(level, level)

    def group_label(self, level: str | None) -> str:
        return "" if level is None else self.row_group_labels.get(level, f"{self.row_groups}={level}")

    def cell(self, axes: Axes, group: str | None, row: str, column: str) -> dict[str, str]:
        """The full cell (axis → level) at a table position; single-level axes take their only level. A tuned row's
        cell also has ``tuned: "true"`` (its :func:`cell_id` is the refit runs')."""
        tuned = row.endswith(TUNED_ROW) and row[:-len(TUNED_ROW)] in self.tuned_rows
        fixed = {a: next(iter(levels)) for a, levels in axes.items() if len(levels) == 1}
        fixed.update(self.where)
        fixed[self.rows] = row[:-len(TUNED_ROW)] if tuned else row
        fixed[self.columns] = column
        if self.row_groups is not None and group is not None:
            fixed[self.row_groups] = group
        return {a: fixed[a] for a in axes} | ({contract.TUNED_AXIS: contract.TUNED_LEVEL} if tuned else {})

    def published_values(self, axes: Axes) -> dict[tuple[str | None, str, str], PublishedValue]:
        """(group, row, column) → published number of a run row: ``published``, and the values of each quoted row
        whose ``level`` is a row of the table; ``group`` is None without ``row_groups``."""
        out: dict[tuple[str | None, str, str], PublishedValue] = {}
        blocks = self.published.items() if self.row_groups else [(None, self.published)]
        for group, rows in blocks:
            for row, cols in rows.items():
                for col, value in cols.items():
                    where = "published." + ".".join(str(p) for p in (group, row, col) if p is not None)
                    out[(group, row, col)] = parse_published(value, where)
        rows = set(self.row_keys(axes))
        for i, q in enumerate(self.quoted_rows):
            if q.level in rows:
                out.update({(q.group, q.level, col): v for col, v in q.parsed(f"quoted_rows[{i}]").items()})
        return out


# ------------------------------------------------------------------------------------------------------- figures --

class CurvesFigure(_Strict):
    """Learning curves, one panel per cell: each metric's mean over folds vs step with a ±std band."""

    type: Literal["curves"]
    id: str | None = None
    title: str = ""
    cells: list[dict[str, str]] = Field(default_factory=list)   # partial cells; empty = every cell
    metrics: list[str] = Field(default_factory=lambda: [contract.TEST_ACC, contract.PL_ACC])
    sharey: bool = True                  # one y-range for every panel, so panels compare at a glance


class HeatmapFigure(_Strict):
    """The paper's Fig. "dis": row-normalised TPC pseudo-label and TNC complementary-label counts per true class."""

    type: Literal["heatmap"]
    id: str | None = None
    title: str = ""
    cell: dict[str, str]                 # a full cell
    step: int | None = None              # None = each run's last logged step
    fold: int | None = None              # None = counts summed over the cell's finished folds
    class_names: list[str] | None = None  # tick labels, in class-index order; default the class indices


class SensitivityFigure(_Strict):
    """Accuracy (mean ± std over folds) against the parameter value of a swept axis (the paper's k and τ plots)."""

    type: Literal["sensitivity"]
    id: str | None = None
    title: str = ""
    axis: str
    param: str | None = None             # dotted config key whose value is x; default: the levels' only override
    series: str | None = None            # an axis giving one line per level
    where: dict[str, str] = Field(default_factory=dict)
    metric: str = contract.TEST_ACC
    protocol: Protocol = "best"


FigureLayout = Annotated[Union[CurvesFigure, HeatmapFigure, SensitivityFigure], Field(discriminator="type")]


@dataclass(frozen=True)
class ReportLayout:
    """Everything a report needs from the YAML, validated."""

    name: str
    axes: Axes
    folds: list[int]
    tables: list[TableLayout]
    figures: list[CurvesFigure | HeatmapFigure | SensitivityFigure]
    exclude: list[dict[str, str]] = dataclass_field(default_factory=list)   # the sweep's excluded partial cells
    search: dict[str, Any] | None = None    # the sweep's `search` as written (reports.search reads it)


# ---------------------------------------------------------------------------------------------------- validation --

def _stringify_keys(value: Any) -> Any:
    """YAML turns level names like ``10`` or ``0.95`` into numbers; tags and cell ids hold them as strings."""
    if isinstance(value, dict):
        return {str(k): _stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify_keys(v) for v in value]
    return value


def _stringify_levels(raw: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    out = dict(raw)
    for key in keys:
        if key in out and isinstance(out[key], list):
            out[key] = [str(v) for v in out[key]]
        if key in out and isinstance(out[key], dict):
            out[key] = {str(k): (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                        for k, v in out[key].items()}
    return out


def _pydantic_lines(err: ValidationError, prefix: str) -> list[str]:
    def where(loc: tuple) -> str:  # without the figure-type tags pydantic inserts into a tagged union's locations
        rest = ".".join(str(p) for p in loc if p not in ("curves", "heatmap", "sensitivity"))
        return f"{prefix}.{rest}" if rest else prefix

    return validation_error_lines(err, where=where, missing="required")


def _levels_line(where: str, value: str, axis: str, axes: Axes) -> str:
    return f"{where}={value!r}: not a level of axis {axis!r}; levels: {', '.join(axes[axis])}"


def _check_axis(where: str, name: Any, axes: Axes) -> list[str]:
    if name not in axes:
        return [f"{where}={name!r}: not an axis; axes: {', '.join(axes)}"]
    return []


def _check_partial_cell(where: str, cell: dict[str, str], axes: Axes) -> list[str]:
    errors = []
    for axis, level in cell.items():
        if axis not in axes:
            errors.append(f"{where}.{axis}: not an axis; axes: {', '.join(axes)}")
        elif level not in axes[axis]:
            errors.append(_levels_line(f"{where}.{axis}", level, axis, axes))
    return errors


def _check_table(t: TableLayout, where: str, axes: Axes, terms: Terms) -> list[str]:
    errors: list[str] = []
    errors += _metric_errors(f"{where}.metric", [t.metric], terms)
    for key in ("rows", "columns", "row_groups"):
        if getattr(t, key) is not None:
            errors += _check_axis(f"{where}.{key}", getattr(t, key), axes)
    if errors:
        return errors
    used = [a for a in (t.rows, t.columns, t.row_groups) if a is not None]
    if len(set(used)) != len(used):
        errors.append(f"{where}: rows={t.rows!r}, columns={t.columns!r}, row_groups={t.row_groups!r} must be "
                      "different axes")
    errors += _check_partial_cell(f"{where}.where", t.where, axes)
    for axis in used:
        if axis in t.where:
            errors.append(f"{where}.where.{axis}: {axis!r} is laid out by the table; it cannot also be fixed")
    for axis, levels in axes.items():
        if axis not in used and axis not in t.where and len(levels) > 1:
            errors.append(f"{where}.where: axis {axis!r} has {len(levels)} levels ({', '.join(levels)}) and is "
                          "not laid out by the table; fix one with `where: {" + axis + ": <level>}`")
    for key, axis in (("row_levels", t.rows), ("column_levels", t.columns)):
        chosen = getattr(t, key)
        if chosen is not None:
            if not chosen:
                errors.append(f"{where}.{key}=[]: must list at least one level (or be omitted for all)")
            for lvl in chosen:
                if lvl not in axes[axis]:
                    errors.append(_levels_line(f"{where}.{key}", lvl, axis, axes))
            if len(set(chosen)) != len(chosen):
                errors.append(f"{where}.{key}={chosen!r}: lists a level twice")
    errors += _check_labels_and_groups(t, where, axes)
    if "ours" not in t.value_columns or len(set(t.value_columns)) != len(t.value_columns):
        errors.append(f"{where}.value_columns={t.value_columns!r}: must list `ours` and each of ours, paper, delta "
                      "at most once")
    rows, cols = set(t.row_keys(axes)), set(t.column_keys(axes))
    groups = set(t.group_keys(axes))
    for pair_i, pair in enumerate(t.paired):
        for side in ("a", "b"):
            lvl = getattr(pair, side)
            if lvl not in rows:
                errors.append(f"{where}.paired[{pair_i}].{side}={lvl!r}: not a row of the table; rows: "
                              f"{', '.join(t.row_keys(axes))}")
        if pair.a == pair.b:
            errors.append(f"{where}.paired[{pair_i}]: a and b are both {pair.a!r}")
        if t.paired_column and [p.a for p in t.paired].count(pair.a) > 1 and t.paired.index(pair) == pair_i:
            errors.append(f"{where}.paired[{pair_i}].a={pair.a!r}: paired_column shows one comparison per row, and "
                          f"{pair.a!r} is `a` of {[p.a for p in t.paired].count(pair.a)} pairs; keep one, or set "
                          "paired_column: false")
    errors += _check_published(t, where, axes, groups, rows, cols)
    errors += _check_quoted(t, where, axes, rows) + _check_footnotes(t, where)
    return errors


def _check_labels_and_groups(t: TableLayout, where: str, axes: Axes) -> list[str]:
    """Labels name levels of their axes; column groups hold levels of the columns axis, each once."""
    errors: list[str] = []
    for key, axis in (("row_labels", t.rows), ("column_labels", t.columns), ("row_group_labels", t.row_groups)):
        labels = getattr(t, key)
        if labels and axis is None:
            errors.append(f"{where}.{key}: given but the table has no row_groups")
            continue
        for lvl in labels:
            if lvl not in axes[axis]:
                errors.append(_levels_line(f"{where}.{key}", lvl, axis, axes))
    if t.column_groups:
        if t.column_levels is not None:
            errors.append(f"{where}.column_levels: give either column_levels or column_groups (whose lists set the "
                          "columns and their order), not both")
        grouped = [c for cols in t.column_groups.values() for c in cols]
        for lvl in grouped:
            if lvl not in axes[t.columns]:
                errors.append(_levels_line(f"{where}.column_groups", lvl, t.columns, axes))
        if len(set(grouped)) != len(grouped):
            errors.append(f"{where}.column_groups: a column appears in two groups")
        for group, cols in t.column_groups.items():
            if not cols:
                errors.append(f"{where}.column_groups.{group}=[]: a group needs at least one column")
    return errors


def _check_published(t: TableLayout, where: str, axes: Axes, groups: set, rows: set, cols: set) -> list[str]:
    errors: list[str] = []
    blocks: list[tuple[str | None, Any]]
    if t.row_groups is None:
        blocks = [(None, t.published)]
    else:
        blocks = list(t.published.items())
        for g, _ in blocks:
            if g not in groups:
                errors.append(_levels_line(f"{where}.published", g, t.row_groups, axes))
    for group, block in blocks:
        base = f"{where}.published" + (f".{group}" if group is not None else "")
        if not isinstance(block, dict):
            errors.append(f"{base}={block!r}: must be a mapping row -> {{column: number}}")
            continue
        for row, row_values in block.items():
            if row not in rows:
                errors.append(f"{base}.{row}: not a row of the table; rows: {', '.join(t.row_keys(axes))} (a row "
                              "the paper prints and the sweep does not run is a `quoted_rows` entry)")
                continue
            if not isinstance(row_values, dict):
                errors.append(f"{base}.{row}={row_values!r}: must be a mapping column -> number")
                continue
            for col, value in row_values.items():
                if col not in cols:
                    errors.append(f"{base}.{row}.{col}: not a column of the table; columns: "
                                  f"{', '.join(t.column_keys(axes))}")
                    continue
                try:
                    mark = parse_published(value, f"{base}.{row}.{col}").mark
                except LayoutError as e:
                    errors.append(str(e))
                    continue
                if mark is not None and mark not in t.footnotes:
                    errors.append(_no_footnote(f"{base}.{row}.{col}", value, mark))
    return errors


def _no_footnote(where: str, value: Any, mark: str) -> str:
    return (f"{where}={value!r}: the mark {mark!r} has no footnote; say what it means in the table's "
            f"`footnotes: {{\"{mark}\": <text>}}`")


def _check_quoted(t: TableLayout, where: str, axes: Axes, rows: set) -> list[str]:
    """Each quoted row: in a row group of the table when it has them (else none), a printed value or "-" for every
    column and nothing else, its marks footnoted, its label once per group, and — when its ``level`` is a row of
    the table — its numbers not given again under ``published``."""
    errors: list[str] = []
    if t.quoted_rows and not (t.paper and "paper" in t.value_columns):
        errors.append(f"{where}.quoted_rows: quoted rows print their numbers in the Paper sub-column, which "
                      f"paper={t.paper}, value_columns={t.value_columns} hides; show it or drop the quoted rows")
    for i, q in enumerate(t.quoted_rows):
        at = f"{where}.quoted_rows[{i}]"
        if t.row_groups is None and q.group is not None:
            errors.append(f"{at}.group={q.group!r}: the table has no row_groups; leave group out")
        elif t.row_groups is not None and q.group not in axes[t.row_groups]:
            errors.append(f"{at}.group={q.group!r}: must be a level of the row_groups axis {t.row_groups!r}; "
                          f"levels: {', '.join(axes[t.row_groups])}")
        for key in ("label", "level"):
            value = getattr(q, key)
            if value is not None and any(getattr(o, key) == value and o.group == q.group
                                         for o in t.quoted_rows[:i]):
                errors.append(f"{at}.{key}={value!r}: an earlier quoted row of the same group has it")
        errors += _check_quoted_values(t, at, q, t.column_keys(axes))
        if q.mark is not None and q.mark not in t.footnotes:
            errors.append(_no_footnote(f"{at}.mark", q.mark, q.mark))
        published = t.published.get(q.group, {}) if t.row_groups else t.published
        if q.level in rows and isinstance(published, dict) and q.level in published:
            errors.append(f"{at}.level={q.level!r}: the row also has `published` numbers; give its printed "
                          "numbers once, in the quoted row")
    return errors


def _check_quoted_values(t: TableLayout, at: str, q: QuotedRow, columns: list[str]) -> list[str]:
    errors: list[str] = []
    for col in q.values:
        if col not in columns:
            errors.append(f"{at}.values.{col}: not a column of the table; columns: {', '.join(columns)}")
    missing = [c for c in columns if c not in q.values]
    if missing:
        errors.append(f"{at}.values: no value for {', '.join(missing)}; give each column the printed number, or "
                      "\"-\" where the paper leaves the cell empty")
    try:
        parsed = q.parsed(at)
    except LayoutError as e:
        return errors + [str(e)]
    if not parsed:
        errors.append(f"{at}.values: every value is \"-\"; a quoted row needs at least one printed number")
    for col, value in parsed.items():
        if value.mark is not None and value.mark not in t.footnotes:
            errors.append(_no_footnote(f"{at}.values.{col}", q.values[col], value.mark))
    return errors


def _check_footnotes(t: TableLayout, where: str) -> list[str]:
    """Footnotes only for the marks :data:`MARKS`, each with a text, each carried by a row or a cell."""
    errors: list[str] = []
    used = {q.mark for q in t.quoted_rows} | _value_marks([t.published] + [q.values for q in t.quoted_rows])
    for mark, text in t.footnotes.items():
        if mark not in MARKS:
            errors.append(f"{where}.footnotes.{mark}: not a mark; marks: {', '.join(MARKS)}")
        elif not isinstance(text, str) or not text.strip():
            errors.append(f"{where}.footnotes.{mark}={text!r}: must be the footnote's text")
        elif mark not in used:
            errors.append(f"{where}.footnotes.{mark}: no quoted row or published value carries the mark {mark!r}")
    return errors


def _value_marks(node: Any) -> set[str]:
    """The cell marks of every well-formed printed value under ``node`` (the others are reported elsewhere)."""
    if isinstance(node, dict):
        node = list(node.values())
    if isinstance(node, list):
        return set().union(*(_value_marks(n) for n in node)) if node else set()
    try:
        mark = parse_published(node, "").mark
    except LayoutError:
        return set()
    return {mark} if mark else set()


def _metric_errors(where: str, metrics: list[str], terms: Terms) -> list[str]:
    """One line per name the trainer never logs (:func:`mutexmatch.metrics.is_logged` with the algorithms' loss
    ``terms``, or any well-formed ``train/<term>`` without them), with the closest one."""
    known = sorted(FIXED if terms is None else logged(terms))
    errors = []
    for m in metrics:
        if not is_logged(m, terms):
            close = difflib.get_close_matches(m, known, n=1)
            errors.append(f"{where}: {m!r} is not a metric the trainer logs" +
                          (f"; did you mean {close[0]!r}?" if close else f" ({', '.join(known)})"))
    return errors


def _check_figure(f: CurvesFigure | HeatmapFigure | SensitivityFigure, where: str, axes: Axes,
                  terms: Terms) -> list[str]:
    errors: list[str] = []
    if isinstance(f, CurvesFigure):
        for i, cell in enumerate(f.cells):
            errors += _check_partial_cell(f"{where}.cells[{i}]", cell, axes)
        if not f.metrics:
            errors.append(f"{where}.metrics=[]: name at least one metric")
        errors += _metric_errors(f"{where}.metrics", f.metrics, terms)
    elif isinstance(f, HeatmapFigure):
        errors += _check_partial_cell(f"{where}.cell", f.cell, axes)
        missing = [a for a in axes if a not in f.cell]
        if missing:
            errors.append(f"{where}.cell={f.cell!r}: must name a full cell; missing axes: {', '.join(missing)}")
    else:
        errors += _metric_errors(f"{where}.metric", [f.metric], terms)
        errors += _check_axis(f"{where}.axis", f.axis, axes)
        if f.series is not None:
            errors += _check_axis(f"{where}.series", f.series, axes)
        errors += _check_partial_cell(f"{where}.where", f.where, axes)
        if errors:
            return errors
        if f.series == f.axis:
            errors.append(f"{where}.series={f.series!r}: must differ from axis")
        for axis, levels in axes.items():
            if axis not in (f.axis, f.series) and axis not in f.where and len(levels) > 1:
                errors.append(f"{where}.where: axis {axis!r} has {len(levels)} levels; fix one with "
                              "`where: {" + axis + ": <level>}`")
        for axis in (f.axis, f.series):
            if axis is not None and axis in f.where:
                errors.append(f"{where}.where.{axis}: {axis!r} is plotted; it cannot also be fixed")
        try:
            sensitivity_x(f, axes, where)
        except LayoutError as e:
            errors.append(str(e))
    return errors


def sensitivity_param(fig: SensitivityFigure, axes: Axes, where: str = "figure") -> str:
    """The dotted config key swept along ``fig.axis``: ``fig.param``, or the one key all its levels override."""
    if fig.param is not None:
        return fig.param
    keys = {k for override in axes[fig.axis].values() for k in flatten_dotted(override)}
    if len(keys) != 1:
        raise LayoutError(f"{where}.param: axis {fig.axis!r} levels override {sorted(keys) or 'nothing'}; name "
                          "the swept config key with `param: <dotted.key>`")
    return keys.pop()


def sensitivity_x(fig: SensitivityFigure, axes: Axes, where: str = "figure") -> dict[str, Any]:
    """level → x value: each level override's value at :func:`sensitivity_param`."""
    param = sensitivity_param(fig, axes, where)
    flat = {lvl: flatten_dotted(o) for lvl, o in axes[fig.axis].items()}
    missing = [lvl for lvl, f in flat.items() if param not in f]
    if missing:
        raise LayoutError(f"{where}.param={param!r}: levels {', '.join(missing)} of axis {fig.axis!r} do not set it")
    return {lvl: f[param] for lvl, f in flat.items()}


def validate_report(spec: dict[str, Any], terms: Terms = None) -> ReportLayout:
    """Validate the ``tables`` and ``figures`` sections of a sweep spec against its ``axes``.

    ``terms``: the loss terms the registered algorithms declare (``train/<term>`` metrics), given by a caller that
    knows the registry (the sweep at launch); without them (the report, which never imports the trainer) any
    well-formed ``train/<term>`` passes here and is checked against what the runs logged when the report is built.

    Raises :class:`LayoutError` (a ``ValueError``) listing every problem, one line each.
    """
    if not isinstance(spec, dict):
        raise LayoutError(f"spec: must be a mapping, got {type(spec).__name__}")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise LayoutError(f"name={name!r}: must be a non-empty string (the MLflow experiment name)")
    axes = parse_axes(spec)
    folds = spec.get("folds", [0, 1, 2, 3, 4])
    if not isinstance(folds, list) or not folds or not all(isinstance(f, int) and not isinstance(f, bool)
                                                           for f in folds):
        raise LayoutError(f"folds={folds!r}: must be a non-empty list of integers")
    raw_tables = spec.get("tables") or []
    raw_figures = spec.get("figures") or []
    if not isinstance(raw_tables, list):
        raise LayoutError(f"tables={raw_tables!r}: must be a list of table layouts")
    if not isinstance(raw_figures, list):
        raise LayoutError(f"figures={raw_figures!r}: must be a list of figure layouts")
    tables, errors = _tables(raw_tables, axes, terms)
    errors += [e for t in tables for e in _check_tuned_rows(t, axes, spec.get("search"))]
    figures, figure_errors = _figures(raw_figures, axes, terms)
    errors += figure_errors
    ids = [t.id for t in tables] + [f.id for f in figures]
    dupes = sorted({x for x in ids if ids.count(x) > 1})
    if dupes:
        errors.append(f"tables/figures id: {', '.join(dupes)} used twice (ids name the output files)")
    if errors:
        raise LayoutError("\n".join(errors))
    if not raw_figures:
        figures = [CurvesFigure(type="curves", id=f"curves-{t.id}",
                                cells=[t.cell(axes, g, r, c) for g in t.group_keys(axes)
                                       for r in t.row_keys(axes, tuned=False) for c in t.column_keys(axes)])
                   for t in tables]
    return ReportLayout(name=name, axes=axes, folds=list(folds), tables=tables, figures=figures,
                        exclude=_parse_exclude(spec.get("exclude")),
                        search=spec.get("search") if isinstance(spec.get("search"), dict) else None)


def _check_tuned_rows(t: TableLayout, axes: Axes, search: Any) -> list[str]:
    """Each ``tuned_rows`` level is a level of the rows axis that the YAML's search covers with refit on (else its
    row could only ever be "—")."""
    where = f"tables({t.id}).tuned_rows"
    if t.tuned_rows and contract.TUNED_AXIS in axes:
        return [f"{where}: the sweep has an axis named {contract.TUNED_AXIS!r}, which refit cells use; rename it"]
    errors = []
    for level in t.tuned_rows:
        if level not in axes[t.rows]:
            errors.append(_levels_line(f"{where}.{level}", level, t.rows, axes))
        elif not isinstance(search, dict) or search.get("refit") is False or \
                (isinstance(search.get("refit"), dict) and search["refit"].get("enabled") is False):
            errors.append(f"{where}.{level}: needs a `search` with refit on (the row reads its refit runs); the "
                          f"YAML has {'refit turned off' if isinstance(search, dict) else 'no search'}")
        elif not any(str(cell.get(t.rows, level)) == level for cell in search.get("cells") or [{}]
                     if isinstance(cell, dict)):
            errors.append(f"{where}.{level}: search.cells do not cover {t.rows}={level}; cells: "
                          f"{search.get('cells')}")
    return errors


def _parse_exclude(raw: Any) -> list[dict[str, str]]:
    """The sweep's ``exclude`` partial cells, levels as strings (orchestration validates them; a report only needs
    to know that such a cell has no run on purpose)."""
    if not isinstance(raw, list):
        return []
    return [{str(a): str(lv) for a, lv in cell.items()} for cell in raw if isinstance(cell, dict)]


def _tables(raw_tables: list, axes: Axes, terms: Terms) -> tuple[list[TableLayout], list[str]]:
    """The valid table layouts and one error line per problem of the others."""
    errors: list[str] = []
    tables: list[TableLayout] = []
    for i, raw in enumerate(raw_tables):
        where = f"tables[{i}]"
        if not isinstance(raw, dict):
            errors.append(f"{where}={raw!r}: must be a mapping")
            continue
        raw = _stringify_levels(_stringify_keys(raw), ("where", "row_levels", "column_levels"))
        if isinstance(raw.get("column_groups"), dict):
            raw["column_groups"] = {k: [str(c) for c in v] if isinstance(v, list) else v
                                    for k, v in raw["column_groups"].items()}
        if isinstance(raw.get("quoted_rows"), list):   # a YAML number as group or level: the tags hold strings
            raw["quoted_rows"] = [{k: str(v) if k in ("group", "level") and isinstance(v, (int, float)) and
                                   not isinstance(v, bool) else v for k, v in q.items()} if isinstance(q, dict)
                                  else q for q in raw["quoted_rows"]]
        if isinstance(raw.get("paired"), (dict, list)):
            pairs = raw["paired"] if isinstance(raw["paired"], list) else [raw["paired"]]
            raw["paired"] = [{k: str(v) for k, v in p.items()} if isinstance(p, dict) else p for p in pairs]
        try:
            table = TableLayout.model_validate(raw)
        except ValidationError as err:
            errors += _pydantic_lines(err, where)
            continue
        problems = _check_table(table, f"{where}({table.id})", axes, terms)
        errors += problems
        if not problems:
            tables.append(table)
    return tables, errors


def _figures(raw_figures: list, axes: Axes,
             terms: Terms) -> tuple[list[CurvesFigure | HeatmapFigure | SensitivityFigure], list[str]]:
    """The valid figure layouts (ids defaulted) and one error line per problem of the others."""
    errors: list[str] = []
    adapter: TypeAdapter = TypeAdapter(FigureLayout)
    figures: list[CurvesFigure | HeatmapFigure | SensitivityFigure] = []
    for i, raw in enumerate(raw_figures):
        where = f"figures[{i}]"
        if not isinstance(raw, dict):
            errors.append(f"{where}={raw!r}: must be a mapping with a `type` (curves, heatmap, sensitivity)")
            continue
        raw = _stringify_keys(raw)
        raw = _stringify_levels(raw, ("where", "cell"))
        if isinstance(raw.get("cells"), list):
            raw["cells"] = [_stringify_levels({"c": c}, ("c",))["c"] if isinstance(c, dict) else c
                            for c in raw["cells"]]
        try:
            fig = adapter.validate_python(raw)
        except ValidationError as err:
            errors += _pydantic_lines(err, where)
            continue
        if fig.id is None:
            fig = fig.model_copy(update={"id": f"{fig.type}{i}"})
        elif not _ID.match(fig.id):
            errors.append(f"{where}.id={fig.id!r}: must use only letters, digits, `_` and `-`")
            continue
        problems = _check_figure(fig, where, axes, terms)
        errors += problems
        if not problems:
            figures.append(fig)
    return figures, errors


def validate_layout(spec: dict[str, Any]) -> list[TableLayout]:
    """Validate a sweep spec's ``tables`` (and ``figures``) against its ``axes``; return the table layouts.

    Checks that rows/columns/row_groups name axes, every level named (``where``, ``row_levels``, labels, groups,
    ``paired``) is a level of its axis, every other multi-level axis is fixed, and each published number refers to a
    (row, column) of its table. Raises :class:`LayoutError` (a ``ValueError``), one line per problem.
    """
    return validate_report(spec).tables
