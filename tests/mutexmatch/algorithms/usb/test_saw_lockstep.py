"""FixMatch + SAW equals USB's (``class (SAW, FixMatch)``) step for step: loss (float64, as USB's: its first
unlabeled weights are numpy's), terms, every gradient, BatchNorm's running statistics, FixMatch's mask and
pseudo-labels and SAW's class weights, on a long-tailed labeled pool (8, 4, 2, 1 a class), over an epoch boundary of
USB's 1,024-step epochs (both sides started at iteration 1021): the unlabeled weights go from uniform counts to the
pool's predicted counts (both sides get the same pool logits, see imb_epochs.py)."""
from __future__ import annotations

from unittest import mock

import torch
from torch import Tensor

from .imb_epochs import PoolLogits
from .test_fixmatch_lockstep import FixMatchLockstep


class SAWFixMatchLockstep(PoolLogits, FixMatchLockstep):
    imb_name = usb_imb_name = "saw"
    imb_params = {"epoch_steps": 1024}
    usb_args = {**FixMatchLockstep.usb_args, "epoch": 4}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 6
    batchnorm = True
    logit_scale = 8.0

    def prepare(self, ours, usb, g) -> None:
        """USB's before_run and before_train_epoch: the first weights, set into its losses."""
        hook = usb.hooks_dict["SAWWeightsHook"]
        with mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):
            hook.before_run(usb)
            hook.before_train_epoch(usb)

    def usb_epoch_end(self, usb) -> None:
        hook = usb.hooks_dict["SAWWeightsHook"]
        hook.after_train_epoch(usb)
        hook.before_train_epoch(usb)

    def state(self, ours, usb) -> dict:
        return {"unlabeled weights": (ours.saw_ulb, usb.consistency_loss.x_ulb_weights),
                "labeled weights": (ours.saw_lb, usb.ce_loss.x_lb_weights)}


def test_fixmatch_saw_equals_usb_step_for_step(usb_lockstep):
    adapter = SAWFixMatchLockstep()
    records = usb_lockstep(adapter)
    assert adapter.boundaries == 1
    first = records[0].ours.loss.dtype
    assert first == torch.float64 and records[-1].ours.loss.dtype == torch.float32   # USB's dtypes, both
    assert not torch.allclose(adapter.scores_after[0].double(), torch.ones(4, dtype=torch.float64))
