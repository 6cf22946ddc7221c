"""Dash equals USB's Dash step for step after the warm-up, through a threshold stage change and the switch to hard
pseudo-labels at rho_min (the harness is conftest.py). rho_hat is given to both sides: its measurement at the end
of the warm-up (validation split, never test) is the trainer's, tested in tests/mutexmatch/algorithms/test_dash.py."""
from __future__ import annotations

import torch

RHO_INIT = 1.0


class DashLockstep:
    name = usb_name = "dash"
    steps = 12
    # USB: num_iter_per_epoch = num_train_iter / epoch = 1 step, rho adjusted every 10 epochs -> stage_steps 10
    ours_params = {"temperature": 0.5, "gamma": 3.0, "c": 1.0001, "rho_min": 0.5, "warmup_steps": 0,
                   "stage_steps": 10, "lambda_p": 1.0}
    usb_args = {"T": 0.5, "gamma": 3.0, "C": 1.0001, "rho_min": 0.5, "num_wu_iter": 0, "ulb_loss_ratio": 1.0,
                "epoch": 12}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 2.0
    lr = 0.01            # slow enough that the weak-view losses stay around rho for 12 steps

    def prepare(self, ours, usb, generator) -> None:
        """rho_hat on both sides (USB's hook reads ``algorithm.rho_init`` at its first masking)."""
        ours.set_rho_init(RHO_INIT)
        usb.rho_init = RHO_INIT

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["MaskingHook"]
        return {"rho": (ours.rho(usb.it - 1), hook.rho), "rho_init": (ours.rho_init, hook.rho_init)}


def test_dash_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(DashLockstep())
    soft = [r.ours.soft_target is not None for r in records]
    assert soft == [True] * 10 + [False] * 2          # stage 2: rho = max(1.0 * 1.0001 / 3, 0.5) = rho_min -> hard
    assert 0 < torch.cat([r.ours.mask for r in records]).mean() < 1

