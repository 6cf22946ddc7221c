"""A tuned row in a table (issue 34 item 5): its parameters were searched on validation labels and no other row's
were, so it is never bold or italic, and the note says what tuning used; the other rows rank among themselves."""

from __future__ import annotations

import pandas as pd

from orchestration.contract.layout import TUNED_ROW, cell_id, validate_report
from reports.tables import build_table_data, render_markdown

AXES = {"method": {m: {"algorithm": {"name": m}} for m in ("supervised", "fixmatch", "mutexmatch")},
        "setting": {"d20": {"data": {"num_labels": 20}}}}
SEARCH = {"cells": [{"method": "mutexmatch"}], "metric": "val/best_acc", "n_trials": 4,
          "space": {"algorithm.tau": {"type": "float", "low": 0.5, "high": 0.99}}}
TABLE = {"id": "main", "rows": "method", "columns": "setting", "metric": "test/acc",
         "row_labels": {"supervised": "Supervised", "fixmatch": "FixMatch", "mutexmatch": "MutexMatch"},
         "tuned_rows": {"mutexmatch": "MutexMatch (tuned)"}}


def test_a_tuned_row_is_never_ranked_and_the_note_says_why():
    layout = validate_report({"name": "t", "axes": AXES, "folds": [0, 1], "search": SEARCH, "tables": [TABLE],
                              "figures": []})
    table = layout.tables[0]
    means = {"supervised": 50.0, "fixmatch": 80.0, "mutexmatch": 85.0, "mutexmatch" + TUNED_ROW: 95.0}
    runs = pd.DataFrame([{"cell": cell_id(table.cell(layout.axes, None, row, "d20"), layout.axes), "fold": f,
                          "value": v + f, "run_id": f"{row}{f}", "split_digest": f"s{f}"}
                         for row, v in means.items() for f in (0, 1)])
    data = build_table_data(table, layout.axes, layout.folds, runs, "best")
    marks = {r: data.marks.get((None, r, "d20")) for r in means}
    assert marks == {"supervised": None, "fixmatch": "second", "mutexmatch": "best", "mutexmatch" + TUNED_ROW: None}
    text = render_markdown(data)
    assert "| MutexMatch (tuned) | 95.50±0.71 |" in text and "| MutexMatch | **85.50±0.71** |" in text
    assert "MutexMatch (tuned): parameters searched on validation labels" in text and "never ranked" in text


def test_a_tuned_row_stands_apart_bold_says_what_it_ranks_and_each_delta_names_its_baseline():
    """Issue 40 item 6 (the quickstart's report in paper style): the tuned row sat under the bold default one with
    a higher number and no word why; the paired Δ column did not say against what."""
    from reports.tables_latex import render_latex

    table = {**TABLE, "paired": [{"a": "mutexmatch", "b": "fixmatch"}, {"a": "mutexmatch+tuned", "b": "mutexmatch"}],
             "paired_column": True}
    layout = validate_report({"name": "t", "axes": AXES, "folds": [0, 1], "search": SEARCH, "tables": [table],
                              "figures": []})
    t = layout.tables[0]
    means = {"supervised": 50.0, "fixmatch": 80.0, "mutexmatch": 85.0, "mutexmatch" + TUNED_ROW: 95.0}
    runs = pd.DataFrame([{"cell": cell_id(t.cell(layout.axes, None, row, "d20"), layout.axes), "fold": f,
                          "value": v + f * (1 + len(row) % 3), "run_id": f"{row}{f}", "split_digest": f"s{f}"}
                         for row, v in means.items() for f in (0, 1)])
    data = build_table_data(t, layout.axes, layout.folds, runs, "best")
    tex = render_latex(data).splitlines()
    tuned = next(i for i, line in enumerate(tex) if line.startswith("MutexMatch (tuned) &"))
    assert tex[tuned - 1] == r"\cmidrule{1-3}" and tex[tuned - 2].startswith(r"MutexMatch & \textbf{")
    assert tex[tuned].endswith(r"vs. MutexMatch \\") and tex[tuned - 2].endswith(r"vs. FixMatch \\")
    assert r"paired $\Delta$ ($p$)" in "\n".join(tex)      # two baselines: each cell names its own
    md = render_markdown(data)
    assert "**bold**: best, *italic*: second best per column among the rows not tuned;" in md
    assert "| MutexMatch (tuned) | 96.00±1.41 | +10.00 (n/a) vs. MutexMatch |" in md
    assert "| MutexMatch | **86.00±1.41** | +4.50 (0.0704) vs. FixMatch |" in md
