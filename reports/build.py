"""Rebuild an experiment's tables and figures from MLflow: ``python -m reports.build experiments/X.yaml``.

::

    python -m reports.build experiments/quickstart.yaml [--tracking-uri URI] [--out DIR]
        [--protocol best|final|median20] [--format md,tex,png] [--experiment-name NAME]

Reads the YAML itself (its ``name``, ``axes``, ``folds``, ``tables`` and ``figures``; no orchestration, no Ray),
reads the experiment's FINISHED grid trial runs from MLflow (the newest per cell and fold), and writes to ``--out``
(default ``reports/out/<name>``):

- ``<table>.md`` / ``<table>.tex``: the table (caption, marks, published numbers and Δ, paired comparison);
- ``<table>_folds.md`` / ``<table>_folds.tex``: the per-fold appendix table;
- ``report.tex``: a standalone document inputting every LaTeX table and figure (``pdflatex report.tex``);
- ``<figure>.png``: learning curves, class-distribution heat maps, sensitivity plots;
- ``index.md``: links to all of the above and the MLflow run ids behind every cell.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import yaml

from reports.layout import (PROTOCOLS, CurvesFigure, HeatmapFigure, ReportLayout, SensitivityFigure, TableLayout,
                            cell_id, sensitivity_param, sensitivity_x, validate_report)
from reports.runs import RunSource, open_run_source, resolve_tracking_uri, select_trials, sum_class_counts, summarise
from reports.tables import (PROTOCOL_TEXT, TableData, build_table_data, latex_escape, render_folds_latex,
                            render_folds_markdown, render_latex, render_markdown)

__all__ = ["FORMATS", "BuildResult", "build_report", "load_spec", "main"]

FORMATS = ("md", "tex", "png")


@dataclass
class BuildResult:
    """What a build wrote: the output folder, ``index.md``, the resolved tables, and written/skipped files."""

    out_dir: Path
    index: Path
    tables: dict[str, TableData] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    skipped_figures: dict[str, str] = field(default_factory=dict)


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read an experiment YAML with ``yaml.safe_load``; raise ``ValueError`` if missing or not a mapping."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"spec {str(path)!r}: file not found")
    spec = yaml.safe_load(p.read_text())
    if not isinstance(spec, dict):
        raise ValueError(f"spec {str(path)!r}: must be a YAML mapping (see the sweep format in the README)")
    return spec


class _Metrics:
    """Metric histories of the used runs, read once per (metric, run) and shared by tables and figures."""

    def __init__(self, source: RunSource):
        self.source = source
        # metric → frames, one per read, with the run ids each holds; run id → its frame's index (-1: never logged)
        self._chunks: dict[str, list[tuple[pd.DataFrame, set[str]]]] = {}
        self._chunk_of: dict[str, dict[str, int]] = {}

    def histories(self, metric: str, run_ids: Sequence[str]) -> pd.DataFrame:
        """Histories (``run_id``, ``step``, ``value``) of ``metric`` for ``run_ids``, reading only uncached runs."""
        chunks = self._chunks.setdefault(metric, [])
        chunk_of = self._chunk_of.setdefault(metric, {})
        wanted = set(run_ids)
        missing = sorted(wanted - chunk_of.keys())
        if missing:
            new = self.source.histories(missing, metric)
            logged = set(new["run_id"])
            chunks.append((new, logged))
            chunk_of.update({r: len(chunks) - 1 if r in logged else -1 for r in missing})
        needed = sorted({chunk_of[r] for r in wanted} - {-1})
        if len(needed) == 1 and chunks[needed[0]][1] <= wanted:
            return chunks[needed[0]][0]       # exactly one read's runs (a table's): no pass over ~1M rows
        if not needed:
            return self.source.histories([], metric)
        frame = pd.concat([chunks[i][0] for i in needed], ignore_index=True)
        return frame[frame["run_id"].isin(wanted)].reset_index(drop=True)

    def values(self, metric: str, protocol: str, runs: pd.DataFrame) -> pd.DataFrame:
        """``runs`` plus a ``value`` column: the metric under ``protocol`` ×100 (NaN when never logged)."""
        hist = self.histories(metric, list(runs["run_id"]))
        per_run = summarise(hist, protocol) * 100.0
        out = runs.copy()
        out["value"] = out["run_id"].map(per_run).astype(float)
        return out


def _cells_matching(runs: pd.DataFrame, partial: dict[str, str]) -> pd.DataFrame:
    mask = np.ones(len(runs), dtype=bool)
    for axis, level in partial.items():
        mask &= (runs[f"axis.{axis}"] == level).to_numpy()
    return runs[mask]


def _level_labels(layout: ReportLayout) -> dict[str, dict[str, str]]:
    """Display names per axis and level, collected from the tables' labels (figures reuse them)."""
    labels: dict[str, dict[str, str]] = {a: {} for a in layout.axes}
    for t in layout.tables:
        labels[t.rows].update(t.row_labels)
        labels[t.columns].update(t.column_labels)
        if t.row_groups:
            labels[t.row_groups].update(t.row_group_labels)
    return labels


def _cell_title(cell: dict[str, str], layout: ReportLayout, labels: dict[str, dict[str, str]]) -> str:
    varying = [a for a in layout.axes if len(layout.axes[a]) > 1] or list(layout.axes)
    return ", ".join(labels[a].get(cell[a], cell[a]) for a in varying if a in cell)


def _write(path: Path, text: str, result: BuildResult) -> None:
    path.write_text(text, encoding="utf-8")
    result.files.append(path)


def _curves(fig: CurvesFigure, layout: ReportLayout, metrics: _Metrics, runs: pd.DataFrame,
            labels: dict[str, dict[str, str]], path: Path) -> None:
    from reports import figures as figs  # matplotlib only when PNGs are asked for

    partials = fig.cells or [{}]
    panels = []
    # Panels in YAML order of the cells (axis by axis), each cell once even when several partials match it.
    for cell in _all_cells(layout):
        if not any(all(cell[a] == lvl for a, lvl in p.items()) for p in partials):
            continue
        ids = list(runs.loc[runs["cell"] == cell_id(cell, layout.axes), "run_id"])
        if not ids:
            continue
        panels.append(figs.CurvePanel(_cell_title(cell, layout, labels), len(ids),
                                      {m: metrics.histories(m, ids) for m in fig.metrics}))
    figs.plot_curves(panels, fig.metrics, path, fig.title or "Learning curves: mean over folds ± std")


def _all_cells(layout: ReportLayout) -> list[dict[str, str]]:
    cells: list[dict[str, str]] = [{}]
    for axis, levels in layout.axes.items():
        cells = [{**c, axis: lvl} for c in cells for lvl in levels]
    return cells


def _heatmap(fig: HeatmapFigure, layout: ReportLayout, tracking_uri: str, runs: pd.DataFrame,
             labels: dict[str, dict[str, str]], path: Path) -> None:
    from reports import figures as figs  # matplotlib only when PNGs are asked for

    cell_runs = runs[runs["cell"] == cell_id(fig.cell, layout.axes)]
    if fig.fold is not None:
        cell_runs = cell_runs[cell_runs["fold"] == fig.fold]
    if cell_runs.empty:
        raise ValueError(f"cell {cell_id(fig.cell, layout.axes)}" + (f" fold {fig.fold}" if fig.fold is not None
                                                                       else "") + ": no finished run")
    pseudo, comp, steps = sum_class_counts(list(cell_runs["artifact_uri"]), fig.step, tracking_uri)
    step_text = f"step {steps[0]}" if len(set(steps)) == 1 else f"steps {min(steps)}–{max(steps)}"
    folds = ", ".join(str(f) for f in sorted(cell_runs["fold"]))
    title = fig.title or (f"{_cell_title(fig.cell, layout, labels)}: class distribution per true class "
                          f"({step_text}; fold{'s' if len(cell_runs) > 1 else ''} {folds} summed)")
    figs.plot_heatmaps(pseudo, comp, path, title)


def _sensitivity(fig: SensitivityFigure, layout: ReportLayout, metrics: _Metrics, runs: pd.DataFrame,
                 protocol: str, labels: dict[str, dict[str, str]], path: Path) -> None:
    from reports import figures as figs  # matplotlib only when PNGs are asked for

    xs = sensitivity_x(fig, layout.axes)
    series_levels: list[str | None] = list(layout.axes[fig.series]) if fig.series else [None]
    fixed = {a: next(iter(lv)) for a, lv in layout.axes.items() if len(lv) == 1}
    fixed.update(fig.where)
    selected = _cells_matching(runs, fig.where)
    valued = metrics.values(fig.metric, protocol, selected)
    series: dict[str, pd.DataFrame] = {}
    for s in series_levels:
        rows = []
        for lvl, x in xs.items():
            cell = {**fixed, fig.axis: lvl, **({fig.series: s} if fig.series else {})}
            vals = valued.loc[valued["cell"] == cell_id(cell, layout.axes), "value"].dropna()
            rows.append({"x": x, "mean": vals.mean() if len(vals) else np.nan,
                         "std": vals.std(ddof=1) if len(vals) > 1 else np.nan, "n": len(vals)})
        label = "" if s is None else labels[fig.series].get(s, s)
        series[label] = pd.DataFrame(rows)
    xlabel = sensitivity_param(fig, layout.axes)
    figs.plot_sensitivity(series, path, fig.title or f"Sensitivity to {xlabel}: mean ± std over folds",
                          xlabel=xlabel, ylabel=f"{fig.metric} (%, {protocol})")


def _latex_document(layout: ReportLayout, tables: list[TableLayout], figure_files: list[tuple[str, str]]) -> str:
    # lmodern when installed: T1 text in vector fonts (without it pdflatex falls back to bitmap EC fonts).
    lines = [r"\documentclass[10pt]{article}", r"\usepackage[T1]{fontenc}", r"\usepackage[utf8]{inputenc}",
             r"\IfFileExists{lmodern.sty}{\usepackage{lmodern}}{}",
             r"\usepackage[margin=2cm]{geometry}", r"\usepackage{booktabs}", r"\usepackage{longtable}",
             r"\usepackage{graphicx}", r"\begin{document}",
             rf"\section*{{Report: {latex_escape(layout.name)}}}"]
    lines += [rf"\input{{{t.id}.tex}}" for t in tables]
    for name, caption in figure_files:
        lines += [r"\begin{figure}[htbp]", r"\centering", rf"\includegraphics[width=\linewidth]{{{name}}}",
                  rf"\caption{{{latex_escape(caption)}}}", r"\end{figure}"]
    if tables:
        lines += [r"\clearpage", r"\appendix", r"\section*{Appendix: per-fold values}"]
        lines += [rf"\input{{{t.id}_folds.tex}}" for t in tables]
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"


def _figure_caption(fig: CurvesFigure | HeatmapFigure | SensitivityFigure) -> str:
    if fig.title:
        return fig.title
    return {"curves": "Learning curves per cell: mean over folds with a ±std band.",
            "heatmap": "Row-normalised TPC pseudo-label and TNC complementary-label class distribution per true "
                       "class.",
            "sensitivity": "Accuracy (mean ± std over folds) against the swept hyper-parameter."}[fig.type]


def _index(layout: ReportLayout, result: BuildResult, formats: Sequence[str], tracking_uri: str, experiment_id: str,
           used: pd.DataFrame, duplicates: pd.DataFrame, unfinished: pd.DataFrame, figure_files: list[tuple[str, str]],
           protocol_override: str | None) -> str:
    lines = [f"# Report: {layout.name}", "",
             f"MLflow experiment `{layout.name}` (id {experiment_id}) at `{tracking_uri}`. "
             f"Grid trial runs used: {len(used)} FINISHED, the newest per cell and fold of folds "
             f"{', '.join(map(str, layout.folds))}."]
    if protocol_override:
        lines.append(f"Protocol for every table and figure: {PROTOCOL_TEXT[protocol_override]} (--protocol).")
    lines += ["", "## Tables", ""]
    if not layout.tables:
        lines.append("The YAML defines no table.")
    for t in layout.tables:
        links = []
        if "md" in formats:
            links += [f"[Markdown]({t.id}.md)", f"[per fold]({t.id}_folds.md)"]
        if "tex" in formats:
            links += [f"[LaTeX]({t.id}.tex)", f"[per fold, LaTeX]({t.id}_folds.tex)"]
        cap = f" — {t.caption}" if t.caption else ""
        lines.append(f"- **{t.id}**{cap}: " + " · ".join(links))
    if "tex" in formats and layout.tables:
        lines += ["", "All LaTeX tables (and figures) in one document: [report.tex](report.tex) — "
                  "`pdflatex report.tex` (packages: booktabs, longtable, graphicx, geometry)."]
    if "png" in formats:
        lines += ["", "## Figures", ""]
        for name, caption in figure_files:
            lines += [f"### {Path(name).stem}", "", caption, "", f"![{Path(name).stem}]({name})", ""]
        for fid, why in result.skipped_figures.items():
            lines += [f"- **{fid}**: not drawn — {why}"]
        if not figure_files and not result.skipped_figures:
            lines.append("No figure.")
    lines += ["", "## Runs behind each cell", ""]
    for t in layout.tables:
        data = result.tables[t.id]
        lines += [f"### Table {t.id}", "", "| Cell | n | Run ids (fold: run id) |", "| :--- | ---: | :--- |"]
        for key, cid in data.cell_ids.items():
            stats = data.cells[key]
            ids = ", ".join(f"{f}: `{r}`" for f, r in stats.run_ids.items()) or "—"
            lines.append(f"| {cid} | {stats.n} | {ids} |")
        lines.append("")
    if not duplicates.empty or not unfinished.empty:
        lines += ["## Runs left out", ""]
        for _, r in duplicates.iterrows():
            lines.append(f"- `{r['run_id']}` ({r['cell']}, fold {r['fold']}): an older FINISHED run of the same "
                         "cell and fold")
        for _, r in unfinished.iterrows():
            lines.append(f"- `{r['run_id']}` ({r['cell']}, fold {r['fold']}): {r['status']}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def build_report(spec_path: str | Path, tracking_uri: str | None = None, out_dir: str | Path | None = None,
                 protocol: str | None = None, formats: Sequence[str] = FORMATS,
                 experiment_name: str | None = None) -> BuildResult:
    """Build every table and figure the YAML lays out; see the module docstring for the files written.

    ``protocol`` overrides every table's and sensitivity figure's protocol; ``formats`` is any of md, tex, png.
    Raises ``ValueError`` for a bad YAML layout, argument, missing store or experiment.
    """
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"--protocol {protocol!r}: must be one of {', '.join(PROTOCOLS)}")
    formats = list(dict.fromkeys(formats))
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"--format {','.join(formats)!r}: must be a comma-separated subset of {','.join(FORMATS)}")
    layout = validate_report(load_spec(spec_path))
    uri = resolve_tracking_uri(tracking_uri)
    out = Path(out_dir) if out_dir is not None else Path("reports") / "out" / layout.name
    with open_run_source(uri) as source:
        return _build(layout, source, uri, out, protocol, formats, experiment_name)


def _build(layout: ReportLayout, source: RunSource, uri: str, out: Path, protocol: str | None,
           formats: Sequence[str], experiment_name: str | None) -> BuildResult:
    experiment_id = source.experiment_id(experiment_name or layout.name)
    trials = source.trials(experiment_id, list(layout.axes))
    used, duplicates, unfinished = select_trials(trials, layout.folds)
    out.mkdir(parents=True, exist_ok=True)
    result = BuildResult(out_dir=out, index=out / "index.md")
    metrics = _Metrics(source)
    labels = _level_labels(layout)

    for t in layout.tables:
        proto = protocol or t.protocol
        table_cells = {cell_id(t.cell(layout.axes, g, r, c), layout.axes) for g in t.group_keys(layout.axes)
                       for r in t.row_keys(layout.axes) for c in t.column_keys(layout.axes)}
        runs = used[used["cell"].isin(table_cells)] if not used.empty else used
        valued = metrics.values(t.metric, proto, runs) if not runs.empty else runs.assign(value=pd.Series(dtype=float))
        data = build_table_data(t, layout.axes, layout.folds, valued, proto)
        result.tables[t.id] = data
        if "md" in formats:
            _write(out / f"{t.id}.md", render_markdown(data), result)
            _write(out / f"{t.id}_folds.md", render_folds_markdown(data), result)
        if "tex" in formats:
            _write(out / f"{t.id}.tex", render_latex(data), result)
            _write(out / f"{t.id}_folds.tex", render_folds_latex(data), result)

    figure_files: list[tuple[str, str]] = []
    if "png" in formats:
        for fig in layout.figures:
            path = out / f"{fig.id}.png"
            try:
                if used.empty:
                    raise ValueError("no finished run in the experiment")
                if isinstance(fig, CurvesFigure):
                    _curves(fig, layout, metrics, used, labels, path)
                elif isinstance(fig, HeatmapFigure):
                    _heatmap(fig, layout, uri, used, labels, path)
                else:
                    _sensitivity(fig, layout, metrics, used, protocol or fig.protocol, labels, path)
            except ValueError as e:
                # Missing runs or artifacts are a state of the sweep, not a bad request: report the rest.
                result.skipped_figures[fig.id] = str(e)
                print(f"reports.build: figure {fig.id} skipped: {e}", file=sys.stderr)
                continue
            result.files.append(path)
            figure_files.append((path.name, _figure_caption(fig)))
    if "tex" in formats:
        _write(out / "report.tex", _latex_document(layout, layout.tables, figure_files), result)
    _write(result.index, _index(layout, result, formats, uri, experiment_id, used, duplicates, unfinished,
                                figure_files, protocol), result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.build", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="experiment YAML (experiments/X.yaml)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI or a *.db path (default: $MLFLOW_TRACKING_URI, else "
                             "sqlite:///<cwd>/mlflow.db, the sweep's default)")
    parser.add_argument("--out", default=None, help="output folder (default: reports/out/<name>)")
    parser.add_argument("--protocol", default=None, choices=PROTOCOLS,
                        help="override every table's protocol: best = max over evaluations, final = last, "
                             "median20 = median of the last 20 evaluations")
    parser.add_argument("--format", default=",".join(FORMATS), help="comma-separated subset of md,tex,png")
    parser.add_argument("--experiment-name", default=None, help="MLflow experiment (default: the YAML's name)")
    args = parser.parse_args(argv)
    # One artifact download per heat-map fold: tqdm bars would bury the build's own output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        result = build_report(args.spec, tracking_uri=args.tracking_uri, out_dir=args.out, protocol=args.protocol,
                              formats=[f.strip() for f in args.format.split(",") if f.strip()],
                              experiment_name=args.experiment_name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(result.files)} files to {result.out_dir} (index: {result.index})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
