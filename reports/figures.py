"""The report's figures as PNG, PDF and SVG (matplotlib's object API: no pyplot state, no display needed).

Each figure is written three times: PNG for Markdown, PDF for LaTeX (vector, TrueType fonts: venues reject the Type 3
fonts matplotlib embeds by default) and SVG for the web. Figures carry no title: the caption (in report.tex and
index.md) says what is plotted.

- Learning curves: per cell, each metric's mean over folds against the training step with a ±std band (×100).
- Class-distribution heat maps, the paper's Fig. "dis": for each true class (row), the share (%) of each class
  (column) among TPC pseudo-labels and among TNC complementary labels, darker = higher. The paper's hypothesis is a
  diagonal TPC map and a dispersed, off-diagonal TNC map.
- Sensitivity: accuracy mean ± std over folds against a swept hyper-parameter (the paper's k and τ ablations).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator

from orchestration import contract as C
from orchestration.contract.fileio import atomic_write
from orchestration.contract.layout import metric_name

__all__ = ["FIGURE_FORMATS", "COLUMN_IN", "TEXT_IN", "FONT_PT", "STYLE", "CurvePanel", "PanelDrawn", "curve_band",
           "is_fraction_metric", "row_normalise", "MAX_PANELS_PER_ROW", "panel_grid", "plot_curves", "plot_heatmaps",
           "plot_sensitivity", "plot_search_history", "plot_search_slice"]

FIGURE_FORMATS = ("png", "pdf", "svg")
_DPI = 300
# Paper sizes: a figure is one column (3.3 in) or the text width (6.8 in) wide and is included at that width, so
# its 8 pt text stays 8 pt on the page. One style for every figure, the search plots included: the same fonts, the
# palette the MLflow UI colours runs with (contract.PALETTE), light grids, no top or right spines.
COLUMN_IN, TEXT_IN = 3.3, 6.8
FONT_PT = 8
STYLE = {"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT,
         "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT, "figure.titlesize": FONT_PT,
         "axes.prop_cycle": matplotlib.cycler(color=list(C.PALETTE)), "lines.linewidth": 1.2,
         "lines.markersize": 4, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "grid.linewidth": 0.5, "axes.linewidth": 0.6, "legend.frameon": False}


def styled(draw: Any) -> Any:
    """``draw`` run under :data:`STYLE` (text sizes are fixed when the artists are made, so the whole drawing is)."""
    import functools

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return wrapper


def paper_figure(wide: bool, height_in: float) -> Figure:
    """A figure one column (``wide`` False) or the text width wide, laid out so nothing is cut."""
    return Figure(figsize=(TEXT_IN if wide else COLUMN_IN, height_in), layout="constrained")
# TrueType (42) instead of Type 3 glyphs in PDFs; SVG text as paths looks the same everywhere.
_VECTOR_RC = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "path"}


def _save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem``.png/.pdf/.svg; the files written. Dates left out of the PDF/SVG so rebuilds are identical."""
    FigureCanvasAgg(fig)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(f"{stem.name}.{ext}") for ext in FIGURE_FORMATS]
    with matplotlib.rc_context(_VECTOR_RC):
        for path, ext in zip(paths, FIGURE_FORMATS):
            metadata = {"CreationDate": None} if ext == "pdf" else {"Date": None} if ext == "svg" else None
            atomic_write(path, lambda f, ext=ext, md=metadata: fig.savefig(f, format=ext, dpi=_DPI, metadata=md),
                         mode=0o644)
    return paths



def curve_band(histories: pd.DataFrame, scale: float = 100.0) -> pd.DataFrame:
    """Per step over runs: ``mean``, ``std`` (ddof=1; NaN for one run) and ``n`` of ``value`` × ``scale``."""
    h = histories.dropna(subset=["value"])
    g = (h["value"] * scale).groupby(h["step"])
    return pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n": g.count()}).reset_index()


@dataclass(frozen=True)
class CurvePanel:
    """One cell's panel: its title, how many folds, and per metric the histories (``run_id``, ``step``, ``value``)."""

    title: str
    n_runs: int
    histories: dict[str, pd.DataFrame]


@dataclass(frozen=True)
class PanelDrawn:
    """What a curves panel shows: its title, the y-range and the points of each line (one per evaluation)."""

    title: str
    ylim: tuple[float, float]
    points: dict[str, int]


def is_fraction_metric(metric: str) -> bool:
    """Accuracies, complementary-label accuracies and the mask ratio are logged in [0, 1] and shown in %."""
    name = metric.rsplit("/", 1)[-1]
    return "acc" in name or "cpa" in name or name == "mask_ratio"


MAX_PANELS_PER_ROW = 3
"""Curve panels per row at most: a fourth would leave each panel too narrow for its step ticks at 8 pt."""


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels: as few rows as :data:`MAX_PANELS_PER_ROW` allows, and as few columns as
    those rows need, so no row keeps a lone panel it can avoid: 4 → 2 × 2 (not 3 + 1), 5 → 3 + 2, 6 → 3 + 3."""
    if n < 1:
        raise ValueError(f"panels: {n}; a grid needs at least one")
    rows = -(-n // MAX_PANELS_PER_ROW)
    return rows, -(-n // rows)


@styled
def plot_curves(panels: list[CurvePanel], metrics: list[str], stem: Path, sharey: bool = True
                ) -> tuple[list[Path], list[PanelDrawn]]:
    """A balanced grid of panels (:func:`panel_grid`), one line + ±std band per metric from every evaluation, shared
    legend; with ``sharey`` every panel has the same y-range. Returns the files and what each panel shows.

    Fraction metrics (:func:`is_fraction_metric`) are drawn ×100 on the left axis with the band clipped to
    [0, 100] (a mean + std above 100 % is not a reachable accuracy); any other metric (a loss, the learning rate)
    is drawn as logged on a right-hand axis.
    """
    if not panels:
        raise ValueError(f"{stem.name}: no cell with a finished run to plot")
    nrows, ncols = panel_grid(len(panels))
    fig = paper_figure(len(panels) > 1, 1.9 * nrows + 0.35)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)).ravel()
    handles: dict[str, Any] = {}
    points = [_draw_panel(ax, panel, metrics, handles) for ax, panel in zip(axes, panels)]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if handles:
        fig.legend(list(handles.values()),
                   [f"{metric_name(m)}{'' if is_fraction_metric(m) else ' (right axis)'}" for m in handles],
                   loc="outside lower center", ncols=min(len(handles), 2))
    drawn = [PanelDrawn(p.title, tuple(float(v) for v in ax.get_ylim()), n) for p, ax, n in zip(panels, axes, points)]
    return _save(fig, stem), drawn


def _draw_panel(ax: Any, panel: CurvePanel, metrics: list[str], handles: dict[str, Any]) -> dict[str, int]:
    """One cell's lines and bands on ``ax``; the number of points per metric drawn."""
    right = None
    points: dict[str, int] = {}
    for i, metric in enumerate(metrics):
        fraction = is_fraction_metric(metric)
        band = curve_band(panel.histories.get(metric, pd.DataFrame(columns=["step", "value"])),
                          scale=100.0 if fraction else 1.0)
        if band.empty:
            continue
        target = ax
        if not fraction:
            right = right or ax.twinx()
            target = right
        (line,) = target.plot(band["step"], band["mean"], color=f"C{i}")
        std = band["std"].fillna(0.0)
        low, high = band["mean"] - std, band["mean"] + std
        if fraction:
            low, high = low.clip(0.0, 100.0), high.clip(0.0, 100.0)
        target.fill_between(band["step"], low, high, color=f"C{i}", alpha=0.2, lw=0)
        handles[metric] = line
        points[metric] = len(band)
    ax.set_title(f"{panel.title} (n={panel.n_runs})")
    ax.set_xlabel("step")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))        # 200k, 1M: the paper trains for 2^20 steps
    ax.xaxis.set_major_locator(MaxNLocator(4))                 # a narrow panel: four ticks stay apart at 8 pt
    ax.set_ylabel("%")
    if right is not None:
        right.grid(False)
    return points


def row_normalise(counts: np.ndarray) -> np.ndarray:
    """Each row (true class) as percentages of its total; a row with no samples becomes NaN (shown blank)."""
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError(f"class counts: must be a square C×C matrix, got shape {counts.shape}")
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, 100.0 * counts / totals, np.nan)


@styled
def plot_heatmaps(pseudo_counts: np.ndarray, comp_counts: np.ndarray | None, stem: Path,
                  class_names: list[str] | None = None) -> list[Path]:
    """Side by side: TPC pseudo-labels and TNC complementary labels per true class, row-normalised (%).

    ``comp_counts`` None (an algorithm without a TNC, e.g. FixMatch) draws the TPC map alone.
    """
    maps = [("TPC pseudo-labels", "pseudo-label", row_normalise(pseudo_counts))]
    c = maps[0][2].shape[0]
    if comp_counts is not None:
        maps.append(("TNC complementary labels", "complementary label", row_normalise(comp_counts)))
        if maps[1][2].shape != (c, c):
            raise ValueError(f"class counts: pseudo-label matrix is {c}×{c} but complementary-label matrix is "
                             f"{maps[1][2].shape[0]}×{maps[1][2].shape[1]}")
    if class_names is not None and len(class_names) != c:
        raise ValueError(f"class_names: {len(class_names)} names given, but the class counts have {c} classes")
    names = class_names or [str(i) for i in range(c)]
    wide = len(maps) > 1
    fig = paper_figure(wide, 3.3 if wide else 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(maps)))
    image = None
    # cell values are written only where an 8 pt number fits in a cell (a map is ~2.6 in = 187 pt across)
    annotate = c <= 10
    for ax, (name, predicted, rates) in zip(axes, maps):
        image = ax.imshow(np.ma.masked_invalid(rates), cmap="Blues", vmin=0, vmax=100, interpolation="nearest")
        ax.grid(False)
        ax.set_title(name)
        ax.set_xlabel(f"{predicted} (class)")
        ax.set_ylabel("true class")
        ticks = np.arange(c) if c <= 10 else np.arange(0, c, max(1, -(-c // 10)))
        ax.set_xticks(ticks, [names[i] for i in ticks], rotation=45 if class_names else 0,
                      ha="right" if class_names else "center")
        ax.set_yticks(ticks, [names[i] for i in ticks])
        if annotate:
            for i in range(c):
                for j in range(c):
                    if np.isfinite(rates[i, j]):
                        ax.text(j, i, f"{rates[i, j]:.0f}", ha="center", va="center",
                                color="white" if rates[i, j] > 55 else "black")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="% of the row's labels")
    return _save(fig, stem)


@styled
def plot_sensitivity(series: dict[str, pd.DataFrame], stem: Path, xlabel: str, ylabel: str) -> list[Path]:
    """One line per series: frames with columns ``x``, ``mean``, ``std``, ``n``; ``x`` numbers give a numeric axis
    (sorted), anything else a categorical axis in the given order."""
    xs_all = [x for frame in series.values() for x in frame["x"]]
    numeric = all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in xs_all)
    categories: list[Any] = list(dict.fromkeys(xs_all))
    fig = paper_figure(False, 2.6 + 0.15 * len(series))
    ax = fig.subplots()
    plotted = False
    for i, (label, frame) in enumerate(series.items()):
        frame = frame.dropna(subset=["mean"])
        if frame.empty:
            continue
        if numeric:
            frame = frame.sort_values("x")
            pos = frame["x"].astype(float).to_numpy()
        else:
            pos = np.array([categories.index(x) for x in frame["x"]], dtype=float)
        std = frame["std"].fillna(0.0).to_numpy()
        mean = frame["mean"].to_numpy()
        label = label or "mean ± std"
        ax.errorbar(pos, mean, yerr=std, marker="o", capsize=3, color=f"C{i}",
                    label=f"{label} (n={int(frame['n'].min())}–{int(frame['n'].max())})"
                    if frame["n"].min() != frame["n"].max() else f"{label} (n={int(frame['n'].iloc[0])})")
        ax.fill_between(pos, mean - std, mean + std, color=f"C{i}", alpha=0.15, lw=0)
        plotted = True
    if not plotted:
        raise ValueError(f"{stem.name}: no level with a finished run to plot")
    if not numeric:
        ax.set_xticks(range(len(categories)), [str(x) for x in categories])
    elif len(categories) <= 12:
        # Ticks at the swept values themselves: a sweep has few levels and readers look them up.
        ax.set_xticks(sorted(float(x) for x in categories), [f"{x:g}" for x in sorted(categories)])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    # Below the axes: with several series any spot inside covers a line, and a column has no room at the side.
    fig.legend(loc="outside lower center", ncols=1)
    return _save(fig, stem)


def _search_points(ax: Any, x: Any, y: Any, pruned: Any, best: Any) -> None:
    """A search's trials on ``ax``: ran to the end filled, stopped early by ASHA hollow grey, the best a red star."""
    x, y, pruned, best = (np.asarray(v) for v in (x, y, pruned, best))
    done = ~pruned
    ax.plot(x[done], y[done], "o", color="C0", label="trial", zorder=2)
    ax.plot(x[pruned], y[pruned], "o", mfc="none", color="C6", label="pruned (ASHA)", zorder=2)
    ax.plot(x[best], y[best], "*", color="C1", ms=10, mec="black", mew=0.4, label="best trial", zorder=3)


def _search_values(frame: pd.DataFrame, scale: float) -> pd.DataFrame:
    """The trials with an objective (``trial``, parameters, ``objective`` × ``scale``, ``pruned``, ``best``)."""
    f = frame.dropna(subset=["objective"]).sort_values("trial").copy()
    if f.empty:
        raise ValueError("search plot: no trial with an objective")
    f["objective"] = f["objective"].astype(float) * scale
    return f


@styled
def plot_search_history(frame: pd.DataFrame, ylabel: str, mode: str, stem: Path, scale: float = 100.0) -> list[Path]:
    """A search's optimisation history: each trial's objective by trial number (:func:`_search_points`) and the
    best so far as a step line. ``frame`` has ``trial``, ``objective``, ``pruned`` and ``best`` columns."""
    f = _search_values(frame, scale)
    fig = paper_figure(False, 2.5)
    ax = fig.subplots()
    y = f["objective"]
    ax.step(f["trial"], y.cummax() if mode == "max" else y.cummin(), where="post", color="C0", alpha=0.5,
            label="best so far")
    _search_points(ax, f["trial"], y, f["pruned"], f["best"])
    ax.set_xlabel("trial")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(*_unique_handles(ax), loc="outside lower center", ncols=2)
    return _save(fig, stem)


@styled
def plot_search_slice(frame: pd.DataFrame, params: dict[str, str], ylabel: str, stem: Path, whole: set[str],
                      scale: float = 100.0) -> list[Path]:
    """A search's slice plot: each trial's objective against each parameter (``params``: column → axis label), one
    panel per parameter, the ``whole`` (integer) ones with whole-number ticks."""
    f = _search_values(frame, scale)
    fig = paper_figure(len(params) > 1, 2.5)
    axes = np.atleast_1d(fig.subplots(1, len(params), sharey=True, squeeze=False)).ravel()
    for ax, (key, label) in zip(axes, params.items()):
        _search_points(ax, f[key].astype(float), f["objective"], f["pruned"], f["best"])
        ax.set_xlabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(4, integer=key in whole))  # ticks that stay apart at 8 pt
    axes[0].set_ylabel(ylabel)
    fig.legend(*_unique_handles(axes[0]), loc="outside lower center", ncols=3)
    return _save(fig, stem)


def _unique_handles(ax: Any) -> tuple[list[Any], list[str]]:
    """The legend entries of ``ax`` that have points (an empty series, e.g. no pruned trial, is left out)."""
    pairs = [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels()) if len(np.atleast_1d(h.get_xdata()))]
    return [h for h, _ in pairs], [lab for _, lab in pairs]
