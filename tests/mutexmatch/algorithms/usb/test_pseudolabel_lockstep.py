"""Pseudo-Label equals USB's step for step, ramp-up included (the harness is conftest.py), with a BatchNorm in the
backbone: USB's two forwards (the labeled batch updating the running statistics, the weak batch normalised by its own
and frozen) are ours since issue 32; the one concatenated forward before it fails this test (loss, gradients and the
running statistics differ)."""
from __future__ import annotations

import pytest
import torch



class PseudoLabelLockstep:
    name = usb_name = "pseudolabel"
    ours_params = {"tau": 0.95, "lambda_p": 1.0, "unsup_warm_up": 0.5}
    usb_args = {"p_cutoff": 0.95, "ulb_loss_ratio": 1.0, "unsup_warm_up": 0.5}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 6.0
    steps = 8           # the ramp reaches 1 at step 4 of 8: steps 0 (weight 0), 1-3 (ramping) and 4-7 (full)
    batchnorm = True

    def state(self, ours, usb) -> dict:
        return {}


def test_pseudolabel_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(PseudoLabelLockstep())
    assert 0 < torch.cat([r.ours.mask for r in records]).mean() < 1
    # the ramp: the loss is L_sup alone at step 0 and L_sup + L_p from step 4 on
    for i, r in enumerate(records):
        weight = min(i / 4, 1.0)
        torch.testing.assert_close(r.ours.loss, r.ours.terms["sup"] + weight * r.ours.terms["p"])
    assert records[0].ours.terms["p"] > 0
