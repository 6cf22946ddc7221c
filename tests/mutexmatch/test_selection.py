"""The selection rules of AdaMatch, UDA, Pseudo-Label and Dash (mutexmatch/selection.py), against their papers'
formulas computed by hand. Their equality with USB's code is tests/mutexmatch/algorithms/usb/test_selection_usb.py."""
from __future__ import annotations

import math

import pytest
import torch

from mutexmatch.selection import (dash_mask, dash_targets, dash_threshold, rampup_weight, relative_confidence_mask,
                                  sharpen, tsa_mask, tsa_threshold)


def test_relative_threshold_scales_tau_by_the_labeled_confidence() -> None:
    probs_lb = torch.tensor([[0.9, 0.1], [0.7, 0.3]])          # mean max = 0.8 -> c_tau = 0.5 * 0.8 = 0.4
    probs_ulb = torch.tensor([[0.6, 0.4], [0.39, 0.61], [0.55, 0.45]])
    assert relative_confidence_mask(probs_lb, probs_ulb, 0.5).tolist() == [1.0, 1.0, 1.0]
    assert relative_confidence_mask(probs_lb, probs_ulb, 0.95).tolist() == [0.0, 0.0, 0.0]   # c = 0.76
    assert relative_confidence_mask(probs_lb, probs_ulb, 0.75).tolist() == [1.0, 1.0, 0.0]   # c = 0.6


@pytest.mark.parametrize("schedule, alpha", [("linear", lambda x: x), ("log", lambda x: 1 - math.exp(-5 * x)),
                                             ("exp", lambda x: math.exp(5 * (x - 1)))])
def test_tsa_threshold_follows_the_schedule(schedule, alpha) -> None:
    for step in (0, 250, 999, 1000):
        want = alpha(step / 1000) * (1 - 1 / 10) + 1 / 10
        assert tsa_threshold(schedule, step, 1000, 10) == pytest.approx(want)
    assert tsa_threshold("none", 0, 1000, 10) == 1.0


def test_tsa_threshold_refuses_an_unknown_schedule() -> None:
    with pytest.raises(ValueError, match="tsa_schedule='cosine': must be one of none, linear, log, exp"):
        tsa_threshold("cosine", 0, 10, 10)


def test_tsa_mask_reads_the_correct_class_not_the_most_likely_one() -> None:
    logits = torch.log(torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.4, 0.6]]))
    targets = torch.tensor([0, 1, 1])
    # eta = 0.7: row 0 (p_true 0.9) is dropped; row 1 is confidently *wrong* (p_true 0.1) and kept; row 2 kept.
    assert tsa_mask(logits, targets, 0.7).tolist() == [0.0, 1.0, 1.0]


def test_sharpen_is_a_tempered_softmax() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    p = torch.softmax(logits, 1)
    torch.testing.assert_close(sharpen(logits, 1.0), p)
    want = p ** (1 / 0.4) / (p ** (1 / 0.4)).sum()
    torch.testing.assert_close(sharpen(logits, 0.4), want)


def test_rampup_is_linear_until_the_warmup_fraction() -> None:
    assert [rampup_weight(s, 1000, 0.4) for s in (0, 200, 400, 900)] == [0.0, 0.5, 1.0, 1.0]
    assert rampup_weight(0, 1000, 0.0) == 1.0


def test_dash_threshold_decays_per_stage_down_to_rho_min() -> None:
    kw = {"gamma": 2.0, "c": 1.0, "rho_min": 0.3, "steps_per_stage": 10}
    assert [dash_threshold(s, 2.0, **kw) for s in (0, 9, 10, 25, 39)] == [2.0, 2.0, 1.0, 0.5, 0.3]


def test_dash_mask_keeps_rows_whose_own_loss_is_below_rho() -> None:
    logits = torch.tensor([[4.0, 0.0], [0.2, 0.0]])
    hard = dash_targets(logits, hard=True, temperature=0.5)
    assert hard.tolist() == [0, 0]
    losses = torch.nn.functional.cross_entropy(logits, hard, reduction="none")      # ~0.018 and ~0.598
    assert dash_mask(logits, hard, 0.1).tolist() == [1.0, 0.0]
    soft = dash_targets(logits, hard=False, temperature=0.5)
    torch.testing.assert_close(soft, torch.softmax(logits / 0.5, 1))
    soft_loss = -(soft * torch.log_softmax(logits, 1)).sum(1)
    rho = float(soft_loss.mean())
    assert dash_mask(logits, soft, rho).tolist() == (soft_loss <= rho).float().tolist()
    assert losses[0] < 0.1 < losses[1]
