"""FreeMatch's self-adaptive thresholds and fairness term against the paper's formulas, worked by hand (the
step-for-step equality with USB is tests/mutexmatch/algorithms/usb/test_freematch_lockstep.py)."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.algorithms import build_algorithm
from mutexmatch.algorithms.base import TrainContext
from mutexmatch.algorithms.freematch import SelfAdaptiveThresholds, fairness_loss


def test_thresholds_update_with_the_batch_before_masking():
    sat = SelfAdaptiveThresholds(num_classes=2, momentum=0.5)
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    mask = sat.mask(probs)
    # tau_1 = 0.5 * 1/2 + 0.5 * mean(0.9, 0.6, 0.7); p~_1 = 0.5 * 1/2 + 0.5 * mean p; h~_1 from Hist = (2/3, 1/3)
    tau = 0.5 * 0.5 + 0.5 * (0.9 + 0.6 + 0.7) / 3
    p_model = torch.tensor([0.5 * 0.5 + 0.5 * 0.6, 0.5 * 0.5 + 0.5 * 0.4])
    assert sat.time_p.item() == pytest.approx(tau)
    assert torch.allclose(sat.p_model, p_model)
    assert torch.allclose(sat.label_hist, torch.tensor([0.5 * 0.5 + 0.5 * 2 / 3, 0.5 * 0.5 + 0.5 / 3]))
    local = p_model / p_model.max()                         # tau_t(c) = MaxNorm(p~_t)(c) tau_t
    expected = [float(probs[i].max() >= tau * local[probs[i].argmax()]) for i in range(3)]
    assert mask.tolist() == expected == [1.0, 0.0, 1.0]


def test_fairness_is_minus_the_cross_entropy_of_the_normalised_ratios_over_masked_rows():
    logits_s = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]], requires_grad=True)
    mask = torch.tensor([1.0, 1.0, 0.0])
    p_model, hist = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.4, 0.4, 0.2])
    loss = fairness_loss(logits_s, mask, p_model, hist)
    probs = torch.softmax(logits_s[:2], dim=1)
    target = p_model / hist / (p_model / hist).sum()
    h_bar = torch.tensor([0.5, 0.5, 0.0])                   # argmax of the masked rows: classes 0 and 1
    ratio = probs.mean(0) * torch.tensor([2.0, 2.0, 0.0])   # 1/h-bar, 0 where h-bar = 0
    assert loss.item() == pytest.approx((target * torch.log(ratio / ratio.sum() + 1e-12)).sum().item(), rel=1e-6)
    loss.backward()
    assert logits_s.grad[2].abs().sum() == 0 and logits_s.grad[:2].abs().sum() > 0   # masked-out rows: no gradient


def test_fairness_is_zero_with_a_finite_gradient_when_no_row_is_masked():
    logits_s = torch.randn(4, 3, requires_grad=True)
    loss = fairness_loss(logits_s, torch.zeros(4), torch.full((3,), 1 / 3), torch.full((3,), 1 / 3))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits_s.grad, torch.zeros(4, 3))


def test_the_fairness_term_is_weighted_into_the_loss_and_state_round_trips():
    alg = build_algorithm("freematch", {"lambda_f": 0.5}, TrainContext.synthetic(3))
    assert alg.term_weights() == {"sup": 1.0, "p": 1.0, "fair": 0.5} and alg.dist_align is None
    alg.sat.mask(torch.softmax(torch.randn(5, 3), dim=1))
    other = build_algorithm("freematch", {"lambda_f": 0.5}, TrainContext.synthetic(3))
    other.load_state_dict(alg.state_dict())
    assert torch.equal(other.sat.p_model, alg.sat.p_model) and torch.equal(other.sat.time_p, alg.sat.time_p)
    with pytest.raises(ValueError, match="freematch state p_model: shape \\(3,\\) does not match \\(4,\\)"):
        build_algorithm("freematch", {}, TrainContext.synthetic(4)).load_state_dict(alg.state_dict())
    with pytest.raises(ValueError, match="algorithm.dist_align"):
        build_algorithm("freematch", {"dist_align": True}, TrainContext.synthetic(3))
