"""DeFixMatch equals USB's DeFixMatch step for step: loss, the three terms (L_sup over both labeled views, L_u and
the debiasing L_anti on the labeled batch), every gradient, BatchNorm's running statistics (one forward of
[labeled weak | labeled strong | unlabeled weak | unlabeled strong]), both masks (the unlabeled one compared with
ours; the labeled one through L_anti and the gradients) and the pseudo-labels, over 8 steps."""
from __future__ import annotations

import torch


class DeFixMatchLockstep:
    name = usb_name = "defixmatch"
    ours_params = {"tau": 0.8, "lambda_p": 0.7}
    usb_args = {"p_cutoff": 0.8, "ulb_loss_ratio": 0.7, "hard_label": True}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss", "anti": "train/anti_unsup_loss"}
    logit_scale = 3.0
    steps = 8
    batchnorm = True
    labeled_strong = True

    def usb_mask(self, rec):
        """USB masks the unlabeled batch first, then the labeled one (the last ``masking`` call)."""
        return rec.usb_hooks["masking.calls"][0]

    def usb_targets(self, rec):
        return rec.usb_hooks["gen_ulb_targets.calls"][0]

    def state(self, ours, usb) -> dict:
        return {}     # a fixed threshold keeps no state on either side


def test_defixmatch_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(DeFixMatchLockstep())
    labeled_masks = torch.cat([r.usb_hooks["masking.calls"][1] for r in records])
    assert 0 < labeled_masks.mean() < 1          # L_anti's own mask is exercised, neither empty nor full
    assert all(r.ours.terms["anti"] > 0 for r in records[-4:])
