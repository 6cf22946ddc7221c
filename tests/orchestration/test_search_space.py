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
