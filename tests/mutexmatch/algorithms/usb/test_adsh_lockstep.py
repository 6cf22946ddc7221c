"""FixMatch + Adsh equals USB's (``class (Adsh, FixMatch)``) step for step: loss, terms, every gradient, BatchNorm's
running statistics, Adsh's class-wise masks, the pseudo-labels and its scores s_c, on a long-tailed labeled pool
(8, 4, 2, 1 a class), over an epoch boundary of USB's 1,024-step epochs (both sides started at iteration 1021): at
the boundary both sides get the same logits of the unlabeled pool (USB's ``evaluate('eval_ulb')``, here the model in
eval mode) and re-derive the scores."""
from __future__ import annotations

import torch

from .imb_epochs import PoolLogits
from .test_fixmatch_lockstep import FixMatchLockstep


class AdshFixMatchLockstep(PoolLogits, FixMatchLockstep):
    imb_name = usb_imb_name = "adsh"
    imb_params = {"tau_1": 0.6, "epoch_steps": 1024}
    usb_args = {**FixMatchLockstep.usb_args, "adsh_tau_1": 0.6, "epoch": 4}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 6
    batchnorm = True
    logit_scale = 2.5

    def usb_epoch_end(self, usb) -> None:
        usb.hooks_dict["MaskingHook"].after_train_epoch(usb)

    def state(self, ours, usb) -> dict:
        return {"scores": (ours.adsh_scores, usb.hooks_dict["MaskingHook"].adsh_s)}


def test_fixmatch_adsh_equals_usb_step_for_step(usb_lockstep):
    adapter = AdshFixMatchLockstep()
    usb_lockstep(adapter)
    assert adapter.boundaries == 1
    conf, pred = torch.softmax(adapter.pool_logits, dim=1).max(dim=1)
    head = conf[pred == 0]
    assert 0 < int((head >= 0.6).sum()) < len(head)          # rho strictly inside (0, 1): USB's quantile rule used
    assert not torch.allclose(adapter.scores_after[0], torch.full((4,), 0.6))   # the boundary moved the scores
