"""FixMatch + ABC and ReMixMatch + ABC equal USB's (``class (ABC, FixMatch)``, as its ``get_imb_algorithm`` composes
them) step for step: loss, every term (ABC's ``train/abc_loss``), every gradient including the auxiliary head's,
BatchNorm's running statistics, the base's mask and pseudo-labels, ABC's own masks (labeled and unlabeled
Bernoulli draws), its pseudo-labels and its class weights, on a long-tailed labeled pool (8, 4, 2, 1 a class), over
steps that cross ABC's epoch-progress switch: USB's epochs of 1,024 steps in a 4,096-step run, both sides started at
iteration 1021, so the unlabeled class weights go from all ones (epoch 0) to 1 - (1/4)(1 - N_min / N_c)."""
from __future__ import annotations

import torch
from torch import nn

from .conftest import attach_aux_head
from .test_fixmatch_lockstep import FixMatchLockstep
from .test_mixmatch_lockstep import ReMixMatchLockstep


class _ABC:
    imb_name = usb_imb_name = "abc"
    imb_params = {"tau": 0.3, "lambda_abc": 1.5, "epoch_steps": 1024}
    abc_args = {"abc_p_cutoff": 0.3, "abc_loss_ratio": 1.5, "epoch": 4}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 6
    batchnorm = True

    def __init__(self) -> None:
        self.usb_calls: dict[str, list] = {"bernouli_mask": [], "compute_prob": []}

    def wrap(self, ours_net: nn.Module, usb, names: dict[str, str]):
        """Our ABC head (attached as the trainer attaches it) and USB's ABCNet around the model it was given, whose
        auxiliary head takes our weights; ``model.module`` is what USB's train_step reads (DDP's)."""
        names = attach_aux_head(self, ours_net, usb, names, "abc")
        for what in self.usb_calls:    # record USB's masks and ABC's head probabilities, in call order
            setattr(usb, what, self._recording(what, getattr(usb, what)))
        return usb.model, names

    def _recording(self, what: str, fn):
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.usb_calls[what].append(out)
            return out
        return call

    def state(self, ours, usb) -> dict:
        return {**super().state(ours, usb), "lb_class_dist": (ours.lb_class_dist, usb.lb_class_dist)}


class ABCFixMatchLockstep(_ABC, FixMatchLockstep):
    ours_params = FixMatchLockstep.ours_params
    usb_args = {**FixMatchLockstep.usb_args, **_ABC.abc_args}
    terms = {**FixMatchLockstep.terms, "abc": "train/abc_loss"}


class ABCReMixMatchLockstep(_ABC, ReMixMatchLockstep):
    usb_args = {**ReMixMatchLockstep.usb_args, **_ABC.abc_args}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss", "abc": "train/abc_loss"}
    min_mixed = 0    # ReMixMatch has no confidence mask
    total_steps, first_step, steps = 4096, 1022, 4


def _check_abc(adapter, records) -> None:
    """ABC's own masks and pseudo-labels, ours == USB's every step (USB draws two Bernoulli masks a step, labeled
    first; its last compute_prob of a step is the auxiliary head's); the epoch switch is crossed."""
    masks, probs = adapter.usb_calls["bernouli_mask"], adapter.usb_calls["compute_prob"]
    assert len(masks) == 2 * len(records)
    per_step = len(probs) // len(records)
    for i, r in enumerate(records):
        usb_lb, usb_weights = masks[2 * i], masks[2 * i + 1]
        usb_probs = probs[per_step * i + per_step - 1]
        conf, pseudo = usb_probs.max(dim=1)
        assert torch.equal(r.ours.extra["abc_mask_lb"], usb_lb), f"step {i}: ABC's labeled mask"
        assert torch.equal(r.ours.extra["abc_pseudo_label"], pseudo), f"step {i}: ABC's pseudo-labels"
        torch.testing.assert_close(r.ours.extra["abc_conf"], conf)
        usb_mask = conf.ge(adapter.imb_params["tau"]).float() * usb_weights
        assert torch.equal(r.ours.extra["abc_mask"], usb_mask), f"step {i}: ABC's unlabeled mask"
    crossed = adapter.imb_params["epoch_steps"] - adapter.first_step     # the first step of epoch 1
    before = [masks[2 * i + 1] for i in range(crossed)]
    assert all(bool(m.eq(1).all()) for m in before)                        # epoch 0: every class weight is 1
    after = torch.cat([masks[2 * i + 1] for i in range(crossed, len(records))])
    assert 0 < after.mean() < 1                                            # then the tail-favouring draws
    lb = torch.cat([r.ours.extra["abc_mask_lb"] for r in records])
    ulb = torch.cat([r.ours.extra["abc_mask"] for r in records])
    assert 0 < lb.mean() < 1 and 0 < ulb.mean() < 1 and any(r.ours.terms["abc"] > 0 for r in records)


def test_fixmatch_abc_equals_usb_step_for_step(usb_lockstep):
    adapter = ABCFixMatchLockstep()
    _check_abc(adapter, usb_lockstep(adapter))


def test_remixmatch_abc_equals_usb_step_for_step(usb_lockstep):
    adapter = ABCReMixMatchLockstep()
    _check_abc(adapter, usb_lockstep(adapter))
