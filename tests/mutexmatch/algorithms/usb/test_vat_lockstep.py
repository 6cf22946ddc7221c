"""VAT equals USB's step for step: the noise drawn identically on both sides, the adversarial direction, the KL
and entropy terms, BatchNorm statistics from the labeled batch only, the ramp-up (the harness is conftest.py). Ours
with ``vat_probe: usb``, USB's probe length; the default ``relative`` probe is tests/mutexmatch/algorithms/test_vat.py's."""
from __future__ import annotations

import torch

from .conftest import separate_step


class VATLockstep:
    name = usb_name = "vat"
    ours_params = {"lambda_u": 1.0, "unsup_warm_up": 0.5, "vat_eps": 6.0, "lambda_ent": 0.06, "vat_probe": "usb"}
    usb_args = {"ulb_loss_ratio": 1.0, "unsup_warm_up": 0.5, "vat_eps": 6.0, "ent_loss_ratio": 0.06}
    terms = {"sup": "train/sup_loss", "vat": "train/unsup_loss", "ent": "train/loss_entmin"}
    logit_scale = 3.0
    steps = 8
    batchnorm = True
    image_views = True  # USB normalises the noise per image only for 3- or 4-dimensional inputs
    min_mixed = 0

    def our_step(self, alg, model, v, step):
        return separate_step(alg, model, v, step, {"lb": v.x_lb, "weak": v.x_ulb_w})

    def state(self, ours, usb) -> dict:
        return {}


def test_vat_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(VATLockstep())
    for i, r in enumerate(records):
        t = r.ours.terms
        torch.testing.assert_close(r.ours.loss, t["sup"] + min(i / 4, 1.0) * t["vat"] + 0.06 * t["ent"])
    assert all(r.ours.terms["vat"] > 1e-4 for r in records)   # the adversarial direction moves the prediction
