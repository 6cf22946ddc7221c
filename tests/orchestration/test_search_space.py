"""A search may vary the parameters of an algorithm registered after the config schema was built (the next
FlexMatch, FreeMatch, …): its own ``algorithm.<param>`` is searchable like a built-in one, and validated per bound."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field

from mutexmatch.algorithms import ALGORITHMS, FixMatch, register_algorithm
from mutexmatch.params import FixMatchParams, SearchValue
from orchestration.spec.plan import build_plan
from orchestration.spec.models import SpecError
from orchestration.spec.sweepfile import parse_spec, with_sampled


class _SharpenParams(FixMatchParams):
    sharpen_t: float = Field(0.5, gt=0, le=1, description="Temperature of the sharpened pseudo-label.")


@pytest.fixture(autouse=True)
def _registered():
    """The demo algorithm exists only during these tests: the registry-parametrised tests elsewhere see the
    built-in registry."""
    @register_algorithm("search_space_demo")
    class _SharpenDemo(FixMatch):
        Params = _SharpenParams

    yield
    del ALGORITHMS["search_space_demo"]


def _spec(tmp_path, space):
    return {"name": "s", "base": {"data": {"dataset": "digits", "num_labels": 20, "root": str(tmp_path)},
                                  "model": {"backbone": "small_cnn"}, "train": {"iterations": 8, "eval_interval": 4}},
            "folds": [0], "axes": {"method": {"demo": {"algorithm": {"name": "search_space_demo"}}}},
            "search": {"metric": "val/acc", "n_trials": 2, "base": {"data": {"val_per_class": 2}}, "space": space,
                       "scheduler": {"type": "none"}}}


def test_a_newly_registered_algorithm_parameter_is_searchable(tmp_path):
    spec = parse_spec(_spec(tmp_path, {"algorithm.sharpen_t": {"type": "float", "low": 0.1, "high": 0.9}}), tmp_path)
    assert list(spec.search.space) == ["algorithm.sharpen_t"]


def test_its_bounds_are_validated_by_its_own_parameter_model(tmp_path):
    with pytest.raises(SpecError, match=r"search.space.algorithm.sharpen_t.high=1.5"):
        parse_spec(_spec(tmp_path, {"algorithm.sharpen_t": {"type": "float", "low": 0.1, "high": 1.5}}), tmp_path)


def test_an_unknown_parameter_is_still_refused(tmp_path):
    with pytest.raises(SpecError, match="algorithm.sharpen_x"):
        parse_spec(_spec(tmp_path, {"algorithm.sharpen_x": {"type": "float", "low": 0.1, "high": 0.9}}), tmp_path)


class _TemperatureParams(FixMatchParams):
    """A parameter a search samples as its logarithm: its model converts it (SearchValue), not the sweep."""

    log_t: Annotated[float, SearchValue(lambda v: round(10 ** v, 6) if isinstance(v, float) else v)] = Field(
        0.5, gt=0, le=1, description="Temperature; a searched float is its log10.")


def test_a_registered_algorithm_s_own_conversion_of_sampled_values_is_used(tmp_path):
    @register_algorithm("search_value_demo")
    class _TemperatureDemo(FixMatch):
        Params = _TemperatureParams

    try:
        raw = _spec(tmp_path, {"algorithm.log_t": {"type": "float", "low": -2.0, "high": 0.0}})
        raw["axes"]["method"]["demo"]["algorithm"]["name"] = "search_value_demo"
        spec = parse_spec(raw, tmp_path)  # bounds -2 and 0 stand for 0.01 and 1: both allowed
        study = build_plan(spec, tmp_path).searches[0]
        assert with_sampled(study.config, {"algorithm.log_t": -1.0})["algorithm"]["log_t"] == 0.1
        raw["search"]["space"]["algorithm.log_t"]["high"] = 0.5  # 10 ** 0.5 > 1
        with pytest.raises(SpecError, match=r"search.space.algorithm.log_t.high=0.5: algorithm.log_t=3.162278: "):
            parse_spec(raw, tmp_path)
    finally:
        del ALGORITHMS["search_value_demo"]


def test_an_int_space_whose_inner_values_break_a_config_rule_is_refused(tmp_path):
    """Finding #1: data.num_labels searched in [20, 60] on digits (10 classes) passed (both bounds are divisible),
    then every trial that sampled e.g. 31 failed at start, and `--max-failures -1` retried it forever."""
    with pytest.raises(SpecError) as err:
        parse_spec(_spec(tmp_path, {"data.num_labels": {"type": "int", "low": 20, "high": 60}}), tmp_path)
    message = str(err.value)
    assert ("search.space.data.num_labels: 36 of the 41 values in [20, 60] are refused, e.g. data.num_labels=21: "
            "must be divisible by the 10 classes") in message, message
    assert "type: categorical" in message and "\n" not in message
    spec = parse_spec(_spec(tmp_path, {"data.num_labels": {"type": "categorical", "choices": [20, 30, 60]}}), tmp_path)
    assert spec.search.space["data.num_labels"].choices == [20, 30, 60]


def test_a_wide_int_space_is_checked_near_its_bounds_and_across(tmp_path):
    """Beyond a few dozen values, the first and last values and a spread between them are checked."""
    with pytest.raises(SpecError, match=r"search.space.data.num_labels: \d+ of the \d+ values checked of the 491 in "
                                        r"\[10, 500\] are refused, e.g. data.num_labels=11: must be divisible"):
        parse_spec(_spec(tmp_path, {"data.num_labels": {"type": "int", "low": 10, "high": 500}}), tmp_path)
    parse_spec(_spec(tmp_path, {"train.iterations": {"type": "int", "low": 8, "high": 400}}), tmp_path)
