"""The checks of a table layout against a sweep's axes, and the helpers the figure checks share
(:mod:`orchestration.contract.layout` runs them; every problem is one line naming the field)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from mutexmatch.checks import validation_error_lines

from orchestration.contract.layout_models import Axes, TableLayout, Terms
from orchestration.contract.metrics import FIXED, PERCENT_METRICS, is_logged, logged
from orchestration.contract.published import (MARKS, LayoutError, PublishedValue, QuotedRow, check_percentage,
                                              parse_published)

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
    errors += _check_quoted(t, where, axes, rows) + _check_footnotes(t, where) + _check_row_marks(t, where, rows)
    return errors


def _check_row_marks(t: TableLayout, where: str, rows: set) -> list[str]:
    """Each ``row_marks`` entry: a row of the table, one of :data:`MARKS`, footnoted."""
    errors: list[str] = []
    for level, mark in t.row_marks.items():
        if level not in rows:
            errors.append(f"{where}.row_marks.{level}: not a row of the table; rows: {', '.join(sorted(rows))}")
        elif mark not in MARKS:
            errors.append(f"{where}.row_marks.{level}={mark!r}: not a mark; marks: {', '.join(MARKS)}")
        elif mark not in t.footnotes:
            errors.append(_no_footnote(f"{where}.row_marks.{level}", mark, mark))
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
                    parsed = parse_published(value, f"{base}.{row}.{col}")
                except LayoutError as e:
                    errors.append(str(e))
                    continue
                mark = parsed.mark
                errors += _out_of_range(t, parsed, value, f"{base}.{row}.{col}")
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
        if q.level not in rows and q.label in {t.row_label(r) for r in rows}:   # two rows of one name (q-duplabel)
            errors.append(f"{at}.label={q.label!r}: a run row of the table has this label too; give the quoted row "
                          "another label, or `level: <that row>` if these are that row's printed numbers")
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
        errors += _out_of_range(t, value, q.values[col], f"{at}.values.{col}")
        if value.mark is not None and value.mark not in t.footnotes:
            errors.append(_no_footnote(f"{at}.values.{col}", q.values[col], value.mark))
    return errors


def _out_of_range(t: TableLayout, value: PublishedValue, raw: Any, where: str) -> list[str]:
    """A printed value of a percentage metric's table outside [0, 100], as an error line (none for other metrics)."""
    problem = check_percentage(value, raw, where) if t.metric in PERCENT_METRICS else None
    return [problem] if problem else []


def _check_footnotes(t: TableLayout, where: str) -> list[str]:
    """Footnotes only for the marks :data:`MARKS`, each with a text, each carried by a row or a cell."""
    errors: list[str] = []
    used = {q.mark for q in t.quoted_rows} | set(t.row_marks.values())
    used |= _value_marks([t.published] + [q.values for q in t.quoted_rows])
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

