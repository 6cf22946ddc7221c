"""Mean Teacher equals USB's step for step: the EMA teacher's target (USB's ema.apply_shadow forward), both EMAs
updated after every step and compared, BatchNorm statistics from the labeled batch only, the ramp-up (the harness is
conftest.py)."""
from __future__ import annotations

import torch

from mutexmatch.training.ema import ModelEMA

from .conftest import separate_step

DECAY = 0.6   # far from 1, so the teacher differs from the student within the test's few steps


class MeanTeacherLockstep:
    name = usb_name = "meanteacher"
    ours_params = {"lambda_u": 50.0, "unsup_warm_up": 0.5}
    usb_args = {"ulb_loss_ratio": 50.0, "unsup_warm_up": 0.5, "ema_m": DECAY}
    terms = {"sup": "train/sup_loss", "mse": "train/unsup_loss"}
    logit_scale = 3.0
    steps = 8
    batchnorm = True
    min_mixed = 0

    def models(self, ours_tiny, usb_net):
        self.ema = ModelEMA(ours_tiny, DECAY)     # the trainer's EMA (TrainContext.ema_model), our teacher
        self.student = ours_tiny
        return ours_tiny, usb_net, {n: f"net.{n}" for n in ours_tiny.state_dict()}

    def prepare(self, ours, usb, g):
        from semilearn.core.utils import EMA
        usb.ema = EMA(usb.model, DECAY)          # USB's EMAHook.before_run
        usb.ema.register()

    def our_step(self, alg, model, v, step):
        return separate_step(alg, model, v, step, {"lb": v.x_lb, "weak": v.x_ulb_w, "weak2": v.x_ulb_s},
                             teacher=self.ema.module)

    def after_sgd(self, ours, usb):
        self.ema.update()                        # the trainer: after the optimiser
        usb.ema.update()                         # USB's EMAHook.after_train_step

    def state(self, ours, usb) -> dict:
        return {f"teacher {n}": (p, usb.ema.shadow[f"net.{n}"]) for n, p in self.ema.module.named_parameters()}


def test_meanteacher_equals_usb_step_for_step(usb_lockstep):
    adapter = MeanTeacherLockstep()
    records = usb_lockstep(adapter)
    for i, r in enumerate(records):
        torch.testing.assert_close(r.ours.loss, r.ours.terms["sup"] + 50.0 * min(i / 4, 1.0) * r.ours.terms["mse"])
    # the teacher is not the student: its weights lag the trained ones
    teacher, student = dict(adapter.ema.module.named_parameters()), dict(adapter.student.named_parameters())
    assert teacher.keys() == student.keys() and not torch.equal(teacher["head.weight"], student["head.weight"])
