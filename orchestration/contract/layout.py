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
        row_marks: {fixmatch: "*"}      # the paper's mark after a run row's label, where no quoted row gives it

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

from typing import Any

from pydantic import TypeAdapter, ValidationError

from mutexmatch.dotted import flatten_dotted

from orchestration import contract
from orchestration.contract.layout_checks import (_check_axis, _check_partial_cell, _check_table, _levels_line,
                                                  _metric_errors, _pydantic_lines, _stringify_keys,
                                                  _stringify_levels)
from orchestration.contract.layout_models import (_ID, METRIC_NAMES, PROTOCOLS, TUNED_ROW, Axes, CurvesFigure,
                                                  FigureLayout, HeatmapFigure, PairedSpec, ReportLayout,
                                                  SensitivityFigure, TableLayout, Terms, cell_id, metric_name,
                                                  param_name, parse_axes)
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
    errors += _file_clashes(tables, figures, set(dupes))
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


# The files a build writes for itself (reports.build), and for each table and figure: an id must not name them twice.
_OWN_FILES = ("index.md", "report.tex", "report.pdf")


def _file_clashes(tables: list[TableLayout], figures: list, dupes: set[str]) -> list[str]:
    """One line per table or figure whose output files (``<id>.md``, ``<id>_folds.tex``, ``<id>.png`` …) are the
    report's own (a table ``index`` replaced index.md) or another's (tables ``main`` and ``main_folds``)."""
    owner = {name: "the report writes its own" for name in _OWN_FILES}
    items = [(f"tables({t.id})", t.id, [f"{stem}.{ext}" for stem in (t.id, f"{t.id}_folds") for ext in ("md", "tex")])
             for t in tables] + [(f"figures({f.id})", f.id, [f"{f.id}.{ext}" for ext in ("png", "pdf", "svg")])
                                 for f in figures]
    errors = []
    for where, item_id, names in items:
        if item_id in dupes:
            continue  # said as `used twice`
        clash = next((name for name in names if name in owner), None)
        if clash is not None:
            errors.append(f"{where}.id={item_id!r}: {owner[clash]} {clash}; choose another id")
        owner.update({name: f"{where} writes" for name in names})
    return errors


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

