"""Rebuild an experiment's tables and figures from MLflow: ``python -m reports.build experiments/X.yaml``.

::

    python -m reports.build experiments/quickstart.yaml [--tracking-uri URI] [--out DIR] [--overwrite]
        [--protocol best|final|median20] [--format md,tex,pdf,png] [--experiment-name NAME] [--set KEY=VALUE ...]

Reads the YAML itself (its ``name``, ``axes``, ``folds``, ``exclude``, ``tables`` and ``figures``, amended by
``--set`` with the sweep's rule; no orchestration, no Ray), reads the experiment's FINISHED grid trial runs from
MLflow (the newest per cell and fold whose config hash these settings give, as their launches recorded it; others
are named in one line), and writes to ``--out`` (default ``reports/out/<name>``):

- ``<table>.md`` / ``<table>.tex``: the table (caption, note line, marks, published numbers and Δ, the paper's quoted
  rows with their footnotes, paired comparison);
- ``<table>_folds.md`` / ``<table>_folds.tex``: the per-fold appendix table;
- ``report.tex``: a standalone document with every LaTeX table and figure; ``report.pdf`` with ``--format pdf``
  (pdflatex, run as often as it asks);
- ``<figure>.png`` / ``.pdf`` / ``.svg``: learning curves, class-distribution heat maps, sensitivity plots;
- ``index.md``: links to all of the above, the cells with no finished run and the MLflow run ids behind every cell.

``--preview`` reads no store: the tables as the YAML lays them out, with the paper's numbers and an empty cell (—)
for each of ours, every file saying it is a preview (what a table will look like before a sweep is paid for).

Refuses, with one line and exit code 2, before writing anything: a YAML that is broken, has a duplicate key or a bad
layout; a store that is missing, not a database or a server that does not answer; an experiment with no finished
run of the YAML's cells; a table or figure metric no run logged; an ``--out`` below a file; an ``--out`` holding a
file the build would replace that no build wrote as it is now (hand-written or edited since; ``--overwrite``
replaces it; :mod:`reports.out_folder`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from orchestration.contract.cli import add_version, answer_early, entry_point

# The command line, defined before the imports below: --help, --version and a usage error answer without pandas.
FORMATS = ("md", "tex", "pdf", "png")
DEFAULT_FORMATS = ("md", "tex", "png")
"""``png`` draws each figure as PNG, PDF and SVG; ``pdf`` compiles report.tex (and so writes the LaTeX too)."""


def _parser() -> argparse.ArgumentParser:
    from orchestration.contract.layout import PROTOCOLS  # pydantic, no pandas

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
    parser.add_argument("--format", default=",".join(DEFAULT_FORMATS),
                        help="comma-separated subset of md,tex,pdf,png (png: every figure as PNG, PDF and SVG; "
                             "pdf: report.pdf, needs pdflatex)")
    parser.add_argument("--experiment-name", default=None, help="MLflow experiment (default: the YAML's name)")
    parser.add_argument("--preview", action="store_true",
                        help="read no store: the tables with the paper's numbers and empty cells for ours")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files in --out that reports.build did not write (or that were edited since)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="the --set items of the sweep launch to report (repeatable); the tables count only the "
                             "runs whose config these settings give")
    return add_version(parser)


if __name__ == "__main__":
    answer_early(_parser().parse_args)

import pandas as pd  # noqa: E402

from orchestration import contract as C
from orchestration.contract.fileio import atomic_write
from orchestration.contract import TRACKING_URI_ENV, apply_set_items, settings_digest
from reports.drawing import DrawnFigure, all_cells, draw_figure
from reports.latex import TEX_INSTALL, compile_pdf, latex_document, pdflatex
from orchestration.contract.layout import (PROTOCOLS, CurvesFigure, ReportLayout, SensitivityFigure, cell_id,
                                          validate_report)
from reports import out_folder
from reports.lost_sources import lost_lines, mark_lost
from reports.runs import MetricCache, RunSource, empty_trials, open_run_source, resolve_tracking_uri
from reports.selection import read_settings, select_trials, split_by_settings
from reports.search import SearchOutput, with_refit_trials, write_searches
from reports.specfile import load_spec
from reports.tables import (PROTOCOL_TEXT, TableData, build_table_data, caption, render_folds_markdown,
                            render_markdown)
from reports.tables_latex import render_folds_latex, render_latex

__all__ = ["FORMATS", "DEFAULT_FORMATS", "BuildResult", "build_report", "load_spec", "main"]



@dataclass
class BuildResult:
    """What a build wrote: the output folder, ``index.md``, the resolved tables, the drawn and skipped figures,
    the table positions with no finished run, and every file written."""

    out_dir: Path
    index: Path
    tables: dict[str, TableData] = field(default_factory=dict)
    figures: dict[str, DrawnFigure] = field(default_factory=dict)
    skipped_figures: dict[str, str] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)     # table id → "row, column" of each empty cell
    files: list[Path] = field(default_factory=list)
    pdf: Path | None = None
    searches: SearchOutput = field(default_factory=SearchOutput)   # the YAML's search: trials, importances, plots
    ignored: list[str] = field(default_factory=list)   # FINISHED runs of other settings (never in a table)
    lost: list[str] = field(default_factory=list)      # reused trials whose source run is gone (reports.lost_sources)
    settings_note: str = ""                            # how runs were chosen when no launch recorded its settings
    overrides: tuple[str, ...] = ()                    # the --set items the settings were given with
    digest: str = ""                                   # their settings digest (the MLflow UI's view of these runs)


def _write(path: Path, text: str, result: BuildResult) -> None:
    atomic_write(path, text.encode("utf-8"), mode=0o644)
    result.files.append(path)


def _check_out(out: Path) -> None:
    """``ValueError`` when ``out`` or a folder above it exists as something other than a folder."""
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                raise ValueError(f"--out {str(out)!r}: {str(p)!r} is a file, not a folder; give a folder")
            if not os.access(p, os.W_OK):
                raise ValueError(f"--out {str(out)!r}: {str(p)!r} is not writable")
            return


def _uri_label(given: str | None) -> str:
    """Where the store's URI came from, for errors: a user who passed nothing should not read "--tracking-uri"."""
    if given is not None:
        return "--tracking-uri"
    if os.environ.get(TRACKING_URI_ENV):
        return f"${TRACKING_URI_ENV}"
    return f"the default store (no --tracking-uri, no ${TRACKING_URI_ENV})"


def _check_formats(formats: Sequence[str]) -> list[str]:
    formats = list(dict.fromkeys(formats))
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"--format {','.join(formats)!r}: must be a comma-separated subset of {','.join(FORMATS)}")
    if "pdf" in formats:
        pdflatex()                          # missing pdflatex: said before any work
        if "tex" not in formats:
            formats.insert(formats.index("pdf"), "tex")
    return formats


def build_report(spec_path: str | Path, tracking_uri: str | None = None, out_dir: str | Path | None = None,
                 protocol: str | None = None, formats: Sequence[str] = DEFAULT_FORMATS,
                 experiment_name: str | None = None, overrides: Sequence[str] = (), preview: bool = False,
                 overwrite: bool = False) -> BuildResult:
    """Build every table and figure the YAML lays out; see the module docstring for the files written.

    ``protocol`` overrides every table's and sensitivity figure's protocol; ``formats`` is any of md, tex, pdf, png;
    ``overrides`` are the sweep's ``--set key=value`` items (the same rule: :func:`orchestration.contract.apply_set_items`),
    which choose the runs of those settings. Raises ``ValueError`` (one line per problem) for a bad YAML, layout,
    argument, store, experiment or metric, or an ``out_dir`` holding files the build would replace that no build
    wrote (:mod:`reports.out_folder`; ``overwrite`` replaces them). ``preview``: no store is read (:func:`_preview`).
    """
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"--protocol {protocol!r}: must be one of {', '.join(PROTOCOLS)}")
    formats = _check_formats(formats)
    raw = apply_set_items(load_spec(spec_path), overrides)
    digest = settings_digest(raw)
    layout = validate_report(raw)
    uri = resolve_tracking_uri(tracking_uri)
    out = Path(out_dir) if out_dir is not None else Path("reports") / "out" / layout.name
    _check_out(out)
    out_folder.check(out, layout, formats, preview, overwrite)
    if preview:
        with out_folder.recording(out, layout, formats, preview):
            return _preview(layout, out, protocol, formats, tuple(overrides))
    with open_run_source(uri, label=_uri_label(tracking_uri)) as source, \
            out_folder.recording(out, layout, formats, preview):
        return _build(layout, source, uri, out, protocol, formats, experiment_name, digest, tuple(overrides))


def _require_runs(layout: ReportLayout, source: RunSource, name: str, trials: pd.DataFrame,
                  used: pd.DataFrame, ignored: list[str]) -> None:
    """``ValueError`` naming the experiment, the store and what is there when no finished run belongs to a cell of
    the YAML: a report of "—" only would look like a result."""
    cells = {cell_id(c, layout.axes) for c in all_cells(layout)}
    if not used.empty and used["cell"].isin(cells).any():
        return
    folds = ", ".join(map(str, layout.folds))
    if trials.empty:
        found = "no grid trial run"
    else:
        found = ", ".join(f"{n} {status}" for status, n in trials["status"].value_counts().sort_index().items())
        found = f"grid trial runs: {found}"
        if not used.empty:
            found += f"; the FINISHED ones are of other cells ({', '.join(sorted(set(used['cell']))[:3])} …)"
    if ignored:
        found += f"; {C.other_settings_line(ignored, shown=2)}"
    raise ValueError(f"experiment {name!r} at {source.tracking_uri}: no FINISHED grid trial run of this YAML's cells "
                     f"and folds {folds} ({found}); experiments there: {', '.join(source.experiment_names())}; "
                     "--preview builds the tables with the paper's numbers and empty cells for ours")


def _check_metrics(layout: ReportLayout, logged: set[str], name: str) -> None:
    """``ValueError``, one line per table or figure whose metric no used run logged (a typo would give a table
    of "—" only)."""
    wanted = [(f"tables[{i}]({t.id}).metric", t.metric) for i, t in enumerate(layout.tables)]
    for f in layout.figures:
        if isinstance(f, CurvesFigure) and "metrics" in f.model_fields_set:
            # only metrics the YAML names: a default one a run lacks just draws no line
            wanted += [(f"figures({f.id}).metrics", m) for m in f.metrics]
        elif isinstance(f, SensitivityFigure):
            wanted.append((f"figures({f.id}).metric", f.metric))
    errors = []
    for where, metric in wanted:
        if metric not in logged:
            close = difflib.get_close_matches(metric, sorted(logged), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            errors.append(f"{where}={metric!r}: no finished run of experiment {name!r} logged it; {hint}"
                          f"logged: {', '.join(sorted(logged))}")
    if errors:
        raise ValueError("\n".join(errors))


def _missing_cells(data: TableData, layout: ReportLayout) -> list[str]:
    """The empty positions of a table in words ("row, column"); "(excluded)" for cells the sweep leaves out."""
    lay = data.layout
    out = []
    for g, r, c in data.missing():
        cell = lay.cell(layout.axes, g, r, c)
        excluded = any(all(cell.get(a) == lv for a, lv in ex.items()) for ex in layout.exclude)
        words = ", ".join(x for x in (lay.group_label(g), lay.row_label(r), lay.column_label(c)) if x)
        nan = data.nan_runs.get((g, r, c), 0)  # finished, but the metric is NaN: not "no finished run"
        words += f" ({nan} finished run(s) whose {lay.metric} is NaN: diverged?)" if nan else ""
        out.append(words + (" (excluded by the YAML)" if excluded else ""))
    return out


def _tables(layout: ReportLayout, metrics: MetricCache | None, used: pd.DataFrame, protocol: str | None,
            formats: Sequence[str], out: Path, result: BuildResult, banner: str = "") -> None:
    """Every table of the layout from the ``used`` runs; ``banner`` (a preview's) heads each Markdown file, as a
    comment each LaTeX file."""
    tex_banner = "".join(f"% {line}\n" for line in banner.splitlines())
    md_banner = f"> {banner}\n\n" if banner else ""
    for t in layout.tables:
        proto = protocol or t.protocol
        table_cells = {cell_id(t.cell(layout.axes, g, r, c), layout.axes) for g in t.group_keys(layout.axes)
                       for r in t.row_keys(layout.axes) for c in t.column_keys(layout.axes)}
        runs = used[used["cell"].isin(table_cells)]
        valued = metrics.values(t.metric, proto, runs) if metrics is not None and not runs.empty \
            else runs.assign(value=pd.Series(dtype=float))
        data = build_table_data(t, layout.axes, layout.folds, valued, proto)
        result.tables[t.id] = data
        result.missing[t.id] = _missing_cells(data, layout)
        if "md" in formats:
            _write(out / f"{t.id}.md", md_banner + render_markdown(data), result)
            _write(out / f"{t.id}_folds.md", md_banner + render_folds_markdown(data), result)
        if "tex" in formats:
            _write(out / f"{t.id}.tex", tex_banner + render_latex(data), result)
            _write(out / f"{t.id}_folds.tex", tex_banner + render_folds_latex(data), result)


def _figures(layout: ReportLayout, metrics: MetricCache, used: pd.DataFrame, uri: str, protocol: str | None,
             out: Path, result: BuildResult) -> None:
    for fig in layout.figures:
        try:
            drawn = draw_figure(fig, layout, metrics, used, uri, protocol, out)
        except ValueError as e:
            # Missing runs or artifacts are a state of the sweep, not a bad request: report the rest.
            result.skipped_figures[str(fig.id)] = str(e)
            print(f"reports.build: figure {fig.id} skipped: {e}", file=sys.stderr)
            continue
        result.figures[str(fig.id)] = drawn
        result.files += drawn.files


def _build(layout: ReportLayout, source: RunSource, uri: str, out: Path, protocol: str | None,
           formats: Sequence[str], experiment_name: str | None, digest: str,
           overrides: tuple[str, ...]) -> BuildResult:
    name = experiment_name or layout.name
    experiment_id = source.experiment_id(name)
    settings = read_settings(source, experiment_id, digest, overrides)
    trials, ignored = split_by_settings(mark_lost(source, source.trials(experiment_id, list(layout.axes))),
                                        settings.hashes("grid"))
    used, duplicates, unfinished = select_trials(trials, layout.folds)
    _require_runs(layout, source, name, trials, used, ignored)
    _check_metrics(layout, source.metric_keys(used["run_id"]), name)
    # tables' tuned rows read refit runs, whose cell ids (tuned=true) no grid cell has
    (table_runs, duplicates, unfinished), ignored_refits = with_refit_trials(
        layout, source, experiment_id, (used, duplicates, unfinished), settings.hashes("refit"))
    out.mkdir(parents=True, exist_ok=True)
    result = BuildResult(out_dir=out, index=out / "index.md", ignored=ignored + ignored_refits, lost=lost_lines(trials),
                         settings_note=settings.note, overrides=overrides, digest=settings.digest)
    metrics = MetricCache(source)
    _tables(layout, metrics, table_runs, protocol, formats, out, result)
    if "png" in formats or "pdf" in formats:
        _figures(layout, metrics, table_runs, uri, protocol, out, result)  # tuned rows' refit runs too
    result.searches = write_searches(layout, source, experiment_id, uri, out, formats, settings.hashes("search"))
    result.files += result.searches.files
    if "tex" in formats:
        figures = [(fid, f.caption) for fid, f in result.figures.items()] + result.searches.figures
        _write(out / "report.tex", latex_document(f"Report: {layout.name}", [t.id for t in layout.tables], figures,
                                                  result.searches.tex_inputs), result)
    if "pdf" in formats:
        result.pdf = compile_pdf(out / "report.tex")
        result.files.append(result.pdf)
    _write(result.index, _index(layout, result, formats, uri, experiment_id, used, duplicates, unfinished, protocol)
           + (f"\n{result.searches.markdown}" if result.searches.markdown else ""), result)
    return result


PREVIEW = ("Preview: no run was read (python -m reports.build --preview); the paper's numbers are quoted and each "
           "cell of ours is empty (—) until the sweep runs.")


def _preview(layout: ReportLayout, out: Path, protocol: str | None, formats: Sequence[str],
             overrides: tuple[str, ...]) -> BuildResult:
    """The tables with no run: what the layout, the quoted and published numbers give; no figure, no search."""
    out.mkdir(parents=True, exist_ok=True)
    result = BuildResult(out_dir=out, index=out / "index.md", overrides=overrides, settings_note=PREVIEW)
    _tables(layout, None, empty_trials(list(layout.axes)), protocol, formats, out, result, banner=PREVIEW)
    if "tex" in formats or "pdf" in formats:
        _write(out / "report.tex", latex_document(f"Preview: {layout.name}", [t.id for t in layout.tables], [], []),
               result)
    if "pdf" in formats:
        result.pdf = compile_pdf(out / "report.tex")
        result.files.append(result.pdf)
    lines = [f"# Preview: {layout.name}", "", f"**{PREVIEW}**", "", *_files_section(layout, result, formats)]
    _write(result.index, "\n".join(lines) + "\n", result)
    return result


def _files_section(layout: ReportLayout, result: BuildResult, formats: Sequence[str]) -> list[str]:
    lines = ["## Files", ""]
    if not layout.tables:
        lines.append("The YAML defines no table.")
    for t in layout.tables:
        links = []
        if "md" in formats:
            links += [f"[Markdown]({t.id}.md)", f"[per fold]({t.id}_folds.md)"]
        if "tex" in formats:
            links += [f"[LaTeX]({t.id}.tex)", f"[per fold, LaTeX]({t.id}_folds.tex)"]
        lines.append(f"- {caption(result.tables[t.id])}: " + " · ".join(links))
    if "tex" in formats:
        doc = "[report.tex](report.tex)" + (" → [report.pdf](report.pdf)" if result.pdf else "")
        lines += ["", f"Every LaTeX table and figure in one document: {doc}."
                  + ("" if result.pdf else " `--format pdf` compiles it (pdflatex, run as often as it asks: the "
                     f"per-fold longtables need two runs; install: {TEX_INSTALL}).")]
    return lines


def _missing_section(layout: ReportLayout, result: BuildResult) -> list[str]:
    lines = ["## Cells with no finished run", ""]
    empty = {t.id: result.missing[t.id] for t in layout.tables if result.missing[t.id]}
    if not empty:
        return lines + ["None: every table cell has at least one finished run."]
    for t in layout.tables:
        if t.id in empty:
            lines.append(f"- {caption(result.tables[t.id])} ({t.id}): " + "; ".join(empty[t.id]))
    return lines


def _figures_section(result: BuildResult) -> list[str]:
    lines = ["## Figures", ""]
    for fid, drawn in result.figures.items():
        links = " · ".join(f"[{p.suffix[1:].upper()}]({p.name})" for p in drawn.files if p.suffix != ".png")
        lines += [f"### {fid}", "", drawn.caption, "", f"![{fid}]({fid}.png)", "", links, ""]
    for fid, why in result.skipped_figures.items():
        lines.append(f"- **{fid}**: not drawn — {why}")
    if not result.figures and not result.skipped_figures:
        lines.append("No figure.")
    return lines


def _runs_section(layout: ReportLayout, result: BuildResult, duplicates: pd.DataFrame,
                  unfinished: pd.DataFrame) -> list[str]:
    lines = ["## Runs behind each cell", ""]
    for t in layout.tables:
        data = result.tables[t.id]
        lines += [f"### {t.id}", "", "| Cell | n | Run ids (fold: run id) |", "| :--- | ---: | :--- |"]
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
    return lines


def _given(result: BuildResult) -> str:
    return "the YAML with " + (" ".join(f"`--set {i}`" for i in result.overrides) if result.overrides else "no --set")


def _index(layout: ReportLayout, result: BuildResult, formats: Sequence[str], tracking_uri: str, experiment_id: str,
           used: pd.DataFrame, duplicates: pd.DataFrame, unfinished: pd.DataFrame,
           protocol_override: str | None) -> str:
    lines = [f"# Report: {layout.name}", "",
             f"MLflow experiment `{layout.name}` (id {experiment_id}) at `{tracking_uri}`. "
             f"Grid trial runs used: {len(used)} FINISHED, the newest per cell and fold of folds "
             f"{', '.join(map(str, layout.folds))}" + ("." if result.settings_note else
                                                        f" with a config hash these settings give ({_given(result)}).")]
    lines += ["", f"In the MLflow UI, these runs grouped by cell (mean per cell): "
                  f"{C.ui_hint(tracking_uri, experiment_id, '' if result.settings_note else result.digest)}"]
    for line in (C.other_settings_line(result.ignored), result.settings_note):
        if line:
            lines += ["", f"**{line[0].upper()}{line[1:]}.**"]
    if result.lost:
        lines += ["", f"**Reused trials whose source run is gone ({len(result.lost)}), shown as —:**", "",
                  *(f"- {line}" for line in result.lost)]
    if protocol_override:
        lines.append(f"Protocol for every table and figure: {PROTOCOL_TEXT[protocol_override]} (--protocol).")
    lines += ["", *_files_section(layout, result, formats), "", *_missing_section(layout, result), ""]
    if "png" in formats or "pdf" in formats:
        lines += [*_figures_section(result), ""]
    lines += _runs_section(layout, result, duplicates, unfinished)
    return "\n".join(lines).rstrip("\n") + "\n"


def _pdf_line(result: BuildResult) -> list[str]:
    """Where report.pdf is, or how to make it (issue 34: `make quickstart` ended without a word about the PDF)."""
    tex = result.out_dir / "report.tex"
    if result.pdf is not None:
        return [f"PDF: {result.pdf}"]
    if tex not in result.files:
        return []
    need = "" if shutil.which("pdflatex") else f"; it needs pdflatex: {TEX_INSTALL}"
    return [f"no PDF: add pdf to --format (e.g. --format md,tex,png,pdf) to compile {tex}{need}"]


def _summary(result: BuildResult) -> str:
    """What main prints: files written and, when some table cells have no finished run, which."""
    lines = [f"wrote {len(result.files)} files to {result.out_dir} (index: {result.index})", *_pdf_line(result)]
    lines += [line for line in (C.other_settings_line(result.ignored), result.settings_note) if line]
    lines += [f"reused trial whose source run is gone: {line}" for line in result.lost]
    empty = [f"{tid}: {'; '.join(cells)}" for tid, cells in result.missing.items() if cells]
    if empty and result.settings_note != PREVIEW:   # a preview's cells are all empty, as it says
        lines.append(f"cells with no finished run (shown as —): {' | '.join(empty)}")
    if result.skipped_figures:
        lines.append(f"figures not drawn: {', '.join(result.skipped_figures)} (why: index.md)")
    return "\n".join(lines)


@entry_point("python -m reports.build")
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # One artifact download per heat-map fold: tqdm bars would bury the build's own output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    C.prefer_artifact_proxy()  # a workstation reaches the server, not the S3 store behind it
    try:
        result = build_report(args.spec, tracking_uri=args.tracking_uri, out_dir=args.out, protocol=args.protocol,
                              formats=[f.strip() for f in args.format.split(",") if f.strip()],
                              experiment_name=args.experiment_name, overrides=args.overrides,
                              preview=args.preview, overwrite=args.overwrite)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:        # a full disk or a folder removed while writing: one line, not a traceback
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
