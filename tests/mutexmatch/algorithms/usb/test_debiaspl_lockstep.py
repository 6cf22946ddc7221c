"""FixMatch + DebiasPL (form usb) equals USB's ``class (DebiasPL, FixMatch)`` step for step: loss, terms, every
gradient, BN statistics, the mask and the debiased pseudo-labels, the class prior p^ and the prior its margin reads
(set by USB's before_train_step hook), with USB's quirks exercised: debiaspl_tau 1.0 (its margin stays at 0.4) and
a model-EMA momentum (0.95) other than the prior's (0.9), on a long-tailed labeled pool."""
from __future__ import annotations

import torch

from .test_fixmatch_lockstep import FixMatchLockstep


class DebiasPLLockstep(FixMatchLockstep):
    imb_name = usb_imb_name = "debiaspl"
    imb_params = {"form": "usb", "tau": 1.0, "ema_p": 0.9, "usb_ema_m": 0.95}
    usb_args = {**FixMatchLockstep.usb_args, "debiaspl_tau": 1.0, "debiaspl_ema_p": 0.9, "ema_m": 0.95}
    lb_counts = (8, 4, 2, 1)
    batchnorm = True
    steps = 8

    def before_usb_step(self, usb) -> None:
        usb.hooks_dict["NORMAL"].before_train_step(usb)     # DebiasPLHook (USB's timer hook needs CUDA events)

    def state(self, ours, usb) -> dict:
        return {"p_hat": (ours.p_hat, usb.p_hat), "margin prior": (ours.p_start, usb.consistency_loss.p_hat)}


def test_debiaspl_usb_form_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(DebiasPLLockstep())
    masks = torch.cat([r.ours.mask for r in records])
    assert 0 < masks.mean() < 1
