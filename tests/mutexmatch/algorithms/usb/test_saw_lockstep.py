"""FixMatch + SAW and ReMixMatch + SAW equal USB's (``class (SAW, Base)``) step for step: loss (float64 until the
first boundary, as USB's: its first unlabeled weights are numpy's), terms, every gradient, BatchNorm's running
statistics, the base's mask and pseudo-labels and SAW's class weights, on a long-tailed labeled pool (8, 4, 2, 1 a
class), over an epoch boundary of USB's 1,024-step epochs: the unlabeled weights go from uniform counts to the pool's
predicted counts (both sides get the same pool logits, see imb_epochs.py). With ReMixMatch USB's SAW losses weigh
its mixed labeled term (labeled weights), its mixed unlabeled and pre-mixup terms (unlabeled weights) by the class of
each target's argmax; the rotation loss is unweighted."""
from __future__ import annotations

from unittest import mock

import torch
from torch import Tensor

from .imb_epochs import PoolLogits
from .test_fixmatch_lockstep import FixMatchLockstep
from .test_mixmatch_lockstep import ReMixMatchLockstep


class _SAW(PoolLogits):
    imb_name = usb_imb_name = "saw"
    imb_params = {"epoch_steps": 1024}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 6
    batchnorm = True

    def prepare(self, ours, usb, g) -> None:
        """The base's preparation, then USB's before_run and before_train_epoch: the first weights, set into its
        losses."""
        if hasattr(super(), "prepare"):
            super().prepare(ours, usb, g)
        hook = usb.hooks_dict["SAWWeightsHook"]
        with mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):
            hook.before_run(usb)
            hook.before_train_epoch(usb)

    def usb_epoch_end(self, usb) -> None:
        hook = usb.hooks_dict["SAWWeightsHook"]
        hook.after_train_epoch(usb)
        hook.before_train_epoch(usb)

    def state(self, ours, usb) -> dict:
        return {**super().state(ours, usb), "unlabeled weights": (ours.saw_ulb, usb.consistency_loss.x_ulb_weights),
                "labeled weights": (ours.saw_lb, usb.ce_loss.x_lb_weights)}


class SAWFixMatchLockstep(_SAW, FixMatchLockstep):
    usb_args = {**FixMatchLockstep.usb_args, "epoch": 4}
    logit_scale = 8.0


class SAWReMixMatchLockstep(_SAW, ReMixMatchLockstep):
    usb_args = {**ReMixMatchLockstep.usb_args, "epoch": 4}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    min_mixed = 0    # ReMixMatch has no confidence mask
    first_step, steps = 1022, 4


def test_fixmatch_saw_equals_usb_step_for_step(usb_lockstep):
    adapter = SAWFixMatchLockstep()
    records = usb_lockstep(adapter)
    assert adapter.boundaries == 1
    assert records[0].ours.loss.dtype == torch.float64 and records[-1].ours.loss.dtype == torch.float32   # USB's
    assert not torch.allclose(adapter.scores_after[0].double(), torch.ones(4, dtype=torch.float64))


def test_remixmatch_saw_equals_usb_step_for_step(usb_lockstep):
    adapter = SAWReMixMatchLockstep()
    records = usb_lockstep(adapter)
    assert adapter.boundaries == 1
    assert records[0].ours.loss.dtype == torch.float64 and records[-1].ours.loss.dtype == torch.float32
    assert not torch.allclose(adapter.scores_after[0].double(), torch.ones(4, dtype=torch.float64))
