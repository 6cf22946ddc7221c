"""FixMatch equals USB's FixMatch step for step (fixed threshold, hard pseudo-labels; the harness is conftest.py)."""
from __future__ import annotations

import torch


class FixMatchLockstep:
    name = usb_name = "fixmatch"
    ours_params = {"tau": 0.95, "lambda_p": 1.0}
    usb_args = {"p_cutoff": 0.95, "ulb_loss_ratio": 1.0, "hard_label": True}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 6.0

    def state(self, ours, usb) -> dict:
        return {}     # a fixed threshold keeps no state on either side


def test_fixmatch_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(FixMatchLockstep())
    masks = torch.cat([r.ours.mask for r in records])
    assert 0 < masks.mean() < 1
