"""SoftMatch's truncated-Gaussian weights and uniform alignment against the paper's formulas, worked by hand (the
step-for-step equality with USB is tests/mutexmatch/algorithms/usb/test_softmatch_lockstep.py)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mutexmatch.algorithms import StepInputs, build_algorithm
from mutexmatch.algorithms.base import TrainContext
from mutexmatch.algorithms.softmatch import TruncatedGaussian


def test_weight_is_one_above_the_mean_and_a_gaussian_below_it():
    g = TruncatedGaussian(num_classes=2, momentum=0.5, n_sigma=2.0)
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    w = g(probs)
    conf = torch.tensor([0.9, 0.6, 0.7])
    mu = 0.5 * 0.5 + 0.5 * conf.mean().item()               # mu_1 = m mu_0 + (1 - m) mean max p, mu_0 = 1/C
    var = 0.5 * 1.0 + 0.5 * conf.var(unbiased=True).item()  # sigma_1^2 likewise, sigma_0^2 = 1
    assert g.mu.item() == pytest.approx(mu) and g.var.item() == pytest.approx(var)
    expected = [1.0 if c >= mu else math.exp(-(c - mu) ** 2 / (2 * var / 4)) for c in conf.tolist()]
    assert w.tolist() == pytest.approx(expected)
    assert w[0] == 1.0 and w[1] < 1.0


def test_uniform_alignment_is_the_ema_alignment_piece_with_usbs_quotient():
    """UA: E[p^w] starts at the first batch mean, p^w * (1/C + 1e-6) / (E[p^w] + 1e-6), renormalised; with
    dist_uniform false the target is the EMA of the labeled predictions from 1/C."""
    alg = build_algorithm("softmatch", {"ema_p": 0.5}, TrainContext.synthetic(2))
    probs = torch.tensor([[0.9, 0.1], [0.5, 0.5]])
    aligned = alg.alignment(probs, probs[:1])
    raw = probs * (0.5 + 1e-6) / (torch.tensor([0.7, 0.3]) + 1e-6)
    assert torch.allclose(alg.alignment.running_mean, torch.tensor([0.7, 0.3]))
    assert torch.allclose(aligned, raw / raw.sum(1, True))
    labeled = build_algorithm("softmatch", {"ema_p": 0.5, "dist_uniform": False}, TrainContext.synthetic(2))
    labeled.alignment(probs, torch.tensor([[1.0, 0.0]]))
    assert torch.allclose(labeled.alignment.target(), torch.tensor([0.75, 0.25]))


class Head(nn.Module):
    def tpc(self, feats: torch.Tensor) -> torch.Tensor:
        return feats


def test_pseudo_labels_come_from_the_unaligned_probabilities():
    """UA only shapes the weights: a row whose aligned argmax differs keeps the raw argmax as its pseudo-label."""
    alg = build_algorithm("softmatch", {}, TrainContext.synthetic(2))
    logits_w = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.2, 0.0]])   # E[p^w] leans to class 0
    feats = torch.cat([torch.zeros(1, 2), logits_w, torch.zeros(4, 2)]).requires_grad_()
    out = alg.compute(Head(), StepInputs(feats=feats, num_lb=1, num_ulb=4, targets_lb=torch.tensor([0]),
                                         ulb_idx=torch.arange(4), step=0))
    aligned = alg.alignment(torch.softmax(logits_w, 1))
    assert aligned[3].argmax() == 1 and out.pseudo_label.tolist() == [0, 0, 0, 0]


def test_state_round_trips_before_and_after_the_first_batch():
    alg, other = (build_algorithm("softmatch", {}, TrainContext.synthetic(3)) for _ in range(2))
    other.load_state_dict(alg.state_dict())
    alg.weighting(alg.alignment(torch.softmax(torch.randn(5, 3), 1)))
    other.load_state_dict(alg.state_dict())
    assert torch.equal(other.alignment.running_mean, alg.alignment.running_mean)
    assert torch.equal(other.weighting.var, alg.weighting.var) and torch.equal(other.weighting.mu, alg.weighting.mu)
    with pytest.raises(ValueError, match=r"dist_align state: history of shape \(1, 3\) does not match \(1, 4\)"):
        build_algorithm("softmatch", {}, TrainContext.synthetic(4)).load_state_dict(alg.state_dict())
    with pytest.raises(ValueError, match="algorithm.n_sigma"):
        build_algorithm("softmatch", {"n_sigma": 0.0}, TrainContext.synthetic(3))
