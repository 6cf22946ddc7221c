"""Every registered algorithm trains two steps through the Trainer at its parameters' documented edge values
(issue 33 item 10: Dash's ``warmup_steps: 0`` and ReMixMatch's ``da_target: model`` passed validation and crashed
every run).

The edges are not written here: each parameter's allowed values are probed through the config's own validation
over a ladder of candidates (``0, 1e-6, 0.5, 0.999999, 1, 1.000001, 2`` for reals, ``0..3`` for integers, both booleans, every
choice of a ``Literal``), and its smallest and largest accepted candidates are its edges. One Trainer per algorithm
and side: every parameter at its lower edge at once, then every one at its upper edge (a combination the schema
refuses is split in halves until each part validates), and one more run per middle choice of a ``Literal``. Every
run must finish its two steps with finite losses (the total and each term the algorithm declares). The whole registry runs in ``make test-heavy``; CI keeps the two
cases that crashed.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest

from mutexmatch import metrics as M
from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.config import ConfigError, parse_config
from mutexmatch.training import Callback, Trainer

REAL_LADDER = (0.0, 1e-6, 0.5, 0.999999, 1.0, 1.000001, 2.0)
INT_LADDER = (0, 1, 2, 3)


def _config(name: str, params: dict[str, Any], out: str) -> dict[str, Any]:
    return {"data": {"dataset": "digits", "num_labels": 20}, "model": {"backbone": "small_cnn"},
            "algorithm": {"name": name, **params},
            "train": {"iterations": 2, "eval_interval": 2, "batch_size": 2, "mu": 1, "num_threads": 1,
                      "progress": False}, "output_dir": out}


def _valid(name: str, params: dict[str, Any]) -> bool:
    try:
        parse_config(_config(name, params, "unused"))
        return True
    except (ConfigError, ValueError):
        return False


def _ladder(annotation: Any) -> list[Any]:
    """The candidates of a field's type (pydantic keeps a range's validator apart from the annotation)."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if annotation is bool:
        return [False, True]
    if annotation is float:
        return list(REAL_LADDER)
    return list(INT_LADDER)  # int, and a union such as k's `int | str`, whose integers are its edges here


def edge_runs(name: str) -> list[dict[str, Any]]:
    """The parameter sets to train ``name`` with: all lower edges, all upper edges, each middle Literal choice."""
    lower, upper, middles = {}, {}, []
    for field, info in ALGORITHMS[name].Params.model_fields.items():
        if field == "name":
            continue
        ladder = _ladder(info.annotation)
        accepted = [v for v in ladder if _valid(name, {field: v})]
        if not accepted:
            continue
        lower[field], upper[field] = accepted[0], accepted[-1]
        if typing.get_origin(info.annotation) is typing.Literal:
            middles += [{field: v} for v in accepted[1:-1]]
    return [*_valid_parts(name, lower), *_valid_parts(name, upper), *middles]


def _valid_parts(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    if _valid(name, params) or len(params) <= 1:
        return [params] if params else []
    items = list(params.items())
    half = len(items) // 2
    return [*_valid_parts(name, dict(items[:half])), *_valid_parts(name, dict(items[half:]))]


def _train_two_steps(name: str, params: dict[str, Any], out: str) -> dict[str, float]:
    events = []

    class Recorder(Callback):
        def on_eval(self, event):
            events.append(event)

    Trainer(parse_config(_config(name, params, out)), [Recorder()]).fit()
    (event,) = events
    losses = {M.term_metric(term) for term in (*ALGORITHMS[name].terms, M.TOTAL)}
    return {k: v for k, v in event.metrics.items() if k in losses}


def _check(name: str, tmp_path) -> None:
    for i, params in enumerate(edge_runs(name)):
        metrics = _train_two_steps(name, params, str(tmp_path / f"run{i}"))
        bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
        assert not bad, f"{name} with {params}: non-finite {bad}"


@pytest.mark.parametrize("name, params", [("dash", {"warmup_steps": 0}), ("remixmatch", {"da_target": "model"})])
def test_the_documented_values_that_crashed_train(name, params, tmp_path) -> None:
    assert _valid(name, params)
    metrics = _train_two_steps(name, params, str(tmp_path / "run"))
    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics


def test_the_edges_are_found_from_the_schema() -> None:
    low, high = edge_runs("dash")
    assert low["warmup_steps"] == 0 and low["lambda_p"] == 0.0 and low["gamma"] == 1.000001  # (1, inf)
    assert high["warmup_steps"] == 3 and high["lambda_p"] == 2.0
    remix = edge_runs("remixmatch")
    assert remix[0]["da_target"] == "uniform" and remix[1]["da_target"] == "model" and remix[1]["da_momentum"] == 0.999999
    assert remix[2:] == [{"da_target": "labeled"}]


@pytest.mark.heavy  # ~24 algorithms x 2-4 Trainers of two steps: minutes on 2 cores
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_trains_at_its_parameters_edge_values(name, tmp_path) -> None:
    _check(name, tmp_path)


def test_mixmatch_sharpen_at_a_tiny_temperature_is_the_one_hot_argmax_and_the_usual_rows_unchanged() -> None:
    import torch

    from mutexmatch.algorithms.mixmatch import sharpen

    probs = torch.tensor([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    assert torch.equal(sharpen(probs, 1e-6), torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    usual = probs ** 2.0
    assert torch.equal(sharpen(probs, 0.5), usual / usual.sum(dim=-1, keepdim=True))
