"""``validate_layout``: tables and figures may name only the axes and levels the YAML defines."""

from __future__ import annotations

import copy

import pytest

from orchestration.contract.layout import (CurvesFigure, LayoutError, PublishedValue, TableLayout, cell_id,
                                          parse_axes, parse_published, sensitivity_x, validate_layout, validate_report)

AXES = {
    "method": {"fixmatch": {"algorithm": {"name": "fixmatch"}}, "mutexmatch": {"algorithm": {"name": "mutexmatch"}}},
    "setting": {"c10-40": {"data": {"num_labels": 40}}, "c10-250": {"data": {"num_labels": 250}}},
    "k": {3: {"algorithm": {"k": 3}}, 6: {"algorithm": {"k": "0.6C"}}},     # YAML int level names
    "backbone": {"wrn": {"model": {"backbone": "wrn28_2"}}},
}
TABLE = {
    "id": "main", "caption": "c", "rows": "method", "columns": "setting", "where": {"k": 6},
    "row_labels": {"fixmatch": "FixMatch"}, "published": {"mutexmatch": {"c10-40": "93.22±2.52"}},
    "paired": {"a": "mutexmatch", "b": "fixmatch"},
}


def spec(**table_changes) -> dict:
    table = copy.deepcopy(TABLE)
    for key, value in table_changes.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return {"name": "x", "axes": copy.deepcopy(AXES), "tables": [table]}


def test_valid_layout_resolves_cells_and_defaults():
    (table,) = validate_layout(spec())
    assert isinstance(table, TableLayout)
    axes = parse_axes(spec())
    assert list(axes["k"]) == ["3", "6"]                       # level names as the tags hold them
    assert table.where == {"k": "6"} and table.protocol == "best" and table.metric == "test/acc"
    cell = table.cell(axes, None, "mutexmatch", "c10-40")
    assert cell == {"method": "mutexmatch", "setting": "c10-40", "k": "6", "backbone": "wrn"}
    assert cell_id(cell, axes) == "method=mutexmatch,setting=c10-40,k=6,backbone=wrn"
    assert table.published_values(axes) == {(None, "mutexmatch", "c10-40"): PublishedValue(93.22, 2.52)}
    assert [(p.a, p.b) for p in table.paired] == [("mutexmatch", "fixmatch")]
    report = validate_report(spec())
    # no `figures`: one learning-curve figure per table, over the table's cells
    (fig,) = report.figures
    assert isinstance(fig, CurvesFigure) and fig.id == "curves-main" and len(fig.cells) == 4
    assert report.folds == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("changes, message", [
    ({"rows": "methd"}, "tables[0](main).rows='methd': not an axis; axes: method, setting, k, backbone"),
    ({"columns": "method"}, "must be different axes"),
    ({"where": None}, "tables[0](main).where: axis 'k' has 2 levels (3, 6) and is not laid out by the table"),
    ({"where": {"k": 5}}, "tables[0](main).where.k='5': not a level of axis 'k'; levels: 3, 6"),
    ({"row_labels": {"fixmach": "F"}}, "row_labels='fixmach': not a level of axis 'method'"),
    ({"row_levels": ["mutexmatch"]}, "paired[0].b='fixmatch': not a row of the table; rows: mutexmatch"),
    ({"column_groups": {"CIFAR-10": ["c10-40", "c10-4000"]}},
     "column_groups='c10-4000': not a level of axis 'setting'"),
    ({"published": {"mutexmatch": {"c10-4000": 90}}},
     "published.mutexmatch.c10-4000: not a column of the table; columns: c10-40, c10-250"),
    ({"published": {"comatch": {"c10-40": 90}}}, "published.comatch: not a row of the table"),
    ({"published": {"mutexmatch": {"c10-40": "93.22 pm 2.52"}}},
     "published.mutexmatch.c10-40='93.22 pm 2.52': must be a number or a string like \"93.22±2.52\""),
    ({"paired": {"a": "fixmatch", "b": "fixmatch"}}, "paired[0]: a and b are both 'fixmatch'"),
    ({"protocol": "last"}, "tables[0].protocol='last': Input should be 'best', 'final' or 'median20'"),
    ({"id": "main table"}, "tables[0].id='main table': must use only letters, digits, `_` and `-`"),
    ({"colour": "red"}, "tables[0].colour: unknown key"),
])
def test_bad_table_layout_names_the_field(changes, message):
    with pytest.raises(LayoutError) as err:
        validate_layout(spec(**changes))
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("figure, message", [
    ({"type": "heatmap", "cell": {"method": "mutexmatch"}}, "must name a full cell; missing axes: setting, k"),
    ({"type": "sensitivity", "axis": "k", "series": "method"},
     "figures[0].where: axis 'setting' has 2 levels; fix one"),
    ({"type": "sensitivity", "axis": "k", "param": "algorithm.tau", "where": {"setting": "c10-40"}},
     "figures[0].param='algorithm.tau': levels 3, 6 of axis 'k' do not set it"),
    ({"type": "curves", "cells": [{"method": "comatch"}]}, "figures[0].cells[0].method='comatch': not a level"),
    ({"type": "pie"}, "figures[0]="),
])
def test_bad_figure_layout_names_the_field(figure, message):
    s = spec()
    s["figures"] = [figure]
    with pytest.raises(LayoutError) as err:
        validate_report(s)
    assert message in str(err.value)


def test_a_loss_term_metric_is_checked_against_the_declared_terms_where_they_are_known():
    """train/<term>: with the algorithms' terms (the sweep at launch) only a declared one; without them (the report,
    which never imports the trainer) any well-formed term name, which the build checks against what runs logged."""
    s = spec(metric="train/sepp")
    with pytest.raises(LayoutError, match=r"tables\[0\]\(main\)\.metric: 'train/sepp' is not a metric the trainer "
                                          r"logs; did you mean 'train/sep'\?"):
        validate_report(s, terms=("sup", "sep", "p", "n"))
    assert validate_report(s).tables[0].metric == "train/sepp"
    assert validate_report(spec(metric="train/ab1"), terms=("sup", "p", "ab1")).tables[0].metric == "train/ab1"
    for bad in ("train/Sep", "test/accc"):
        with pytest.raises(LayoutError, match="is not a metric the trainer logs"):
            validate_report(spec(metric=bad))


def test_sensitivity_x_values_from_the_level_overrides():
    s = spec()
    s["figures"] = [{"type": "sensitivity", "axis": "k", "where": {"setting": "c10-40"}, "series": "method"}]
    (fig,) = validate_report(s).figures
    assert fig.id == "sensitivity0"
    # `param` left out: each level overrides exactly one key (algorithm.k), whose values are x
    assert sensitivity_x(fig, parse_axes(s)) == {"3": 3, "6": "0.6C"}


def test_sensitivity_param_required_when_levels_override_several_keys():
    s = spec()
    s["axes"]["k"][6] = {"algorithm": {"k": "0.6C", "tau": 0.9}}
    s["figures"] = [{"type": "sensitivity", "axis": "k", "where": {"setting": "c10-40"}, "series": "method"}]
    with pytest.raises(LayoutError, match=r"figures\[0\]\.param: axis 'k' levels override \['algorithm\.k', "
                                          r"'algorithm\.tau'\]; name the swept config key with `param: "):
        validate_report(s)
    s["figures"][0]["param"] = "algorithm.tau"
    with pytest.raises(LayoutError, match=r"figures\[0\]\.param='algorithm\.tau': levels 3 of axis 'k' do not"):
        validate_report(s)
    s["figures"][0]["param"] = "algorithm.k"
    assert sensitivity_x(validate_report(s).figures[0], parse_axes(s)) == {"3": 3, "6": "0.6C"}


def test_paired_accepts_a_list_and_yaml_number_levels():
    s = spec(rows="k", columns="setting", where={"method": "mutexmatch"}, row_labels=None, published=None,
             paired=[{"a": 6, "b": 3}, {"a": 3, "b": 6}])
    (table,) = validate_layout(s)
    assert [(p.a, p.b) for p in table.paired] == [("6", "3"), ("3", "6")]


def test_duplicate_ids_and_row_groups_published():
    s = spec()
    s["figures"] = [{"type": "curves", "id": "main"}]
    with pytest.raises(LayoutError, match="main used twice"):
        validate_report(s)
    s = spec(rows="method", columns="setting", row_groups="k", where={}, paired=None,
             published={"6": {"mutexmatch": {"c10-40": 91.5}}, "4": {"mutexmatch": {"c10-40": 1}}})
    with pytest.raises(LayoutError, match=r"published='4': not a level of axis 'k'; levels: 3, 6"):
        validate_layout(s)
    s["tables"][0]["published"].pop("4")
    (table,) = validate_layout(s)
    assert table.published_values(parse_axes(s)) == {("6", "mutexmatch", "c10-40"): PublishedValue(91.5, None)}


@pytest.mark.parametrize("raw, parsed", [
    ("93.22±2.52", PublishedValue(93.22, 2.52)), ("93.22 +- 2.5", PublishedValue(93.22, 2.5)),
    (71, PublishedValue(71.0, None)), ("-1.5", PublishedValue(-1.5, None)),
])
def test_parse_published(raw, parsed):
    assert parse_published(raw, "published.a.b") == parsed


def test_parse_published_rejects():
    for bad in ("—", True, None, "93.22±"):
        with pytest.raises(LayoutError, match=r"published\.a\.b="):
            parse_published(bad, "published.a.b")


def test_spec_level_errors():
    with pytest.raises(LayoutError, match=r"axes=None: must be a non-empty mapping"):
        validate_layout({"name": "x"})
    with pytest.raises(LayoutError, match=r"name=None: must be a non-empty string"):
        validate_layout({"axes": AXES})
    with pytest.raises(LayoutError, match=r"folds=\[\]: must be a non-empty list of integers"):
        validate_layout({"name": "x", "axes": AXES, "folds": []})
    assert validate_layout({"name": "x", "axes": AXES}) == []


@pytest.mark.parametrize("ids, clash", [
    (["index"], "tables(index).id='index': the report writes its own index.md"),
    (["report"], "tables(report).id='report': the report writes its own report.tex"),
    (["main", "main_folds"], "tables(main_folds).id='main_folds': tables(main) writes main_folds.md"),
])
def test_ids_that_would_write_over_the_reports_own_files_are_refused(ids, clash):
    """Finding #20: a table `index` or `report` replaced the report's own index.md / report.tex."""
    s = spec()
    s["tables"] = [{**copy.deepcopy(TABLE), "id": i} for i in ids]
    with pytest.raises(LayoutError) as err:
        validate_report(s)
    assert clash in str(err.value) and "choose another id" in str(err.value), str(err.value)


def test_a_figure_named_report_is_refused():
    s = spec()
    s["figures"] = [{"type": "curves", "id": "report"}]
    with pytest.raises(LayoutError, match=r"figures\(report\).id='report': the report writes its own report.pdf"):
        validate_report(s)
