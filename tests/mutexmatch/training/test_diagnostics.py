"""mutexmatch.training.diagnostics: the step accumulator sums the algorithm's declared loss terms by name."""
from __future__ import annotations

import math

import pytest
import torch

from mutexmatch.algorithms import StepOutput
from mutexmatch.training.diagnostics import StepAccumulator

C = 3


def _out(**terms: float) -> StepOutput:
    return StepOutput(loss=torch.tensor(sum(terms.values())), terms={t: torch.tensor(v) for t, v in terms.items()})


def test_sums_exactly_the_declared_terms_and_refuses_a_missing_one():
    acc = StepAccumulator(C, torch.device("cpu"), ("sup", "ab1"))
    acc.add(_out(sup=1.0, ab1=2.0), torch.zeros(0, dtype=torch.long), step=0)
    acc.add(_out(sup=3.0, ab1=4.0), torch.zeros(0, dtype=torch.long), step=1)
    assert acc.term_means() == {"train/loss": 5.0, "train/sup": 2.0, "train/ab1": 3.0}
    with pytest.raises(KeyError, match="ab1"):
        acc.add(_out(sup=1.0), torch.zeros(0, dtype=torch.long), step=2)


def test_non_finite_names_the_term():
    acc = StepAccumulator(C, torch.device("cpu"), ("sup", "nce"))
    acc.add(_out(sup=1.0, nce=float("nan")), torch.zeros(0, dtype=torch.long), step=7)
    assert acc.non_finite() == [("loss", 7), ("nce", 7)]


def test_state_round_trips_by_name_and_a_checkpoint_of_the_fixed_list_loads():
    """A checkpoint written before terms were the algorithm's holds (loss, sup, sep, p, n) for every algorithm: the
    sums are taken by name; a term it lacks is NaN for the evaluation it was summed into (unknown), not 0."""
    acc = StepAccumulator(C, torch.device("cpu"), ("sup", "p"))
    acc.add(_out(sup=1.0, p=2.0), torch.zeros(0, dtype=torch.long), step=0)
    fresh = StepAccumulator(C, torch.device("cpu"), ("sup", "p"))
    fresh.load_state_dict(acc.state_dict())
    assert fresh.term_means() == acc.term_means() == {"train/loss": 3.0, "train/sup": 1.0, "train/p": 2.0}
    legacy = {**acc.state_dict(), "terms": torch.tensor([3.0, 1.0, 0.0, 2.0, 0.0]),
              "first_bad": torch.tensor([-1, -1, -1, 5, -1])}
    del legacy["names"]
    fixmatch = StepAccumulator(C, torch.device("cpu"), ("sup", "p"))
    fixmatch.load_state_dict(legacy)
    assert fixmatch.term_means() == acc.term_means() and fixmatch.non_finite() == [("p", 5)]
    lowconf = StepAccumulator(C, torch.device("cpu"), ("sup", "p", "ab1"))
    lowconf.load_state_dict(legacy)
    means = lowconf.term_means()
    assert means["train/sup"] == 1.0 and math.isnan(means["train/ab1"])
    empty = StepAccumulator(C, torch.device("cpu"), ("sup", "p", "ab1"))
    empty.load_state_dict({**legacy, "steps": 0})
    assert empty.term_means()["train/ab1"] == 0.0
