"""AdaMatch equals USB's AdaMatch step for step: EMA distribution alignment (target: labeled predictions), relative
threshold, hard pseudo-labels (the harness is conftest.py)."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import torch

from mutexmatch.algorithms import TrainContext, build_algorithm



class AdaMatchLockstep:
    name = usb_name = "adamatch"
    ours_params = {"tau": 0.95, "lambda_p": 1.0, "ema_p": 0.9}
    usb_args = {"p_cutoff": 0.95, "ulb_loss_ratio": 1.0, "hard_label": True, "T": 0.5, "ema_p": 0.9}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 3.0

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["DistAlignHook"]
        return {"p_model": (ours.dist_align.running_mean, hook.p_model),
                "p_target": (ours.dist_align.target(), hook.p_target)}


def test_adamatch_equals_usb_step_for_step(usb_lockstep):
    """The alignment's quotient is USB's by default (issue 32): (p(y) + 1e-6) / (p~(y) + 1e-6)."""
    records = usb_lockstep(AdaMatchLockstep())
    masks = torch.cat([r.ours.mask for r in records])
    assert 0 < masks.mean() < 1
    aligned = build_algorithm("adamatch", {}, TrainContext.synthetic(4, 8)).dist_align
    assert (aligned.ratio, aligned.model.estimate, aligned.target_kind) == ("usb", "ema", "model")


def test_adamatch_aligns_as_usb_when_the_model_never_predicts_a_class(usb_lockstep):
    """A confident model that never predicts class 0 (its probability ~1.5e-8 in every row, the normal state late in
    a run): the paper's quotient (``filled``, the default before issue 32) lifts that class by ~7e6, USB's epsilon
    form by ~1e5, and far fewer rows then pass tau. The default equals USB's DistAlignEMAHook (p_target "model")."""
    hooks = importlib.import_module("semilearn.algorithms.hooks")
    C, g = 10, torch.Generator().manual_seed(0)
    usb_hook = hooks.DistAlignEMAHook(C, 0.999, "model", None)
    ctx = TrainContext.synthetic(C, 64)
    ours = build_algorithm("adamatch", {}, ctx).dist_align
    filled = build_algorithm("adamatch", {"da_ratio": "filled"}, ctx).dist_align
    alg = SimpleNamespace(distributed=False, world_size=1)
    for _ in range(50):
        logits = 12 * torch.randn(64, C, generator=g)
        logits[:, 0] = logits[:, 1:].max(dim=1).values - 18.0   # class 0 is never predicted: p ~1.5e-8 per row
        probs = torch.softmax(logits, dim=1)
        probs_lb = torch.softmax(12 * torch.randn(16, C, generator=g), dim=1)   # labeled: every class
        expected = usb_hook.dist_align(alg, probs.clone(), probs_lb.clone())
        mine, paper = ours(probs, probs_lb), filled(probs, probs_lb)
        torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-7)
    confident = lambda p: (p.max(dim=1).values >= 0.95).float().mean().item()   # noqa: E731
    # measured: 0 % of the last batch's rows pass 0.95 under `filled`, 61 % under USB's form (61 % unaligned)
    assert confident(paper) < 0.1 < 0.5 < confident(mine) == confident(probs), (confident(paper), confident(mine))
