"""FreeMatch equals USB's FreeMatch step for step: loss (with the fairness term L_f), gradients, masks,
pseudo-labels and the self-adaptive threshold state (tau_t, p~_t, h~_t)."""
from __future__ import annotations

import torch


class FreeMatchLockstep:
    name = usb_name = "freematch"
    ours_params = {"lambda_p": 1.0, "lambda_f": 0.5, "ema_p": 0.9}
    # A large fairness weight and a fast EMA, so L_f and the moving thresholds weigh in within a few steps.
    usb_args = {"ulb_loss_ratio": 1.0, "ent_loss_ratio": 0.5, "ema_p": 0.9, "hard_label": True}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 2.0

    def prepare(self, ours, usb, g) -> None:
        """Both sides start mid-run: a high global threshold and skewed class statistics (from 1/C they would pass
        every sample for many steps)."""
        p_model = torch.softmax(torch.randn(4, generator=g), dim=0)
        hist = torch.softmax(torch.randn(4, generator=g), dim=0)
        hook = usb.hooks_dict["MaskingHook"]
        ours.sat.time_p, hook.time_p = torch.tensor(0.8), torch.tensor(0.8)
        ours.sat.p_model, hook.p_model = p_model.clone(), p_model.clone()
        ours.sat.label_hist, hook.label_hist = hist.clone(), hist.clone()

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["MaskingHook"]
        return {"time_p": (ours.sat.time_p, hook.time_p), "p_model": (ours.sat.p_model, hook.p_model),
                "label_hist": (ours.sat.label_hist, hook.label_hist)}


def test_freematch_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(FreeMatchLockstep())
    assert all(r.ours.terms["fair"].abs() > 0 for r in records)   # the fairness term took part in every step
