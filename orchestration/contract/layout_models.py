"""The report-layout schema's names and models: protocols, metric and parameter names as the report prints them,
the axes of a sweep YAML, and the typed ``tables:``/``figures:`` entries (:mod:`orchestration.contract.layout`
checks them against the axes and is the module to import)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestration import contract
from orchestration.contract.published import LayoutError, PublishedValue, QuotedRow, parse_published

PROTOCOLS = ("best", "final", "median20")
Terms = Optional[Iterable[str]]   # the algorithms' loss terms, where the caller knows them (validate_report)
Protocol = Literal["best", "final", "median20"]
# What the trainer's metrics are, in words, for captions and legends (unlisted ones are shown by their key).
METRIC_NAMES = {contract.TEST_ACC: "test accuracy (EMA model)", "test/acc_raw": "test accuracy (raw model)",
                contract.TEST_BEST_ACC: "best test accuracy so far", contract.VAL_ACC: "validation accuracy",
                contract.VAL_BEST_ACC: "best validation accuracy", "test/median_acc": "median test accuracy",
                contract.PL_ACC: "pseudo-label accuracy", contract.TRAIN_LOSS: "training loss",
                "train/cpa": "complementary-label accuracy", "train/mask_ratio": "share of confident samples",
                "test/balanced_acc": "balanced test accuracy",
                "val/balanced_acc": "balanced validation accuracy", "test/macro_f1": "macro F1 (test)",
                "test/head_acc": "head-class test accuracy", "test/medium_acc": "medium-class test accuracy",
                "test/tail_acc": "tail-class test accuracy"}


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
    row_marks: dict[str, str] = Field(default_factory=dict)     # a run row's level → the paper's mark (FixMatch*)

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
        """The paper's mark after a run row's label: the mark of the quoted row that became it (CoMatch*), else its
        ``row_marks`` entry (a row the paper prints marked without a quoted row: FixMatch*, issue 32)."""
        quoted = next((q.mark for q in self.quoted_rows if q.level == level and q.group == group), None)
        return quoted if quoted is not None else self.row_marks.get(level)

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

