"""Render a report table in Markdown (LaTeX: :mod:`reports.tables_latex`), laid out as the YAML says and marked
like the paper.

A table has a short caption above (the YAML's ``caption``, else what the metric is) and one note line below it
with the method notes (what a cell is, the protocol, the split rule, the marks); internal ids stay out of the text.
A cell is mean ± std over folds of the table's metric ×100 with two decimals (std = sample std, ddof=1; no ± for a
single fold), followed by ``(n=k)`` when fewer than the sweep's folds finished (:data:`PAPER_FOLDS` when it names
none) and "—" when none did. Per
column (and per row group) the best mean is bold and the second best is marked — italic in Markdown, underlined in
LaTeX (the paper shades it; underlining needs no extra package). Ranking uses the displayed (rounded) means, so equal
printed numbers get the same mark. With published numbers, each column gets "paper" and "Δ" (ours − paper, from the
printed mean) sub-columns, unless the layout says ``paper: false`` (``value_columns`` picks and orders them). The
paired comparison (a − b on the same folds, paired t-test) goes under the table; the per-fold values go to an
appendix table.

Quoted rows (``quoted_rows``: rows the paper prints and we do not run, :mod:`orchestration.contract.published`)
open each row block, above the rows we ran and apart from them (a rule in LaTeX, "quoted from the paper" / "run here"
lines in Markdown),
their label with the paper's mark and their printed numbers in the Paper sub-column; the marks' footnotes go under the
table. They are never bold or underlined and never count when ours are ranked: the marks compare our runs with each
other, under one protocol, while the paper's own bold and shading rank its printed numbers, quoted ones included — a
reader compares those in the Paper sub-column, where every printed number of the paper stands.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from orchestration.contract.layout import (TUNED_ROW, Axes, PairedSpec, PublishedValue, QuotedRow, TableLayout, cell_id,
                                           metric_name)
from reports.stats import CellStats, FoldValue, PairedResult, cell_stats, paired_comparison

__all__ = [
    "PAPER_FOLDS",
    "expected_folds",
    "PROTOCOL_TEXT",
    "TableData",
    "caption",
    "build_table_data",
    "format_mean_std",
    "format_delta",
    "format_p",
    "render_markdown",
    "render_folds_markdown",
]

PAPER_FOLDS = 5
"""The paper averages five labeled folds; cells with fewer finished folds show their n."""

PROTOCOL_TEXT = {
    "best": "best (maximum over all evaluations)",
    "final": "final (the last evaluation)",
    "median20": "median20 (median of the last 20 evaluations)",
}

Key = tuple[str | None, str, str]  # (row group level or None, row level, column level)


@dataclass
class TableData:
    """A table resolved against the runs: one :class:`CellStats` per position, marks, published numbers, pairs."""

    layout: TableLayout
    protocol: str
    folds: list[int]
    split_rules: list[str]
    groups: list[str | None]
    rows: list[str]
    columns: list[str]
    cells: dict[Key, CellStats]
    cell_ids: dict[Key, str]
    marks: dict[Key, str] = field(default_factory=dict)          # "best" | "second"
    published: dict[Key, PublishedValue] = field(default_factory=dict)
    paired: list[tuple[PairedSpec, dict[tuple[str | None, str], PairedResult]]] = field(default_factory=list)
    nan_runs: dict[Key, int] = field(default_factory=dict)       # finished runs whose metric is NaN (diverged)
    quoted: dict[str | None, list[QuotedRow]] = field(default_factory=dict)   # group → its quoted rows, in order

    @property
    def subcolumns(self) -> list[str]:
        """What each column shows, in order: ``ours``, and ``paper`` and ``delta`` when published numbers exist and
        the layout keeps them (``paper``, ``value_columns``)."""
        if not ((self.published or self.has_quoted) and self.layout.paper):
            return ["ours"]
        return list(self.layout.value_columns)

    @property
    def shown(self) -> list[str]:
        """:attr:`subcolumns` plus ``pair`` (the paired comparison's Δ (p)) when the layout folds it in."""
        return self.subcolumns + (["pair"] if self.layout.paired_column and self.paired else [])

    @property
    def has_quoted(self) -> bool:
        """Whether any quoted row is printed (a quoted row whose level the sweep runs is a run row instead)."""
        return any(self.quoted.values())

    def marks_shown(self) -> list[str]:
        """The paper's marks the table prints (on quoted rows, on run rows that were quoted, on printed numbers in
        the Paper sub-column), in the order of the layout's footnotes."""
        lay = self.layout
        used = {q.mark for rows in self.quoted.values() for q in rows}
        used |= {v.mark for rows in self.quoted.values() for q in rows for v in q.parsed("").values()}
        used |= {lay.row_mark(g, r) for g in self.groups for r in self.rows}
        if "paper" in self.subcolumns:
            used |= {v.mark for v in self.published.values()}
        return [m for m in lay.footnotes if m in used]

    @property
    def has_published(self) -> bool:
        """Whether a Paper or Δ column is shown."""
        return len(self.subcolumns) > 1

    def missing(self) -> list[Key]:
        """Positions with no finished run (shown "—")."""
        return [key for key, stats in self.cells.items() if stats.n == 0]


def build_table_data(layout: TableLayout, axes: Axes, folds: list[int], runs: pd.DataFrame, protocol: str
                     ) -> TableData:
    """Resolve ``layout`` against ``runs``: one row per used trial run with columns ``cell``, ``fold``,
    ``run_id``, ``split_digest``, ``value`` (the metric under ``protocol``, ×100) and optionally
    ``param.data.split_rule``."""
    groups, rows, columns = layout.group_keys(axes), layout.row_keys(axes), layout.column_keys(axes)
    # Plain lists, not a frame per cell: pandas' per-operation overhead dominated a 1,000-run report.
    by_cell: dict[str, list[FoldValue]] = {}
    if not runs.empty:
        for cell, fold, value, run_id, digest in zip(runs["cell"].tolist(), runs["fold"].tolist(),
                                                     runs["value"].tolist(), runs["run_id"].tolist(),
                                                     runs["split_digest"].tolist()):
            by_cell.setdefault(cell, []).append(FoldValue(int(fold), float(value), str(run_id), str(digest)))
    cells: dict[Key, CellStats] = {}
    ids: dict[Key, str] = {}
    members: dict[Key, list[FoldValue]] = {}
    for g in groups:
        for r in rows:
            for c in columns:
                cid = cell_id(layout.cell(axes, g, r, c), axes)
                ids[(g, r, c)] = cid
                members[(g, r, c)] = by_cell.get(cid, [])
                cells[(g, r, c)] = cell_stats(members[(g, r, c)])
    used_cells = set(ids.values())
    rules: list[str] = []
    if "param.data.split_rule" in runs.columns and not runs.empty:
        rules = split_rules(runs[runs["cell"].isin(used_cells) & runs["value"].notna()])
    data = TableData(layout=layout, protocol=protocol, folds=list(folds), split_rules=rules, groups=groups,
                     rows=rows, columns=columns, cells=cells, cell_ids=ids,
                     published=layout.published_values(axes),
                     quoted={g: layout.quoted(axes, g) for g in groups})
    data.marks = _marks(data)
    data.nan_runs = {k: n for k, m in members.items() if (n := sum(math.isnan(v.value) for v in m))}
    for pair in layout.paired:
        results = {(g, c): paired_comparison(members[(g, pair.a, c)], members[(g, pair.b, c)])
                   for g in groups for c in columns}
        data.paired.append((pair, results))
    return data


def _marks(data: TableData) -> dict[Key, str]:
    """Best and second-best per column within each row group, on the printed (2-decimal) means; needs ≥ 2 cells. A
    tuned row (``<level>+tuned``) is never ranked: its parameters were searched on validation labels and no other
    row's were, so it would win by a budget the others did not get (issue 34)."""
    marks: dict[Key, str] = {}
    for g in data.groups:
        for c in data.columns:
            shown = {r: round(data.cells[(g, r, c)].mean, 2) for r in data.rows
                     if data.cells[(g, r, c)].n and not r.endswith(TUNED_ROW)}
            if len(shown) < 2:
                continue
            ranked = sorted(set(shown.values()), reverse=True)
            for r, v in shown.items():
                if v == ranked[0]:
                    marks[(g, r, c)] = "best"
                elif len(ranked) > 1 and v == ranked[1]:
                    marks[(g, r, c)] = "second"
    return marks


# ---------------------------------------------------------------------------------------------------- formatting --

def format_mean_std(stats: CellStats) -> str:
    """``91.20±1.10``; one fold gives ``91.20``; no fold gives ``—``."""
    if stats.n == 0:
        return "—"
    if stats.std is None:
        return f"{stats.mean:.2f}"
    return f"{stats.mean:.2f}±{stats.std:.2f}"


def _signed(value: float) -> str:
    value = round(value, 2)
    return "0.00" if value == 0 else f"{value:+.2f}"


def format_delta(stats: CellStats, paper: PublishedValue | None) -> str:
    """Ours − paper from the printed mean (so readers can check it by subtraction); ``—`` when either is missing."""
    if paper is None or stats.n == 0:
        return "—"
    return _signed(round(stats.mean, 2) - paper.mean)


def format_p(p: float | None) -> str:
    """Four decimals, scientific below 1e-4; ``n/a`` when undefined."""
    if p is None:
        return "n/a"
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.2e}"


def expected_folds(data: TableData) -> int:
    """How many folds a complete cell has: the sweep's (its ``folds``), else the paper's five."""
    return len(data.folds) or PAPER_FOLDS


def _n_suffix(data: TableData, stats: CellStats) -> str:
    return f" (n={stats.n})" if 0 < stats.n < expected_folds(data) else ""


def _row_header(data: TableData) -> str:
    lay = data.layout
    return lay.row_header if lay.row_header is not None else lay.rows[:1].upper() + lay.rows[1:]


def _column_titles(data: TableData) -> list[str]:
    """Flat column titles for Markdown: ``group / label`` under column groups."""
    lay = data.layout
    group_of = {c: g for g, cols in lay.column_groups.items() for c in cols}
    return [f"{group_of[c]} / {lay.column_label(c)}" if c in group_of else lay.column_label(c) for c in data.columns]


def caption(data: TableData) -> str:
    """The table's caption: the YAML's, else what the metric is (no internal id)."""
    cap = data.layout.caption.strip()
    if not cap:
        name = metric_name(data.layout.metric)
        cap = name[:1].upper() + name[1:] + " (%)"
    return cap


def folds_caption(data: TableData) -> str:
    """The per-fold table's caption: what its values are, not the summary table's "mean ± std over k folds"."""
    name = metric_name(data.layout.metric)
    return f"{name[:1].upper()}{name[1:]} (%) of each fold: the values behind the table's mean ± std"


IMBALANCE_FIELDS = ("labeled_head", "labeled_ratio", "unlabeled_head", "unlabeled_ratio", "rule")


def split_rules(runs: pd.DataFrame) -> list[str]:
    """How the runs' labeled splits were drawn, for the note: ``data.split_rule`` of the balanced runs, and for the
    long-tailed ones (``data.imbalance`` set; they read no ``split_rule``: USB's rule draws them) one entry naming
    the imbalance, each field's values over the runs joined by "/" (a table's columns may differ in gamma_u)."""
    present = [f"param.data.imbalance.{f}" for f in IMBALANCE_FIELDS if f"param.data.imbalance.{f}" in runs.columns]
    long_tailed = runs[present[0]].map(lambda v: v not in (None, "None", "") and v == v) if present else \
        pd.Series(False, index=runs.index)
    rules = sorted(set(runs.loc[~long_tailed, "param.data.split_rule"].dropna().tolist()))
    if long_tailed.any():
        fields = ", ".join(f"{col.rsplit('.', 1)[1]} {_values(runs.loc[long_tailed, col])}" for col in present)
        rules.append(f"long-tailed (data.imbalance: {fields})")
    return rules


def _values(column: pd.Series) -> str:
    """A logged field's distinct values, numbers as printed in a YAML (10, not 10.0) and from high to low."""
    found = {str(v) for v in column.dropna()}
    try:
        return "/".join(f"{x:g}" for x in sorted({float(v) for v in found}, reverse=True))
    except ValueError:
        return "/".join(sorted(found))


def _note(data: TableData, markdown: bool) -> str:
    """The method notes, one line: what a cell is, protocol, split rule, marks, and Paper/Δ when shown."""
    lay = data.layout
    rules = ", ".join(data.split_rules) if data.split_rules else \
        "not logged" if any(stats.n for stats in data.cells.values()) else "unknown (no finished run)"
    metric = f"`{lay.metric}`" if markdown else lay.metric
    bold, second = ("**bold**", "*italic*") if markdown else ("bold", "underlined")
    parts = [f"Mean ± std (sample, ddof=1) over folds of {metric} ×100; protocol: {PROTOCOL_TEXT[data.protocol]}; "
             f"split rule: {rules}.",
             f"{bold}: best, {second}: second best per column" + _ranked_rows(data)
             + f"; (n=k): k of {expected_folds(data)} folds finished; —: none."]
    sub = data.subcolumns
    shown = (["Paper: the published number"] if "paper" in sub else []) + (["Δ = ours − paper"] if "delta" in sub
                                                                           else [])
    if shown:
        parts.append("; ".join(shown) + ".")
    tuned = [lay.row_label(r) for r in data.rows if r.endswith(TUNED_ROW)]
    if tuned:
        parts.append(f"{', '.join(tuned)}: parameters searched on validation labels (the search section of index.md: "
                     "space, trials, objective), then retrained on these folds; no other row was tuned, so "
                     f"{'it is' if len(tuned) == 1 else 'they are'} never ranked.")
    if data.has_quoted:
        where = "above the line" if markdown else "above the rule"
        parts.append(f"Rows {where} in each block: quoted from the paper (its printed numbers in the Paper column), "
                     "not run here and never ranked; —: the paper prints no number.")
    return " ".join(parts)


def _ranked_rows(data: TableData) -> str:
    """Which rows the bold and second marks rank, when not all: a tuned row above the bold one would otherwise read
    as a mistake (issue 40 item 6)."""
    tuned = any(r.endswith(TUNED_ROW) for r in data.rows)
    if data.has_quoted:
        return " among the rows run here" + (" and not tuned" if tuned else "")
    return " among the rows not tuned" if tuned else ""


def pair_baseline(data: TableData) -> str | None:
    """The row label every paired Δ of the table is taken against, named in the column's title; None when the pairs
    have different baselines (each cell then names its own)."""
    bases = {pair.b for pair, _ in data.paired}
    return data.layout.row_label(bases.pop()) if len(bases) == 1 else None


def _pair_title(data: TableData) -> str:
    base = pair_baseline(data)
    return "paired Δ (p)" if base is None else f"paired Δ vs. {base} (p)"


def _footnotes(data: TableData, mark: Callable[[str], str], escape: Callable[[str], str]) -> str:
    """The paper's marks the table prints, each with its footnote, as one line (empty when none)."""
    return " ".join(f"{mark(m)} {escape(data.layout.footnotes[m])}." for m in data.marks_shown())


def _md_mark(mark: str | None) -> str:
    return "" if mark is None else mark.replace("*", "\\*")


def _quoted_text(q: QuotedRow, column: str, sub: str) -> str:
    """A quoted row's sub-column: its printed number and cell mark in ``paper``, nothing in the others."""
    if sub != "paper":
        return ""
    value = q.parsed("").get(column)
    return "—" if value is None else str(value) + (value.mark or "")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_cell(data: TableData, key: Key) -> str:
    stats = data.cells[key]
    text = format_mean_std(stats)
    mark = data.marks.get(key)
    if mark == "best":
        text = f"**{text}**"
    elif mark == "second":
        text = f"*{text}*"
    return text + _n_suffix(data, stats)


_MD_SUB = {"paper": "paper", "delta": "Δ"}   # "pair": _pair_title
_TEX_SUB = {"ours": "Ours", "paper": "Paper", "delta": r"$\Delta$"}   # "pair": reports.tables_latex


def _paired_text(data: TableData, key: Key) -> str:
    """A row's paired comparison in its column: ``+1.23 (0.0412)`` (mean a − b, p), ending in ``vs. <b's label>``
    when the table's pairs have different baselines (:func:`pair_baseline`); empty for a row that is no pair's
    ``a``."""
    g, r, c = key
    found = next(((pair, res) for pair, res in data.paired if pair.a == r), None)
    if found is None:
        return ""
    pair, res = found[0], found[1][(g, c)]
    against = "" if pair_baseline(data) is not None else f" vs. {data.layout.row_label(pair.b)}"
    return ("n/a" if res.mean_diff is None else f"{_signed(res.mean_diff)} ({format_p(res.p_value)})") + against


def _paired_note(data: TableData) -> str:
    """What the paired Δ (p) column compares, for the table's note."""
    lay = data.layout
    pairs = "; ".join(f"{lay.row_label(p.a)} − {lay.row_label(p.b)}" for p, _ in data.paired)
    return (f" Paired Δ (p): {pairs}, on the same folds (same fold index and labeled split digest), ×100, mean of the "
            "differences and the two-sided paired t-test's p (scipy.stats.ttest_rel); n/a with fewer than 2 pairs.")


def _published_text(data: TableData, key: Key, sub: str) -> str:
    """The ``paper``, ``delta`` or ``pair`` sub-column of a position, as plain text ("—" when there is none)."""
    if sub == "pair":
        return _paired_text(data, key)
    paper = data.published.get(key)
    if sub == "paper":
        return str(paper) + (paper.mark or "") if paper else "—"
    return format_delta(data.cells[key], paper)


def render_markdown(data: TableData) -> str:
    """The table, its caption above and the paired comparison(s) below, as Markdown."""
    lay = data.layout
    titles = _column_titles(data)
    header = [_md_escape(_row_header(data))]
    for t in titles:
        # "paper" and "Δ" beside their column: repeating the column title would triple a wide table's width.
        header += [_md_escape(t) if sc == "ours" else _md_escape(_pair_title(data)) if sc == "pair" else _MD_SUB[sc]
                   for sc in data.shown]
    lines = [f"**{_md_escape(caption(data))}**", "", _md_row(header),
             _md_row([":---"] + ["---:"] * (len(header) - 1))]
    blank = [""] * (len(header) - 1)
    for g in data.groups:
        if g is not None:
            lines.append(_md_row([f"**{_md_escape(lay.group_label(g))}**"] + blank))
        if data.quoted.get(g):
            lines.append(_md_row(["*quoted from the paper (not run here)*"] + blank))
            for q in data.quoted[g]:
                lines.append(_md_row([_md_escape(q.label) + _md_mark(q.mark)] +
                                     [_md_mark(_quoted_text(q, c, sc)) for c in data.columns for sc in data.shown]))
            lines.append(_md_row(["*run here*"] + blank))
        for r in data.rows:
            row = [_md_escape(lay.row_label(r)) + _md_mark(lay.row_mark(g, r))]
            for c in data.columns:
                row += [_md_cell(data, (g, r, c)) if sc == "ours" else _md_mark(_published_text(data, (g, r, c), sc))
                        for sc in data.shown]
            lines.append(_md_row(row))
    folded = "pair" in data.shown
    lines += ["", f"Note: {_note(data, markdown=True)}" + (_paired_note(data) if folded else "")]
    if data.marks_shown():
        lines += ["", _footnotes(data, _md_mark, _md_escape)]
    for pair, results in ([] if folded else data.paired):
        lines += [""] + _md_paired(data, pair, results)
    return "\n".join(lines) + "\n"


def _md_paired(data: TableData, pair: PairedSpec, results: dict[tuple[str | None, str], PairedResult]) -> list[str]:
    lay = data.layout
    a, b = lay.row_label(pair.a), lay.row_label(pair.b)
    out = [f"Paired comparison {_md_escape(a)} − {_md_escape(b)} on the same folds (same fold index and labeled "
           f"split digest), ×100: mean and sample std of the differences, two-sided paired t-test "
           "(scipy.stats.ttest_rel); n/a with fewer than 2 pairs."]
    for g in data.groups:
        title = f"{a} − {b}" + (f" ({lay.group_label(g)})" if g is not None else "")
        res = [results[(g, c)] for c in data.columns]
        out += ["", _md_row([_md_escape(title)] + [_md_escape(t) for t in _column_titles(data)]),
                _md_row([":---"] + ["---:"] * len(res)),
                _md_row(["mean Δ"] + [_signed(x.mean_diff) if x.mean_diff is not None else "n/a" for x in res]),
                _md_row(["std Δ"] + [f"{x.std_diff:.2f}" if x.std_diff is not None else "n/a" for x in res]),
                _md_row(["pairs"] + [str(x.n) for x in res]),
                _md_row(["p"] + [format_p(x.p_value) for x in res])]
    return out


def _fold_value(stats: CellStats, fold: int) -> str:
    return f"{stats.values[fold]:.2f}" if fold in stats.values else "—"


def render_folds_markdown(data: TableData) -> str:
    """Appendix: the value of every fold (×100, under the table's protocol), one line per row and fold."""
    lay = data.layout
    head = (["Group"] if lay.row_groups else []) + [_row_header(data), "Fold"] + _column_titles(data)
    lines = [f"**{_md_escape(folds_caption(data))} (table `{lay.id}`)**", "",
             _md_row([_md_escape(h) for h in head]),
             _md_row([":---"] * (len(head) - len(data.columns) - 1) + ["---:"] * (len(data.columns) + 1))]
    for g in data.groups:
        for r in data.rows:
            for f in data.folds:
                row = ([_md_escape(lay.group_label(g))] if lay.row_groups else []) + [_md_escape(lay.row_label(r)),
                                                                                      str(f)]
                row += [_fold_value(data.cells[(g, r, c)], f) for c in data.columns]
                lines.append(_md_row(row))
    lines += ["", f"Note: {_folds_note(data, markdown=True)}"]
    return "\n".join(lines) + "\n"


def _folds_note(data: TableData, markdown: bool) -> str:
    metric = f"`{data.layout.metric}`" if markdown else data.layout.metric
    return (f"{metric} ×100 of each fold, protocol: {PROTOCOL_TEXT[data.protocol]}; —: no finished run; the run "
            "behind each value: index.md.")
