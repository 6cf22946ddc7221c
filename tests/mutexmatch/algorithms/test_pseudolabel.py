"""Pseudo-Label (mutexmatch/algorithms/pseudolabel.py): the weak view is both prediction and pseudo-label, there is
no strong view, the labeled batch alone updates BatchNorm's statistics (USB's two forwards, issue 32), the unlabeled
weight ramps up over the run's first ``unsup_warm_up`` fraction. Equality with USB step for step:
usb/test_pseudolabel_lockstep.py."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm

from .test_adamatch import Heads


def _inputs(x_lb, x_w, y, step, calls=None) -> StepInputs:
    """A separate step whose backbone is the identity; ``calls`` records (view rows, update_bn) per forward."""
    def forward(x, update_bn=True):
        if calls is not None:
            calls.append((len(x), update_bn))
        return x
    return StepInputs(feats=None, num_lb=len(x_lb), num_ulb=len(x_w), targets_lb=y, step=step,
                      ulb_idx=torch.arange(len(x_w)), images={"lb": x_lb, "weak": x_w}, forward=forward)


def test_weak_view_only_and_the_ramp() -> None:
    g = torch.Generator().manual_seed(0)
    alg = build_algorithm("pseudolabel", {"tau": 0.6, "unsup_warm_up": 0.5}, TrainContext.synthetic(4, 16,
                                                                                                  total_steps=100))
    assert alg.step.views == ("lb", "weak") and alg.step.forward == "separate"    # no strong view is made
    x_lb = (3 * torch.randn(8, 4, generator=g)).requires_grad_()
    x_w = (3 * torch.randn(16, 4, generator=g)).requires_grad_()
    y = torch.randint(4, (8,), generator=g)
    losses, calls = [], []
    for step in (0, 25, 50, 90):
        out = alg.compute(Heads(), _inputs(x_lb, x_w, y, step, calls))
        weight = min(step / 50, 1.0)
        torch.testing.assert_close(out.loss, out.terms["sup"] + weight * out.terms["p"])
        losses.append(out.loss)
    assert calls[:2] == [(8, True), (16, False)]     # labeled: BatchNorm statistics updated; weak: frozen
    assert 0 < out.mask.mean() < 1 and out.terms["p"] > 0
    grad_lb, grad_w = torch.autograd.grad(losses[-1], (x_lb, x_w))
    assert grad_lb.abs().sum() > 0 and grad_w.abs().sum() > 0


@pytest.mark.parametrize("warm_up", [0.0, 0.5], ids=["ramp-off", "ramp-on"])
def test_the_ramp_can_be_switched_off(warm_up) -> None:
    """unsup_warm_up 0: the unlabeled loss has its full weight lambda_p from step 0 (Lee's alpha(t) = alpha_f);
    with a ramp, step 0 trains on the labeled loss alone."""
    g = torch.Generator().manual_seed(1)
    alg = build_algorithm("pseudolabel", {"tau": 0.6, "unsup_warm_up": warm_up, "lambda_p": 2.0},
                          TrainContext.synthetic(4, 16, total_steps=100))
    x_lb, x_w = 3 * torch.randn(8, 4, generator=g), 3 * torch.randn(16, 4, generator=g)
    y = torch.randint(4, (8,), generator=g)
    out = alg.compute(Heads(), _inputs(x_lb, x_w, y, 0))
    assert out.terms["p"] > 0
    weight = 2.0 if warm_up == 0.0 else 0.0
    torch.testing.assert_close(out.loss, out.terms["sup"] + weight * out.terms["p"])
