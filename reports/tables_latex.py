"""A report table in LaTeX (booktabs), laid out and marked as :mod:`reports.tables` describes, and the escaping of
plain text for pdflatex that every LaTeX output uses."""

from __future__ import annotations

import unicodedata

from orchestration.contract.layout import TUNED_ROW, PairedSpec, QuotedRow
from reports.stats import PairedResult
from reports.tables import (_TEX_SUB, Key, TableData, _fold_value, _folds_note, _footnotes, _note,
                            _paired_note, _published_text, _quoted_text, _row_header, _signed, caption, pair_baseline,
                            expected_folds, folds_caption, format_mean_std, format_p)

__all__ = ["render_latex", "render_folds_latex", "latex_escape", "MAX_TEX_COLUMNS"]


_LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                  "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
                  "±": r"$\pm$", "−": "$-$", "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$", "—": "---",
                  "–": "--", "·": r"$\cdot$", "→": r"$\rightarrow$", "…": r"\ldots{}", "<": r"\textless{}",
                  ">": r"\textgreater{}"}
_GREEK_UPPER = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"}


def latex_escape(text: str) -> str:
    """Plain text → LaTeX for pdflatex: specials escaped; Greek letters and ±, ×, —, ≤ … as math/TeX ligatures."""
    out = []
    for ch in text:
        if ch in _LATEX_SPECIAL:
            out.append(_LATEX_SPECIAL[ch])
            continue
        name = unicodedata.name(ch, "") if ord(ch) > 127 else ""
        if name.startswith("GREEK SMALL LETTER ") and " " not in name[len("GREEK SMALL LETTER "):]:
            # Unicode spells λ "LAMDA"; TeX spells it lambda.
            letter = name[len("GREEK SMALL LETTER "):].lower().replace("lamda", "lambda")
            out.append(f"$\\{letter}$" if letter != "omicron" else "o")
        elif name.startswith("GREEK CAPITAL LETTER ") and " " not in name[len("GREEK CAPITAL LETTER "):]:
            letter = name[len("GREEK CAPITAL LETTER "):].capitalize().replace("Lamda", "Lambda")
            out.append(f"$\\{letter}$" if letter in _GREEK_UPPER else letter[0])
        else:
            out.append(ch)
    return "".join(out)


_TEX_MARKS = {"†": r"$^{\dagger}$", "‡": r"$^{\ddagger}$", "*": r"$^{\ast}$"}


def _tex_mark(mark: str | None) -> str:
    return "" if mark is None else _TEX_MARKS[mark]


def _tex_value(text: str) -> str:
    """A printed number (ours or the paper's, with the paper's cell mark) in LaTeX; "—" as a dash."""
    if text == "—":
        return "---"
    text = text.replace("±", r"$\pm$")
    return text[:-1] + _TEX_MARKS[text[-1]] if text and text[-1] in _TEX_MARKS else text


def _tex_signed(text: str) -> str:
    return "---" if text in ("—", "n/a") else f"${text}$"


def _tex_cell(data: TableData, key: Key) -> str:
    stats = data.cells[key]
    text = _tex_value(format_mean_std(stats))
    mark = data.marks.get(key)
    if mark == "best":
        text = rf"\textbf{{{text}}}"
    elif mark == "second":
        text = rf"\underline{{{text}}}"
    if 0 < stats.n < expected_folds(data):
        text += rf"\,{{\scriptsize (n={stats.n})}}"
    return text


def _tex_header(data: TableData, lead: list[str], columns: list[str] | None = None, span: int = 1,
                sub: list[str] | None = None) -> list[str]:
    """Header rows for ``columns`` (default all): column groups (if any), column labels spanning ``span``
    sub-columns, then sub-column titles.

    ``lead`` holds the (already LaTeX) titles of the leading label columns; they go on the last header row.
    """
    lay = data.layout
    columns = data.columns if columns is None else columns
    lead_cols = len(lead)
    lines = []
    pad = " & " * (lead_cols - 1)

    def spans(items: list[tuple[str, int]]) -> tuple[str, str]:
        cells, rules, col = [], [], lead_cols + 1
        for title, width in items:
            cells.append(rf"\multicolumn{{{width}}}{{c}}{{{latex_escape(title)}}}" if width > 1 else
                         latex_escape(title))
            rules.append(rf"\cmidrule(lr){{{col}-{col + width - 1}}}")
            col += width
        return " & ".join(cells), " ".join(rules)

    if lay.column_groups:
        groups = [(g, sum(c in columns for c in cols)) for g, cols in lay.column_groups.items()]
        row, rules = spans([(g, n * span) for g, n in groups if n])
        lines.append(f"{pad} & {row} \\\\ {rules}")
    labels = [(lay.column_label(c), span) for c in columns]
    if sub:
        row, rules = spans(labels)
        lines.append(f"{pad} & {row} \\\\ {rules}")
        lines.append(" & ".join(lead + sub * len(columns)) + r" \\")
    else:
        lines.append(" & ".join(lead + [latex_escape(t) for t, _ in labels]) + r" \\")
    return lines


_FIT = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%"
MAX_TEX_COLUMNS = 9
"""Value sub-columns per tabular: a wider table is cut into stacked blocks (whole column groups where they fit) so
that it is not scaled down to an unreadable size — the paper's Table 1 with Ours/Paper/Δ has 27."""


def _column_blocks(data: TableData, span: int) -> list[list[str]]:
    per_block = max(1, MAX_TEX_COLUMNS // span)
    if len(data.columns) <= per_block:
        return [list(data.columns)]
    lay = data.layout
    units = [list(cols) for cols in lay.column_groups.values()] if lay.column_groups else [list(data.columns)]
    blocks: list[list[str]] = []
    for unit in units:
        if len(unit) > per_block:
            # a group wider than a block is cut into even pieces (4 columns → 2 + 2, not 3 + 1)
            pieces = -(-len(unit) // per_block)
            size = -(-len(unit) // pieces)
            blocks += [unit[i:i + size] for i in range(0, len(unit), size)]
        elif blocks and len(blocks[-1]) + len(unit) <= per_block:
            blocks[-1] += unit                    # small whole groups share a block
        else:
            blocks.append(list(unit))
    return blocks


def _tex_subheaders(data: TableData) -> list[str]:
    """The sub-column headers under each column title. "Ours" only beside the paper's numbers (Paper or Δ): beside
    the paired Δ alone it would set our numbers against nothing, so there it says what the cell holds."""
    ours = _TEX_SUB["ours"] if data.has_published else r"mean $\pm$ std"
    base = pair_baseline(data)
    pair = r"paired $\Delta$ ($p$)" if base is None else rf"paired $\Delta$ vs.\ {latex_escape(base)} ($p$)"
    return [ours if sc == "ours" else pair if sc == "pair" else _TEX_SUB[sc] for sc in data.shown]


def render_latex(data: TableData) -> str:
    """A ``table`` float (booktabs) to ``\\input``; needs ``booktabs`` and ``graphicx`` in the preamble."""
    lay = data.layout
    span = len(data.shown)
    # One font size for every block (footnotesize, tighter columns, as SSL papers set their tables); a block is
    # scaled down only if it is still wider than the line.
    lines = [r"\begin{table}[!htbp]", r"\centering", r"\footnotesize", r"\setlength{\tabcolsep}{4pt}",
             rf"\caption{{{latex_escape(caption(data))}}}", rf"\label{{tab:{lay.id}}}"]
    for bi, columns in enumerate(_column_blocks(data, span)):
        ncols = 1 + span * len(columns)
        if bi:
            lines.append(r"\par\medskip")
        lines += [_FIT, rf"\begin{{tabular}}{{@{{}}l{'c' * (ncols - 1)}@{{}}}}", r"\toprule"]
        lines += _tex_header(data, [latex_escape(_row_header(data))], columns, span,
                             sub=_tex_subheaders(data) if span > 1 else None)
        lines.append(r"\midrule")
        for gi, g in enumerate(data.groups):
            if g is not None:
                if gi:
                    lines.append(r"\midrule")
                label = latex_escape(lay.group_label(g))
                lines.append(rf"\multicolumn{{{ncols}}}{{@{{}}l}}{{\textit{{{label}}}}} \\")
            quoted = data.quoted.get(g, [])
            lines += [_tex_quoted_row(data, q, columns) for q in quoted]
            if quoted:
                lines.append(rf"\cmidrule{{1-{ncols}}}")          # the paper's rows above, ours below
            for i, r in enumerate(data.rows):
                if i and r.endswith(TUNED_ROW) != data.rows[i - 1].endswith(TUNED_ROW):
                    lines.append(rf"\cmidrule{{1-{ncols}}}")          # tuned rows apart: never ranked
                row = [latex_escape(lay.row_label(r)) + _tex_mark(lay.row_mark(g, r))]
                for c in columns:
                    row += [_tex_cell(data, (g, r, c)) if sc == "ours" else _tex_published(data, (g, r, c), sc)
                            for sc in data.shown]
                lines.append(" & ".join(row) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}}"]
    folded = "pair" in data.shown
    if data.marks_shown():
        lines.append(rf"\par\smallskip{{\footnotesize\raggedright {_footnotes(data, _tex_mark, latex_escape)}\par}}")
    lines.append(_tex_note(_note(data, markdown=False) + (_paired_note(data) if folded else "")))
    for pair, results in ([] if folded else data.paired):
        lines += _tex_paired(data, pair, results)
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _tex_quoted_row(data: TableData, q: QuotedRow, columns: list[str]) -> str:
    cells = [_quoted_text(q, c, sc) for c in columns for sc in data.shown]
    return " & ".join([latex_escape(q.label) + _tex_mark(q.mark)] + [_tex_value(t) if t else "" for t in cells]) + \
        r" \\"


def _tex_published(data: TableData, key: Key, sub: str) -> str:
    text = _published_text(data, key, sub)
    if sub == "pair":
        mean, _, p = text.partition(" ")
        return rf"${mean}$ {latex_escape(p)}" if p else latex_escape(text)
    return _tex_value(text) if sub == "paper" else _tex_signed(text)


def _tex_note(text: str) -> str:
    return rf"\par\smallskip{{\footnotesize\raggedright Note: {latex_escape(text)}\par}}"


def _tex_paired(data: TableData, pair: PairedSpec, results: dict[tuple[str | None, str], PairedResult]
                ) -> list[str]:
    lay = data.layout
    a, b = latex_escape(lay.row_label(pair.a)), latex_escape(lay.row_label(pair.b))
    lines = [r"\par\medskip",
             rf"{{\footnotesize Paired comparison {a} $-$ {b} on the same folds (same fold index and labeled split "
             r"digest), $\times$100: mean and sample std of the differences, two-sided paired $t$-test; n/a with "
             r"fewer than 2 pairs.\par}", r"\smallskip"]
    for g in data.groups:
        title = f"{a} $-$ {b}" + (f" ({latex_escape(lay.group_label(g))})" if g is not None else "")
        res = [results[(g, c)] for c in data.columns]
        lines += [_FIT, rf"\begin{{tabular}}{{@{{}}l{'c' * len(res)}@{{}}}}", r"\toprule"]
        lines += _tex_header(data, [title])
        lines.append(r"\midrule")
        lines.append(" & ".join([r"mean $\Delta$"] + [_tex_signed(_signed(x.mean_diff)) if x.mean_diff is not None
                                                       else "n/a" for x in res]) + r" \\")
        lines.append(" & ".join([r"std $\Delta$"] + [f"{x.std_diff:.2f}" if x.std_diff is not None else "n/a"
                                                      for x in res]) + r" \\")
        lines.append(" & ".join(["pairs"] + [str(x.n) for x in res]) + r" \\")
        lines.append(" & ".join(["$p$"] + [format_p(x.p_value) for x in res]) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}}", r"\smallskip"]
    return lines


def render_folds_latex(data: TableData) -> str:
    """Appendix ``longtable`` of per-fold values (breaks across pages; needs ``longtable`` and ``booktabs``)."""
    lay = data.layout
    lead = (["Group"] if lay.row_groups else []) + [_row_header(data), "Fold"]
    header = _tex_header(data, [latex_escape(t) for t in lead])
    caption_text = latex_escape(folds_caption(data)) + rf" (Table~\ref{{tab:{lay.id}}})"
    lines = [rf"\begin{{longtable}}{{@{{}}{'l' * (len(lead) - 1)}r{'c' * len(data.columns)}@{{}}}}",
             rf"\caption{{{caption_text}}}\label{{tab:{lay.id}-folds}} \\", r"\toprule", *header, r"\midrule",
             r"\endfirsthead", r"\toprule", *header, r"\midrule", r"\endhead", r"\bottomrule", r"\endlastfoot"]
    for g in data.groups:
        for r in data.rows:
            for f in data.folds:
                row = ([latex_escape(lay.group_label(g))] if lay.row_groups else []) + \
                      [latex_escape(lay.row_label(r)), str(f)]
                row += [_tex_value(_fold_value(data.cells[(g, r, c)], f)) for c in data.columns]
                lines.append(" & ".join(row) + r" \\")
    # longtable is not a float: the note set after it stays right under the table's last page.
    lines += [r"\end{longtable}", r"\vspace{-\smallskipamount}", _tex_note(_folds_note(data, markdown=False))]
    return "\n".join(lines) + "\n"
