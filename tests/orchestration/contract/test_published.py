"""The paper's printed numbers in a layout (``orchestration.contract.published``): values with cell marks, quoted
rows (rows the paper prints and we do not run) and their footnotes, checked against the table before any run is read."""

from __future__ import annotations

import copy

import pytest

from orchestration.contract.layout import LayoutError, PublishedValue, parse_axes, parse_published, validate_report
from orchestration.contract.published import parse_quoted

AXES = {
    "method": {"fixmatch": {"algorithm": {"name": "fixmatch"}}, "mutexmatch": {"algorithm": {"name": "mutexmatch"}}},
    "setting": {"c10-40": {}, "c10-250": {}},
    "backbone": {"cnn13": {}, "wrn": {}},
}
QUOTED = [{"label": "MixMatch", "mark": "†", "values": {"c10-40": "52.46±11.50", "c10-250": "-"}},
          {"label": "EnAET", "mark": "‡", "values": {"c10-40": "93.05", "c10-250": 94.65}},
          {"label": "CoMatch", "mark": "*", "level": "comatch",
           "values": {"c10-40": "93.21±1.55*", "c10-250": "94.08±0.31"}}]
FOOTNOTES = {"†": "reported in FixMatch", "‡": "reported in EnAET", "*": "the authors' reimplementation"}


def spec(axes=AXES, **changes) -> dict:
    table = {"id": "t", "rows": "method", "columns": "setting", "where": {"backbone": "wrn"},
             "published": {"mutexmatch": {"c10-40": "93.22±2.52"}},
             "quoted_rows": copy.deepcopy(QUOTED), "footnotes": dict(FOOTNOTES)}
    for key, value in changes.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return {"name": "x", "axes": copy.deepcopy(axes), "tables": [table]}


def quoted(i: int, **changes) -> list[dict]:
    rows = copy.deepcopy(QUOTED)
    rows[i].update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        rows[i].pop(key)
    return rows


@pytest.mark.parametrize("raw, parsed", [
    ("65.38±0.42*", PublishedValue(65.38, 0.42, "*")), ("93.05 ‡", PublishedValue(93.05, None, "‡")),
    ("93.22±2.52", PublishedValue(93.22, 2.52)),
])
def test_a_printed_value_may_carry_the_papers_cell_mark(raw, parsed):
    assert parse_published(raw, "published.a.b") == parsed
    assert str(parsed) == raw.rstrip("*‡ ")           # the number alone: each renderer sets the mark its own way


def test_quoted_values_take_a_dash_for_an_empty_cell():
    assert parse_quoted("-", "v") is None and parse_quoted(" - ", "v") is None
    assert parse_quoted("52.46±11.50", "v") == PublishedValue(52.46, 11.5)
    with pytest.raises(LayoutError, match=r"^v='n/a': must be a number or a string like .* or \"-\" for a cell the "
                                          r"paper leaves empty$"):
        parse_quoted("n/a", "v")


def test_quoted_rows_are_printed_until_their_level_is_run():
    (table,) = validate_report(spec()).tables
    axes = parse_axes(spec())
    assert [q.label for q in table.quoted(axes, None)] == ["MixMatch", "EnAET", "CoMatch"]
    assert table.published_values(axes) == {(None, "mutexmatch", "c10-40"): PublishedValue(93.22, 2.52)}
    assert table.row_keys(axes) == ["fixmatch", "mutexmatch"]
    # the sweep gains a `comatch` level: the quoted CoMatch row is a run row, its printed numbers its paper column
    with_comatch = copy.deepcopy(AXES)
    with_comatch["method"]["comatch"] = {"algorithm": {"name": "comatch"}}
    (table,) = validate_report(spec(with_comatch)).tables
    axes = parse_axes(spec(with_comatch))
    assert [q.label for q in table.quoted(axes, None)] == ["MixMatch", "EnAET"]
    assert table.row_keys(axes) == ["fixmatch", "mutexmatch", "comatch"]
    assert (table.row_label("comatch"), table.row_mark(None, "comatch")) == ("CoMatch", "*")
    assert table.published_values(axes) == {
        (None, "mutexmatch", "c10-40"): PublishedValue(93.22, 2.52),
        (None, "comatch", "c10-40"): PublishedValue(93.21, 1.55, "*"),
        (None, "comatch", "c10-250"): PublishedValue(94.08, 0.31)}


def test_quoted_rows_sit_in_a_row_group_when_the_table_has_them():
    rows = quoted(0, group="cnn13")[:1] + [dict(r, group="wrn") for r in QUOTED[1:]]
    s = spec(where={}, row_groups="backbone", published={"wrn": {"mutexmatch": {"c10-40": "93.22±2.52"}}},
             quoted_rows=rows)
    (table,) = validate_report(s).tables
    axes = parse_axes(s)
    assert [q.label for q in table.quoted(axes, "cnn13")] == ["MixMatch"]
    assert [q.label for q in table.quoted(axes, "wrn")] == ["EnAET", "CoMatch"]


T = "tables[0](t)"


@pytest.mark.parametrize("changes, message", [
    ({"quoted_rows": quoted(0, mark="§")}, "tables[0].quoted_rows.0.mark='§': Input should be '†', '‡' or '*'"),
    ({"quoted_rows": quoted(0, label="")}, "tables[0].quoted_rows.0.label='': String should have at least 1 "
                                           "character"),
    ({"quoted_rows": quoted(0, colour="red")}, "tables[0].quoted_rows.0.colour: unknown key"),
    ({"quoted_rows": quoted(0, values=None)}, "tables[0].quoted_rows.0.values: required"),
    ({"footnotes": {"†": "reported in FixMatch", "*": "x"}},
     f"{T}.quoted_rows[1].mark='‡': the mark '‡' has no footnote; say what it means in the table's "
     "`footnotes: {\"‡\": <text>}`"),
    ({"quoted_rows": quoted(0, values={"c10-40": "52.46±11.50"})},
     f"{T}.quoted_rows[0].values: no value for c10-250; give each column the printed number, or \"-\" where the "
     "paper leaves the cell empty"),
    ({"quoted_rows": quoted(0, values={"c10-40": "1", "c10-250": "-", "c10-4000": "2"})},
     f"{T}.quoted_rows[0].values.c10-4000: not a column of the table; columns: c10-40, c10-250"),
    ({"quoted_rows": quoted(0, values={"c10-40": "52.46 pm 11.50", "c10-250": "-"})},
     f"{T}.quoted_rows[0].values.c10-40='52.46 pm 11.50': must be a number or a string like \"93.22±2.52\""),
    ({"quoted_rows": quoted(0, values={"c10-40": "-", "c10-250": "-"})},
     f"{T}.quoted_rows[0].values: every value is \"-\"; a quoted row needs at least one printed number"),
    ({"quoted_rows": quoted(0, values={"c10-40": "52.46±11.50§", "c10-250": "-"})},
     f"{T}.quoted_rows[0].values.c10-40='52.46±11.50§': must be a number"),
    ({"quoted_rows": quoted(0, group="wrn")}, f"{T}.quoted_rows[0].group='wrn': the table has no row_groups; leave "
                                              "group out"),
    ({"quoted_rows": quoted(1, label="MixMatch")},
     f"{T}.quoted_rows[1].label='MixMatch': an earlier quoted row of the same group has it"),
    ({"footnotes": dict(FOOTNOTES, **{"§": "x"})}, f"{T}.footnotes.§: not a mark; marks: †, ‡, *"),
    ({"footnotes": dict(FOOTNOTES, **{"*": " "})}, f"{T}.footnotes.*=' ': must be the footnote's text"),
    ({"quoted_rows": quoted(2, mark=None, values={"c10-40": "93.21", "c10-250": "-"})},
     f"{T}.footnotes.*: no quoted row or published value carries the mark '*'"),
    ({"published": {"mutexmatch": {"c10-40": "93.22±2.52†"}}, "footnotes": {"‡": "a", "*": "b"}},
     f"{T}.published.mutexmatch.c10-40='93.22±2.52†': the mark '†' has no footnote"),
    # a published number for a row that is neither run nor quoted stays a typo
    ({"published": {"mutexmatc": {"c10-40": "93.22±2.52"}}},
     f"{T}.published.mutexmatc: not a row of the table; rows: fixmatch, mutexmatch (a row the paper prints and the "
     "sweep does not run is a `quoted_rows` entry)"),
    # issue 33's re-pass (q-nan, q-inf, q-negstd, q-duplabel): each printed nan, -inf, Δ -239.34 or two rows of
    # one name with rc 0
    ({"quoted_rows": quoted(0, values={"c10-40": float("nan"), "c10-250": "-"})},
     f"{T}.quoted_rows[0].values.c10-40=nan: must be a finite number, as the paper prints it"),
    ({"published": {"fixmatch": {"c10-40": float("inf")}}},
     f"{T}.published.fixmatch.c10-40=inf: must be a finite number"),
    ({"published": {"fixmatch": {"c10-40": "-5.00"}}},
     f"{T}.published.fixmatch.c10-40='-5.00': the table's metric is a percentage, so a printed value lies in "
     "[0, 100] (its ± too)"),
    ({"quoted_rows": quoted(0, values={"c10-40": "250.00±3.00", "c10-250": "-"})},
     f"{T}.quoted_rows[0].values.c10-40='250.00±3.00': the table's metric is a percentage"),
    ({"quoted_rows": quoted(0, label="fixmatch")},
     f"{T}.quoted_rows[0].label='fixmatch': a run row of the table has this label too; give the quoted row another "
     "label, or `level: <that row>` if these are that row's printed numbers"),
    ({"paper": False}, f"{T}.quoted_rows: quoted rows print their numbers in the Paper sub-column, which "
                       "paper=False, value_columns=['ours', 'paper', 'delta'] hides; show it or drop the quoted rows"),
])
def test_bad_quoted_rows_and_footnotes_name_the_field(changes, message):
    with pytest.raises(LayoutError) as err:
        validate_report(spec(**changes))
    assert message in str(err.value).splitlines() or any(line.startswith(message)
                                                         for line in str(err.value).splitlines()), str(err.value)


def test_a_printed_value_outside_0_100_passes_for_a_metric_that_is_not_a_percentage():
    """Only a percentage metric bounds its printed values; a train/loss table may print 250."""
    assert validate_report(spec(metric="train/loss", published={"mutexmatch": {"c10-40": "250.00±3.00"}}))


def test_a_run_rows_numbers_are_given_once():
    """Once `comatch` is a level, a `published` entry for it beside the quoted row's values is refused."""
    axes = copy.deepcopy(AXES)
    axes["method"]["comatch"] = {}
    s = spec(axes, published={"comatch": {"c10-40": "1.00"}})
    with pytest.raises(LayoutError, match=r"^tables\[0\]\(t\)\.quoted_rows\[2\]\.level='comatch': the row also has "
                                          r"`published` numbers; give its printed numbers once, in the quoted row$"):
        validate_report(s)


def test_quoted_rows_need_their_group_in_a_grouped_table():
    s = spec(where={}, row_groups="backbone", published={})
    lines = str(pytest.raises(LayoutError, validate_report, s).value).splitlines()
    assert lines[0] == (f"{T}.quoted_rows[0].group=None: must be a level of the row_groups axis 'backbone'; "
                        "levels: cnn13, wrn")
    assert len(lines) == 3                             # one line per quoted row
