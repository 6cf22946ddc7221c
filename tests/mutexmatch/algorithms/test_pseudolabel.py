"""Pseudo-Label (mutexmatch/algorithms/pseudolabel.py): the weak view is both prediction and pseudo-label, the strong
view gets no gradient, the unlabeled weight ramps up over the run's first ``unsup_warm_up`` fraction. Equality
with USB step for step: usb/test_pseudolabel_lockstep.py."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm

from .test_adamatch import Heads


def test_weak_view_only_and_the_ramp() -> None:
    g = torch.Generator().manual_seed(0)
    alg = build_algorithm("pseudolabel", {"tau": 0.6, "unsup_warm_up": 0.5}, TrainContext.synthetic(4, 16,
                                                                                                  total_steps=100))
    feats = torch.cat([3 * torch.randn(8, 4, generator=g), 3 * torch.randn(32, 4, generator=g)]).requires_grad_()
    y = torch.randint(4, (8,), generator=g)
    losses = []
    for step in (0, 25, 50, 90):
        out = alg.compute(Heads(), StepInputs(feats=feats, num_lb=8, num_ulb=16, targets_lb=y, step=step,
                                              ulb_idx=torch.arange(16)))
        weight = min(step / 50, 1.0)
        torch.testing.assert_close(out.loss, out.terms["sup"] + weight * out.terms["p"])
        losses.append(out.loss)
    assert 0 < out.mask.mean() < 1 and out.terms["p"] > 0
    (grad,) = torch.autograd.grad(losses[-1], feats)
    assert grad[8:24].abs().sum() > 0 and torch.equal(grad[24:], torch.zeros_like(grad[24:]))   # strong: none


@pytest.mark.parametrize("warm_up", [0.0, 0.5], ids=["ramp-off", "ramp-on"])
def test_the_ramp_can_be_switched_off(warm_up) -> None:
    """unsup_warm_up 0: the unlabeled loss has its full weight lambda_p from step 0 (Lee's alpha(t) = alpha_f);
    with a ramp, step 0 trains on the labeled loss alone."""
    g = torch.Generator().manual_seed(1)
    alg = build_algorithm("pseudolabel", {"tau": 0.6, "unsup_warm_up": warm_up, "lambda_p": 2.0},
                          TrainContext.synthetic(4, 16, total_steps=100))
    feats = torch.cat([3 * torch.randn(8, 4, generator=g), 3 * torch.randn(32, 4, generator=g)])
    y = torch.randint(4, (8,), generator=g)
    out = alg.compute(Heads(), StepInputs(feats=feats, num_lb=8, num_ulb=16, targets_lb=y, step=0,
                                          ulb_idx=torch.arange(16)))
    assert out.terms["p"] > 0
    weight = 2.0 if warm_up == 0.0 else 0.0
    torch.testing.assert_close(out.loss, out.terms["sup"] + weight * out.terms["p"])
