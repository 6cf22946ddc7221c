"""FixMatch + TRAS equals USB's (``class (TRAS, FixMatch)``) step for step: loss, every term (TRAS's
``train/tras_loss``), every gradient including the auxiliary head's (none during the warm-up, on both sides),
BatchNorm's running statistics, FixMatch's mask and pseudo-labels (on the logit-adjusted probabilities from the first
step), TRAS's own mask and pseudo-labels, its prior la and transfer strength T, on a long-tailed labeled pool
(8, 4, 2, 1 a class), over TRAS's warm-up switch: USB's epochs of 1,024 steps, ``warmup_epochs`` 1, both sides
started at iteration 1021 (1021-1023 warm-up, 1024-1026 TRAS)."""
from __future__ import annotations

import torch
from torch import nn

from .conftest import attach_aux_head
from .test_fixmatch_lockstep import FixMatchLockstep


class TRASFixMatchLockstep(FixMatchLockstep):
    imb_name = usb_imb_name = "tras"
    imb_params = {"warmup_epochs": 1, "a": 2.0, "b": 2.0, "tro": 1.0, "epoch_steps": 1024}
    usb_args = {**FixMatchLockstep.usb_args, "p_cutoff": 0.7, "tras_warmup_epochs": 1, "tras_A": 2, "tras_B": 2,
                "tras_tro": 1.0, "epoch": 4}
    ours_params = {**FixMatchLockstep.ours_params, "tau": 0.7}
    terms = {**FixMatchLockstep.terms, "tras": "train/tras_loss"}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 6
    batchnorm = True
    head_scale = 8.0
    logit_scale = 3.0

    def wrap(self, ours_net: nn.Module, usb, names: dict[str, str]):
        """Our TRAS head (attached as the trainer attaches it) and USB's TRASNet around the model it was given, whose
        auxiliary head takes our weights; ``model.module`` is what USB's train_step reads (DDP's)."""
        names = attach_aux_head(self, ours_net, usb, names, "tras")
        with torch.no_grad():     # the head's confidences around tau, as logit_scale puts the TPC's (synced to USB's)
            ours_net.heads["tras"].weight.mul_(self.head_scale)
        step = usb.train_step

        def logged_step(**kwargs):   # USB logs no train/tras_loss during the warm-up; ours logs 0 (checked below)
            out, log = step(**kwargs)
            return out, {"train/tras_loss": 0.0, **log}
        usb.train_step = logged_step
        return usb.model, names

    def usb_mask(self, rec):
        return rec.usb_hooks["masking.calls"][0]          # FixMatch's; TRAS's own (after the warm-up) is the second

    def usb_targets(self, rec):
        return rec.usb_hooks["gen_ulb_targets.calls"][0]

    def state(self, ours, usb) -> dict:
        return {"la": (ours.tras_la, usb.la), "T": (ours.tras_strength, usb.T_logit)}


def test_fixmatch_tras_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(TRASFixMatchLockstep())
    warm, tras = records[:3], records[3:]
    assert all(r.ours.terms["tras"] == 0 and not r.ours.extra for r in warm)
    assert all(r.ours.terms["tras"] > 0 for r in tras)
    for r in tras:     # TRAS's own mask and pseudo-labels: USB's second masking / pseudo-labelling call of a step
        assert torch.equal(r.ours.extra["tras_mask"], r.usb_hooks["masking.calls"][1])
        assert torch.equal(r.ours.extra["tras_pseudo_label"], r.usb_hooks["gen_ulb_targets.calls"][1])
    assert 0 < torch.cat([r.ours.extra["tras_mask"] for r in tras]).mean() < 1
