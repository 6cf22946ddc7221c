"""From the used runs to figure files: each figure layout's data gathered, drawn (:mod:`reports.figures`) and
captioned with what is plotted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np
import pandas as pd

from orchestration import contract as C
from orchestration.contract.layout import (TUNED_ROW, CurvesFigure, HeatmapFigure, ReportLayout, SensitivityFigure,
                                          cell_id, metric_name, param_name, sensitivity_param, sensitivity_x)
from reports.class_counts import sum_class_counts
from reports.runs import MetricCache
from reports.tables import PROTOCOL_TEXT

__all__ = ["DrawnFigure", "all_cells", "cells_matching", "cell_title", "curve_cells", "level_labels",
           "draw_figure"]

Figure = Union[CurvesFigure, HeatmapFigure, SensitivityFigure]
Labels = dict[str, dict[str, str]]


@dataclass
class DrawnFigure:
    """A drawn figure: its files (PNG, PDF, SVG), caption and, for learning curves, what each panel shows."""

    files: list[Path]
    caption: str
    panels: list = field(default_factory=list)       # figures.PanelDrawn per panel (curves only)


def all_cells(layout: ReportLayout) -> list[dict[str, str]]:
    """Every cell of the axes' product, in YAML order."""
    cells: list[dict[str, str]] = [{}]
    for axis, levels in layout.axes.items():
        cells = [{**c, axis: lvl} for c in cells for lvl in levels]
    return cells


def cells_matching(runs: pd.DataFrame, partial: dict[str, str]) -> pd.DataFrame:
    """The rows of ``runs`` whose cell has every level of ``partial``."""
    mask = np.ones(len(runs), dtype=bool)
    for axis, level in partial.items():
        mask &= (runs[f"axis.{axis}"] == level).to_numpy()
    return runs[mask]


def level_labels(layout: ReportLayout) -> Labels:
    """Display names per axis and level, collected from the tables' labels (figures reuse them); a tuned row's
    label under ``<level>+tuned``."""
    labels: Labels = {a: {} for a in layout.axes}
    for t in layout.tables:
        labels[t.rows].update({q.level: q.label for q in t.quoted_rows if q.level})   # a quoted row run since
        labels[t.rows].update(t.row_labels)
        labels[t.rows].update({lvl + TUNED_ROW: label for lvl, label in t.tuned_rows.items()})
        labels[t.columns].update(t.column_labels)
        if t.row_groups:
            labels[t.row_groups].update(t.row_group_labels)
    return labels


def cell_title(cell: dict[str, str], layout: ReportLayout, labels: Labels) -> str:
    """The cell in words: the display names of its levels on the axes that vary (a tuned cell's by its tuned
    row's label)."""
    varying = [a for a in layout.axes if len(layout.axes[a]) > 1] or list(layout.axes)
    tuned = C.TUNED_AXIS in cell

    def name(axis: str) -> str:
        level = cell[axis]
        return labels[axis].get(level + TUNED_ROW if tuned and level + TUNED_ROW in labels[axis] else level, level)
    return ", ".join(name(a) for a in varying if a in cell)


def curve_cells(layout: ReportLayout) -> list[dict[str, str]]:
    """Every cell in YAML order, each followed by its tuned cell (the refit runs) when a table has a tuned row for
    its level, as the tables place them."""
    tuned = {(t.rows, lvl) for t in layout.tables for lvl in t.tuned_rows}
    return [c for cell in all_cells(layout)
            for c in [cell] + ([{**cell, C.TUNED_AXIS: C.TUNED_LEVEL}]
                               if any(cell.get(a) == lvl for a, lvl in tuned) else [])]


def _curves(fig: CurvesFigure, layout: ReportLayout, metrics: MetricCache, runs: pd.DataFrame, labels: Labels,
            stem: Path) -> DrawnFigure:
    from reports import figures as figs  # matplotlib only when figures are asked for

    partials = fig.cells or [{}]
    panels = []
    # Panels in YAML order of the cells (axis by axis), each cell once even when several partials match it.
    for cell in curve_cells(layout):
        if not any(all(cell[a] == lvl for a, lvl in p.items()) for p in partials):
            continue
        ids = list(runs.loc[runs["cell"] == cell_id(cell, layout.axes), "run_id"])
        if ids:
            panels.append(figs.CurvePanel(cell_title(cell, layout, labels), len(ids),
                                          {m: metrics.histories(m, ids) for m in fig.metrics}))
    files, drawn = figs.plot_curves(panels, fig.metrics, stem, sharey=fig.sharey)
    what = " and ".join(metric_name(m) for m in fig.metrics)
    caption = fig.title or (f"{what[:1].upper()}{what[1:]} against the training step at every evaluation: mean over "
                            f"folds (line) ± std (band), one panel per cell (n = folds)"
                            f"{', same y-axis in every panel' if fig.sharey and len(panels) > 1 else ''}.")
    return DrawnFigure(files, caption, drawn)


def _heatmap(fig: HeatmapFigure, layout: ReportLayout, tracking_uri: str, runs: pd.DataFrame, labels: Labels,
             stem: Path) -> DrawnFigure:
    from reports import figures as figs  # matplotlib only when figures are asked for

    cell_runs = runs[runs["cell"] == cell_id(fig.cell, layout.axes)]
    if fig.fold is not None:
        cell_runs = cell_runs[cell_runs["fold"] == fig.fold]
    if cell_runs.empty:
        raise ValueError(f"{cell_title(fig.cell, layout, labels)}" + (f", fold {fig.fold}" if fig.fold is not None
                                                                      else "") + ": no finished run")
    pseudo, comp, steps = sum_class_counts(list(cell_runs["artifact_uri"]), fig.step, tracking_uri)
    files = figs.plot_heatmaps(pseudo, comp, stem, fig.class_names)
    step_text = f"step {steps[0]}" if len(set(steps)) == 1 else f"steps {min(steps)}–{max(steps)}"
    folds = ", ".join(str(f) for f in sorted(cell_runs["fold"]))
    maps = ("pseudo-labels (TPC, left) and complementary labels (TNC, right)" if comp is not None
            else "pseudo-labels (TPC)")
    caption = fig.title or (f"{cell_title(fig.cell, layout, labels)}: for each true class (row), the share (%) of "
                            f"each class among the {maps}, at {step_text}, counts of fold"
                            f"{'s' if len(cell_runs) > 1 else ''} {folds} summed.")
    return DrawnFigure(files, caption)


def _sensitivity(fig: SensitivityFigure, layout: ReportLayout, metrics: MetricCache, runs: pd.DataFrame,
                 protocol: str, labels: Labels, stem: Path) -> DrawnFigure:
    from reports import figures as figs  # matplotlib only when figures are asked for

    xs = sensitivity_x(fig, layout.axes)
    series_levels: list[str | None] = list(layout.axes[fig.series]) if fig.series else [None]
    fixed = {a: next(iter(lv)) for a, lv in layout.axes.items() if len(lv) == 1}
    fixed.update(fig.where)
    valued = metrics.values(fig.metric, protocol, cells_matching(runs, fig.where))
    series: dict[str, pd.DataFrame] = {}
    for s in series_levels:
        rows = []
        for lvl, x in xs.items():
            cell = {**fixed, fig.axis: lvl, **({fig.series: s} if fig.series else {})}
            vals = valued.loc[valued["cell"] == cell_id(cell, layout.axes), "value"].dropna()
            rows.append({"x": x, "mean": vals.mean() if len(vals) else np.nan,
                         "std": vals.std(ddof=1) if len(vals) > 1 else np.nan, "n": len(vals)})
        series["" if s is None else labels[fig.series].get(s, s)] = pd.DataFrame(rows)
    xlabel = param_name(sensitivity_param(fig, layout.axes))
    name = metric_name(fig.metric)
    files = figs.plot_sensitivity(series, stem, xlabel=xlabel, ylabel=f"{name[:1].upper()}{name[1:]} (%)")
    caption = fig.title or (f"{name[:1].upper()}{name[1:]} (%) against {xlabel}: mean ± std over folds"
                            f"{', one line per ' + fig.series if fig.series else ''}; protocol: "
                            f"{PROTOCOL_TEXT[protocol]}.")
    return DrawnFigure(files, caption)


def draw_figure(fig: Figure, layout: ReportLayout, metrics: MetricCache, runs: pd.DataFrame, tracking_uri: str,
                protocol: str | None, out: Path) -> DrawnFigure:
    """Draw ``fig`` from the used ``runs`` into ``out/<id>.{png,pdf,svg}``; ``ValueError`` when its data is
    missing (no finished run of its cells, no class-count artifact)."""
    labels = level_labels(layout)
    stem = out / str(fig.id)
    if isinstance(fig, CurvesFigure):
        return _curves(fig, layout, metrics, runs, labels, stem)
    if isinstance(fig, HeatmapFigure):
        return _heatmap(fig, layout, tracking_uri, runs, labels, stem)
    return _sensitivity(fig, layout, metrics, runs, protocol or fig.protocol, labels, stem)
