"""SoftMatch equals USB's SoftMatch step for step: loss, gradients, the truncated-Gaussian weights, pseudo-labels
(from the unaligned p^w) and the state (UA's E[p^w] and target, the Gaussian's mu_t and sigma_t^2), with the uniform
and the labeled-EMA alignment target."""
from __future__ import annotations

import pytest
import torch


class SoftMatchLockstep:
    name = usb_name = "softmatch"
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 3.0

    def __init__(self, uniform: bool) -> None:
        self.ours_params = {"lambda_p": 1.0, "ema_p": 0.9, "n_sigma": 2.0, "dist_uniform": uniform}
        self.usb_args = {"ulb_loss_ratio": 1.0, "ema_p": 0.9, "n_sigma": 2, "dist_uniform": uniform,
                         "hard_label": True}

    def prepare(self, ours, usb, g) -> None:
        """Both sides start mid-run: a high, narrow Gaussian (from mu_0 = 1/C every weight would be 1 for many
        steps)."""
        w = usb.hooks_dict["MaskingHook"]
        ours.weighting.mu, w.prob_max_mu_t = torch.tensor(0.8), torch.tensor(0.8)
        ours.weighting.var, w.prob_max_var_t = torch.tensor(0.02), torch.tensor(0.02)

    def state(self, ours, usb) -> dict:
        da, w = usb.hooks_dict["DistAlignHook"], usb.hooks_dict["MaskingHook"]
        return {"p_model": (ours.alignment.running_mean, da.p_model), "p_target": (ours.alignment.target(), da.p_target),
                "mu": (ours.weighting.mu, w.prob_max_mu_t), "var": (ours.weighting.var, w.prob_max_var_t)}


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform-target", "labeled-target"])
def test_softmatch_equals_usb_step_for_step(usb_lockstep, uniform):
    usb_lockstep(SoftMatchLockstep(uniform))
