"""AdaMatch equals USB's AdaMatch step for step: EMA distribution alignment (target: labeled predictions), relative
threshold, hard pseudo-labels (the harness is conftest.py)."""
from __future__ import annotations

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
    """The alignment in use is ours, ratio ``filled`` = p(y) / max(p~(y), 1e-12); USB divides (p(y) + 1e-6) by
    (p~(y) + 1e-6). With AdaMatch's EMA estimates (never empty) the two differ by ~1e-6 relative, inside the
    comparison's float32 tolerance: the masks and pseudo-labels are equal."""
    records = usb_lockstep(AdaMatchLockstep())
    masks = torch.cat([r.ours.mask for r in records])
    assert 0 < masks.mean() < 1
    aligned = build_algorithm("adamatch", {}, TrainContext.synthetic(4, 8)).dist_align
    assert (aligned.ratio, aligned.model.estimate, aligned.target_kind) == ("filled", "ema", "model")
