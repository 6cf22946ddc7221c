"""Issue 41 item 2: the class-wise scores are metrics like the others: a report table may show any of them,
``val/balanced_acc`` is a search objective (a test metric never is), and each has its twin in % for the UI."""

from __future__ import annotations

import copy

import pytest

from mutexmatch import metrics as M
from orchestration import contract
from orchestration.contract.layout import LayoutError, validate_report
from orchestration.spec.models import SpecError
from orchestration.spec.sweepfile import parse_spec
from tests.orchestration.contract.test_layout import spec
from tests.orchestration.test_spec import BASE


@pytest.mark.parametrize("metric", [M.TEST_BALANCED_ACC, M.VAL_BALANCED_ACC, M.TEST_MACRO_F1, *M.GROUP_ACC.values(),
                                    "test/recall/0", "test/recall/37"])
def test_a_table_may_show_any_class_wise_score(metric):
    assert validate_report(spec(metric=metric)).tables[0].metric == metric


@pytest.mark.parametrize("metric", ["test/recall/x", "test/recall/-1", "test/recall/07", "test/recall",
                                    "test/balanced"])
def test_a_misspelt_class_wise_score_is_refused(metric):
    with pytest.raises(LayoutError, match="is not a metric the trainer logs"):
        validate_report(spec(metric=metric))


def test_validation_balanced_accuracy_is_a_search_objective_and_the_test_one_is_not(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["search"]["metric"] = M.VAL_BALANCED_ACC
    assert parse_spec(raw, tmp_path).search.metric == "val/balanced_acc"
    raw["search"]["metric"] = M.TEST_BALANCED_ACC
    with pytest.raises(SpecError, match="search.metric='test/balanced_acc': must be a validation metric"):
        parse_spec(raw, tmp_path)


def test_each_class_wise_score_has_its_twin_in_percent_and_a_class_recall_none():
    logged = contract.with_percent({M.TEST_BALANCED_ACC: 0.5, M.GROUP_ACC["tail"]: 0.125, "test/recall/3": 0.25})
    assert logged["test/balanced_acc_pct"] == 50.0 and logged["test/tail_acc_pct"] == 12.5
    assert "test/recall/3_pct" not in logged
