"""Π-Model equals USB's step for step: three forwards, BatchNorm statistics from the labeled batch only, the ramp-up
(the harness is conftest.py)."""
from __future__ import annotations

import torch

from .conftest import separate_step


class PiModelLockstep:
    name = usb_name = "pimodel"
    ours_params = {"lambda_u": 10.0, "unsup_warm_up": 0.5}
    usb_args = {"ulb_loss_ratio": 10.0, "unsup_warm_up": 0.5}
    terms = {"sup": "train/sup_loss", "mse": "train/unsup_loss"}
    logit_scale = 3.0
    steps = 8           # the ramp reaches 1 at step 4 of 8
    batchnorm = True    # running statistics compared every step: only the labeled forward may move them
    min_mixed = 0       # no mask

    def our_step(self, alg, model, v, step):
        # USB's x_ulb_s of the Π-Model is a second weak view (its dataset: self.transform twice)
        return separate_step(alg, model, v, step, {"lb": v.x_lb, "weak": v.x_ulb_w, "weak2": v.x_ulb_s})

    def state(self, ours, usb) -> dict:
        return {}


def test_pimodel_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(PiModelLockstep())
    for i, r in enumerate(records):
        torch.testing.assert_close(r.ours.loss, r.ours.terms["sup"] + 10.0 * min(i / 4, 1.0) * r.ours.terms["mse"])
    assert all(r.ours.terms["mse"] > 0 for r in records)
