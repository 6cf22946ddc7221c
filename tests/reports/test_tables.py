"""Table rendering without MLflow: row groups, column groups, ties, single folds, LaTeX escaping and compiling."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from orchestration.contract.layout import validate_report
from reports.stats import CellStats
from reports.tables import (build_table_data, format_delta, format_mean_std, format_p, render_folds_markdown,
                            render_markdown)
from reports.tables_latex import latex_escape, render_folds_latex, render_latex
from reports.latex import TEX_INSTALL
from orchestration.contract.layout import PublishedValue

SPEC = {
    "name": "g",
    "axes": {
        "method": {"fm": {}, "mm": {}, "sup": {}},
        "setting": {"c10-40": {}, "c10-250": {}, "c100-400": {}},
        "backbone": {"cnn13": {}, "wrn": {}},
    },
    "tables": [{
        "id": "g", "caption": "Ablation: 50% & λ_n ~ τ <1> {x} $",     # LaTeX specials must compile
        "rows": "method", "columns": "setting", "row_groups": "backbone",
        "row_header": "Method", "row_labels": {"fm": "FixMatch", "mm": "MutexMatch", "sup": "Supervised"},
        "row_group_labels": {"cnn13": "Backbone: CNN-13", "wrn": "Backbone: WRN-28-2"},
        "column_labels": {"c10-40": "40 labels", "c10-250": "250 labels", "c100-400": "400 labels"},
        "column_groups": {"CIFAR-10": ["c10-40", "c10-250"], "CIFAR-100": ["c100-400"]},
        "paired": {"a": "mm", "b": "fm"},
    }],
}
# (method, setting, backbone) → {fold: value ×100}
VALUES = {
    ("fm", "c10-40", "cnn13"): {0: 90, 1: 92},
    ("mm", "c10-40", "cnn13"): {0: 92, 1: 90},         # ties FixMatch: both bold
    ("sup", "c10-40", "cnn13"): {3: 80},
    ("mm", "c10-250", "cnn13"): {0: 95},               # alone in its column: no mark
    ("fm", "c10-40", "wrn"): {0: 93, 1: 94, 2: 95, 3: 96, 4: 97},
    ("mm", "c10-40", "wrn"): {0: 94, 1: 95, 2: 96, 3: 97, 4: 98},
}


def runs() -> pd.DataFrame:
    rows = []
    for (m, s, b), folds in VALUES.items():
        for f, v in folds.items():
            rows.append({"cell": f"method={m},setting={s},backbone={b}", "fold": f, "value": float(v),
                         "run_id": f"{m}-{s}-{b}-{f}", "split_digest": f"{s}-{f}", "param.data.split_rule": "balanced"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data():
    report = validate_report(SPEC)
    return build_table_data(report.tables[0], report.axes, report.folds, runs(), "final")


def test_grouped_markdown_exact(data):
    cols = "CIFAR-10 / 40 labels | CIFAR-10 / 250 labels | CIFAR-100 / 400 labels"
    expected = "\n".join([
        "**Ablation: 50% & λ_n ~ τ <1> {x} $**",
        "",
        f"| Method | {cols} |",
        "| :--- | ---: | ---: | ---: |",
        "| **Backbone: CNN-13** |  |  |  |",
        "| FixMatch | **91.00±1.41** (n=2) | — | — |",
        "| MutexMatch | **91.00±1.41** (n=2) | 95.00 (n=1) | — |",
        "| Supervised | *80.00* (n=1) | — | — |",
        "| **Backbone: WRN-28-2** |  |  |  |",
        "| FixMatch | *95.00±1.58* | — | — |",
        "| MutexMatch | **96.00±1.58** | — | — |",
        "| Supervised | — | — | — |",
        "",
        "Note: Mean ± std (sample, ddof=1) over folds of `test/acc` ×100; protocol: final (the last evaluation); "
        "split rule: balanced. **bold**: best, *italic*: second best per column; (n=k): k of 5 folds finished; —: "
        "none.",
        "",
        "Paired comparison MutexMatch − FixMatch on the same folds (same fold index and labeled split digest), "
        "×100: mean and sample std of the differences, two-sided paired t-test (scipy.stats.ttest_rel); n/a with "
        "fewer than 2 pairs.",
        "",
        f"| MutexMatch − FixMatch (Backbone: CNN-13) | {cols} |",
        "| :--- | ---: | ---: | ---: |",
        "| mean Δ | 0.00 | n/a | n/a |",
        "| std Δ | 2.83 | n/a | n/a |",
        "| pairs | 2 | 0 | 0 |",
        "| p | 1.0000 | n/a | n/a |",          # differences +2 and −2: t = 0
        "",
        f"| MutexMatch − FixMatch (Backbone: WRN-28-2) | {cols} |",
        "| :--- | ---: | ---: | ---: |",
        "| mean Δ | +1.00 | n/a | n/a |",
        "| std Δ | 0.00 | n/a | n/a |",
        "| pairs | 5 | 0 | 0 |",
        "| p | n/a | n/a | n/a |",             # every difference is +1: t undefined
    ]) + "\n"
    assert render_markdown(data) == expected


def test_grouped_folds_markdown(data):
    lines = render_folds_markdown(data).splitlines()
    assert lines[2] == ("| Group | Method | Fold | CIFAR-10 / 40 labels | CIFAR-10 / 250 labels | "
                        "CIFAR-100 / 400 labels |")
    assert lines[3] == "| :--- | :--- | ---: | ---: | ---: | ---: |"
    assert len(lines) == 4 + 2 * 3 * 5 + 2           # + an empty line and the note
    assert lines[-1].startswith("Note: `test/acc` ×100 of each fold, protocol: final (the last evaluation)")
    assert lines[4 + 2 * 5 + 3] == "| Backbone: CNN-13 | Supervised | 3 | 80.00 | — | — |"
    assert lines[4 + 3 * 5 + 5 + 4] == "| Backbone: WRN-28-2 | MutexMatch | 4 | 98.00 | — | — |"


def wide_table(**options):
    """Five columns with published numbers: 15 value sub-columns, more than one LaTeX block holds."""
    spec = {"name": "w", "axes": {"method": {"fm": {}, "mm": {}}, "labels": {f"n{i}": {} for i in range(5)}},
            "tables": [{"id": "w", "rows": "method", "columns": "labels",
                        "published": {"mm": {f"n{i}": 90 + i for i in range(5)}}, **options}]}
    report = validate_report(spec)
    frame = pd.DataFrame([{"cell": f"method={m},labels=n{i}", "fold": f, "value": 80.0 + i + f + (m == "mm"),
                           "run_id": f"{m}{i}{f}", "split_digest": str(f)} for m in ("fm", "mm") for i in range(5)
                          for f in range(5)])
    return build_table_data(report.tables[0], report.axes, report.folds, frame, "best")


def test_wide_latex_table_is_cut_into_blocks():
    tex = render_latex(wide_table())
    assert tex.count(r"\begin{tabular}") == 2                      # 3 columns × (Ours, Paper, Δ), then 2
    assert r"Method & Ours & Paper & $\Delta$ & Ours & Paper & $\Delta$ & Ours & Paper & $\Delta$ \\" in tex
    assert r" & \multicolumn{3}{c}{n3} & \multicolumn{3}{c}{n4} \\ \cmidrule(lr){2-4} \cmidrule(lr){5-7}" in tex
    assert r"mm & \textbf{83.00$\pm$1.58} & 90.00 & $-7.00$" in tex


def test_paper_false_hides_the_paper_and_delta_columns():
    md, tex = render_markdown(wide_table(paper=False)), render_latex(wide_table(paper=False))
    assert "| Method | n0 | n1 | n2 | n3 | n4 |" in md and "paper" not in md and "Δ" not in md
    assert tex.count(r"\begin{tabular}") == 1 and "Paper" not in tex and r"$\Delta$" not in tex
    assert "Note: Mean ± std" in md and "published" not in md


def test_value_columns_set_the_sub_column_order():
    md = render_markdown(wide_table(value_columns=["ours", "delta"]))
    assert "| Method | n0 | Δ | n1 | Δ |" in md and "| mm | **83.00±1.58** | -7.00 |" in md
    assert "Δ = ours − paper." in md and "Paper: the published number" not in md
    tex = render_latex(wide_table(value_columns=["paper", "ours", "delta"]))
    assert r"Method & Paper & Ours & $\Delta$ & Paper & Ours & $\Delta$" in tex
    assert r"mm & 90.00 & \textbf{83.00$\pm$1.58} & $-7.00$" in tex


@pytest.mark.parametrize("columns", [["paper", "delta"], ["ours", "ours"]])
def test_value_columns_need_ours_once(columns):
    with pytest.raises(ValueError, match=r"tables\[0\]\(w\)\.value_columns=.*: must list `ours` and each"):
        wide_table(value_columns=columns)


def test_grouped_latex_structure_and_compiles(data, tmp_path):
    tex = render_latex(data)
    assert r" & \multicolumn{2}{c}{CIFAR-10} & CIFAR-100 \\ \cmidrule(lr){2-3} \cmidrule(lr){4-4}" in tex
    assert r"Method & 40 labels & 250 labels & 400 labels \\" in tex
    assert r"\multicolumn{4}{@{}l}{\textit{Backbone: CNN-13}} \\" in tex
    assert r"FixMatch & \textbf{91.00$\pm$1.41}\,{\scriptsize (n=2)} & --- & --- \\" in tex
    assert r"Supervised & \underline{80.00}\,{\scriptsize (n=1)} & --- & --- \\" in tex
    pdflatex = shutil.which("pdflatex")
    assert pdflatex, f"pdflatex is required: {TEX_INSTALL}"
    (tmp_path / "t.tex").write_text("\n".join([
        r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs,longtable,graphicx}",
        r"\begin{document}", tex, render_folds_latex(data), render_latex(wide_table()), r"\end{document}"]))
    proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_formatting_helpers():
    assert format_mean_std(CellStats({0: 91.2, 1: 92.3})) == "91.75±0.78"
    assert format_mean_std(CellStats({3: 91.2})) == "91.20"
    assert format_mean_std(CellStats()) == "—"
    paper = PublishedValue(93.22, 2.52)
    assert format_delta(CellStats({0: 93.22}), paper) == "0.00"
    assert format_delta(CellStats({0: 94.0, 1: 95.0}), paper) == "+1.28"
    assert format_delta(CellStats(), paper) == "—" and format_delta(CellStats({0: 1.0}), None) == "—"
    assert (format_p(0.04321), format_p(3.2e-6), format_p(None)) == ("0.0432", "3.20e-06", "n/a")


def test_latex_escape():
    assert latex_escape("50% of a_b & {x} #1 $5 ~ ^") == \
        r"50\% of a\_b \& \{x\} \#1 \$5 \textasciitilde{} \textasciicircum{}"
    assert latex_escape("τ=0.95, λ_n, Δ ± 1 — k≤3, Ω") == \
        r"$\tau$=0.95, $\lambda$\_n, $\Delta$ $\pm$ 1 --- k$\leq$3, $\Omega$"
    assert latex_escape("back\\slash") == r"back\textbackslash{}slash"


def test_paired_comparisons_fold_into_a_column_when_the_layout_asks():
    import copy

    spec = copy.deepcopy(SPEC)
    spec["tables"][0].update(paired_column=True, column_groups={})
    report = validate_report(spec)
    folded = build_table_data(report.tables[0], report.axes, report.folds, runs(), "final")
    md = render_markdown(folded).splitlines()
    # one baseline for every pair: the column's title names it (issue 40 item 6)
    assert md[2] == ("| Method | 40 labels | paired Δ vs. FixMatch (p) | 250 labels | paired Δ vs. FixMatch (p) | "
                     "400 labels | paired Δ vs. FixMatch (p) |")
    assert "| MutexMatch | **91.00±1.41** (n=2) | 0.00 (1.0000) | 95.00 (n=1) | n/a | — | n/a |" in md
    assert "| FixMatch | *95.00±1.58* |  | — |  | — |  |" in md       # no pair's `a`: empty
    assert not any(ln.startswith("Paired comparison") for ln in md)   # no table below
    assert "Paired Δ (p): MutexMatch − FixMatch, on the same folds" in md[-1]
    tex = render_latex(folded)
    assert r"paired $\Delta$ vs.\ FixMatch ($p$)" in tex and "$+1.00$ (n/a) &" in tex
    # one comparison per row: a row that is `a` of two pairs is refused in one line
    spec["tables"][0]["paired"] = [{"a": "mm", "b": "fm"}, {"a": "mm", "b": "sup"}]
    with pytest.raises(Exception, match=r"paired\[0\]\.a='mm': paired_column shows one comparison per row"):
        validate_report(spec)


def test_no_lone_ours_sub_header_without_the_papers_numbers():
    """Issue 34: a table with a paired column and no published numbers (the quickstart's) printed "Ours" beside
    "paired Δ (p)", setting our numbers against nothing; there the sub-header says what the cell holds. With the
    paper's numbers (Paper or Δ shown) it stays "Ours"."""
    import copy

    spec = copy.deepcopy(SPEC)
    spec["tables"][0].update(paired_column=True, column_groups={})
    report = validate_report(spec)
    tex = render_latex(build_table_data(report.tables[0], report.axes, report.folds, runs(), "final"))
    assert (r"Method & mean $\pm$ std & paired $\Delta$ vs.\ FixMatch ($p$) & mean $\pm$ std & paired $\Delta$ vs.\ "
            r"FixMatch ($p$)") in tex
    assert "Ours" not in tex
    assert r"Method & Ours & $\Delta$ & Ours & $\Delta$" in render_latex(wide_table(value_columns=["ours", "delta"]))


def quoted_table(**changes):
    """SPEC's grouped table with the paper's quoted rows: one above each group's runs, one cell-marked number."""
    import copy

    spec = copy.deepcopy(SPEC)
    spec["tables"][0].update({
        "quoted_rows": [{"label": "MT", "mark": "†", "group": "cnn13",
                         "values": {"c10-40": "99.50±0.10", "c10-250": "-", "c100-400": "54.64"}},
                        {"label": "CoMatch", "mark": "*", "group": "wrn", "level": "comatch",
                         "values": {"c10-40": "99.00±0.25*", "c10-250": "95.84±0.04", "c100-400": "-"}}],
        "footnotes": {"†": "reported in UPS", "*": "the paper authors' reimplementation"},
        "published": {"wrn": {"mm": {"c10-40": "95.35±0.33"}}}, **changes})
    report = validate_report(spec)
    return build_table_data(report.tables[0], report.axes, report.folds, runs(), "final")


def test_quoted_rows_print_above_ours_with_their_marks_and_are_never_ranked():
    md = render_markdown(quoted_table()).splitlines()
    blank = "  |" * 9
    assert md[4:15] == [
        "| **Backbone: CNN-13** |" + blank,
        "| *quoted from the paper (not run here)* |" + blank,
        "| MT† |  | 99.50±0.10 |  |  | — |  |  | 54.64 |  |",
        "| *run here* |" + blank,
        # 99.50 in MT's row is above ours, yet ours keep their marks: quoted rows are never ranked
        "| FixMatch | **91.00±1.41** (n=2) | — | — | — | — | — | — | — | — |",
        "| MutexMatch | **91.00±1.41** (n=2) | — | — | 95.00 (n=1) | — | — | — | — | — |",
        "| Supervised | *80.00* (n=1) | — | — | — | — | — | — | — | — |",
        "| **Backbone: WRN-28-2** |" + blank,
        "| *quoted from the paper (not run here)* |" + blank,
        "| CoMatch\\* |  | 99.00±0.25\\* |  |  | 95.84±0.04 |  |  | — |  |",
        "| *run here* |" + blank,
    ]
    assert md[15] == "| FixMatch | *95.00±1.58* | — | — | — | — | — | — | — | — |"
    note = next(line for line in md if line.startswith("Note: "))
    assert "second best per column among the rows run here;" in note
    assert ("Rows above the line in each block: quoted from the paper (its printed numbers in the Paper column), not "
            "run here and never ranked; —: the paper prints no number.") in note
    assert md[md.index(note) + 2] == "† reported in UPS. \\* the paper authors' reimplementation."


def test_a_table_without_quoted_rows_prints_no_quoted_block():
    md = render_markdown(quoted_table(quoted_rows=[], footnotes={}))
    assert "quoted" not in md and "run here" not in md and "†" not in md


def test_quoted_rows_in_latex_sit_above_a_rule_and_compile(tmp_path):
    tex = render_latex(quoted_table())
    assert (r"MT$^{\dagger}$ &  & 99.50$\pm$0.10 &  &  & --- &  &  & 54.64 &  \\" + "\n" + r"\cmidrule{1-10}" + "\n" +
            r"FixMatch & \textbf{91.00$\pm$1.41}") in tex
    assert r"CoMatch$^{\ast}$ &  & 99.00$\pm$0.25$^{\ast}$ &  &  & 95.84$\pm$0.04 &  &  & --- &  \\" in tex
    assert (r"\par\smallskip{\footnotesize\raggedright $^{\dagger}$ reported in UPS. $^{\ast}$ the paper authors' "
            r"reimplementation.\par}") in tex
    pdflatex = shutil.which("pdflatex")
    assert pdflatex, f"pdflatex is required: {TEX_INSTALL}"
    (tmp_path / "t.tex").write_text("\n".join([
        r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs,graphicx}",
        r"\begin{document}", tex, r"\end{document}"]))
    proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_quoted_row_whose_level_runs_shows_ours_beside_the_papers():
    import copy

    spec = copy.deepcopy(SPEC)
    spec["axes"]["method"]["comatch"] = {}
    spec["tables"][0].update(quoted_rows=[{"label": "CoMatch", "mark": "*", "group": "wrn", "level": "comatch",
                                           "values": {"c10-40": "99.00±0.25", "c10-250": "-", "c100-400": "-"}}],
                             footnotes={"*": "the paper authors' reimplementation"})
    report = validate_report(spec)
    frame = pd.concat([runs(), pd.DataFrame([{"cell": "method=comatch,setting=c10-40,backbone=wrn", "fold": f,
                                              "value": 97.0 + f, "run_id": f"co{f}", "split_digest": f"c10-40-{f}"}
                                             for f in range(5)])])
    data = build_table_data(report.tables[0], report.axes, report.folds, frame, "final")
    md = render_markdown(data)
    assert "quoted" not in md                          # no quoted row left: CoMatch is a run row
    # ours (ranked with the other run rows: best), the paper's number and Δ beside it, the mark on the label
    assert "| CoMatch\\* | **99.00±1.58** | 99.00±0.25 | 0.00 |" in md
    assert md.splitlines()[-1] == "| p | n/a | n/a | n/a |"
    assert "\\* the paper authors' reimplementation." in md


def test_a_run_row_carries_the_papers_mark_from_row_marks():
    """The paper's FixMatch* (its authors' reimplementation) is a run row with no quoted row to take a mark from:
    ``row_marks`` puts the mark after its label (issue 32); an unknown row or an unfootnoted mark is refused."""
    md = render_markdown(quoted_table(row_marks={"fm": "*"}))
    assert "| FixMatch\\* | **91.00±1.41** (n=2) | — | — | — | — | — | — | — | — |" in md
    assert "| FixMatch\\* | *95.00±1.58* | — | — | — | — | — | — | — | — |" in md
    assert r"FixMatch$^{\ast}$ & \textbf{91.00$\pm$1.41}" in render_latex(quoted_table(row_marks={"fm": "*"}))
    with pytest.raises(Exception, match=r"row_marks\.nope: not a row of the table"):
        quoted_table(row_marks={"nope": "*"})
    with pytest.raises(Exception, match=r"row_marks\.fm.*has no footnote"):
        quoted_table(row_marks={"fm": "‡"})


def test_the_fold_count_is_the_sweeps_own():
    """A sweep of 2 folds: a cell with both folds finished is complete (no "(n=2)"), and the note says "k of 2"."""
    report = validate_report({**SPEC, "folds": [0, 1]})
    two = build_table_data(report.tables[0], report.axes, report.folds,
                           runs().query("fold < 2"), "final")
    md = render_markdown(two)
    assert "| FixMatch | **91.00±1.41** | — | — |" in md and "(n=k): k of 2 folds finished" in md, md
    assert "95.00 (n=1)" in md
    assert r"\textbf{91.00$\pm$1.41} &" in render_latex(two)


def test_a_long_tailed_split_is_named_in_the_note_not_the_split_rule_it_does_not_read():
    """A long-tailed run (data.imbalance logged) draws its split by USB's rule and reads no data.split_rule (logged
    at its default 'official'): the note names the imbalance, each field's values over the table's runs (the
    columns differ in gamma_u), numbers as in a YAML; a balanced run beside it keeps its split rule."""
    frame = runs()
    ratio = {"c10-40": "10.0", "c10-250": "-10.0", "c100-400": "1.0"}
    lt = frame["cell"].str.contains("backbone=cnn13")
    frame["param.data.split_rule"] = "official"
    frame["param.data.imbalance"] = None
    for field, value in (("labeled_head", "20"), ("labeled_ratio", "10.0"), ("unlabeled_head", "100"),
                         ("rule", "int")):
        frame[f"param.data.imbalance.{field}"] = frame["cell"].where(~lt, value).where(lt, None)
    frame["param.data.imbalance.unlabeled_ratio"] = [ratio[c.split(",")[1].split("=")[1]] if t else None
                                                     for c, t in zip(frame["cell"], lt)]
    report = validate_report(SPEC)
    md = render_markdown(build_table_data(report.tables[0], report.axes, report.folds, frame, "final"))
    assert ("split rule: official, long-tailed (data.imbalance: labeled_head 20, labeled_ratio 10, "
            "unlabeled_head 100, unlabeled_ratio 10/-10, rule int).") in md, md
    only_lt = build_table_data(report.tables[0], report.axes, report.folds, frame[lt], "final")
    assert "split rule: long-tailed (data.imbalance: labeled_head 20" in render_markdown(only_lt)
    assert "official" not in render_latex(only_lt)
