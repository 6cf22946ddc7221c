"""FixMatch + DASO and ReMixMatch + DASO equal USB's (``class (DASO, FixMatch)``, ``class (DASO, ReMixMatch)``) step
for step: loss, every term (DASO's ``train/assign_loss``), every gradient, BatchNorm's running statistics (updated by the EMA-weights forward of the
labeled batch before the base's forward, as USB's), FixMatch's mask, DASO's blended pseudo-labels, and its state (the
prototypes of the class-wise queue, the pseudo-label distribution and the pending pseudo-labels, the semantic labels
kept for the next step), on a long-tailed labeled pool (8, 4, 2, 1 a class) and a queue of 2 a class (it wraps, and a
batch may hold more of a class than it keeps), over DASO's start: ``num_pretrain_iter`` 23, both sides started at
iteration 20 (20-21 FixMatch's pseudo-labels, 22 the alignment term, 23-26 the blend), the distribution refreshed
every 2 steps; the EMA model (momentum 0.5, started apart from the model) is the trainer's ``TrainContext.ema_model``
on our side and USB's ``EMA`` on its side. USB's ReMixMatch never calls the pseudo-labelling hook that blends, so
with it DASO is the queue and the alignment term (from iteration 22) on both sides.

The fixed form (the batch's own semantic labels) is checked against USB with that defect repaired in place: its
pseudo-labelling hook reads ``probs_sim`` of the current batch's weak features and the current prototypes."""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.training.ema import ModelEMA

from .test_fixmatch_lockstep import FixMatchLockstep
from .test_mixmatch_lockstep import ReMixMatchLockstep

PRETRAIN = 23
DASO_ARGS = {"daso_queue_len": 2, "daso_T_proto": 0.5, "daso_T_dist": 1.5, "daso_interp_alpha": 0.5,
             "daso_with_dist_aware": True, "daso_assign_loss_ratio": 0.7, "daso_num_pl_dist_iter": 2,
             "daso_num_pretrain_iter": PRETRAIN}


class _DASO:
    imb_name = usb_imb_name = "daso"
    imb_params = {"form": "usb", "queue_len": 2, "t_proto": 0.5, "t_dist": 1.5, "interp_alpha": 0.5,
                  "with_dist_aware": True, "assign_loss_ratio": 0.7, "num_pl_dist_iter": 2,
                  "num_pretrain_iter": PRETRAIN}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 64, 20, 7
    batchnorm = True
    ema_m = 0.5

    def wrap(self, ours_net: nn.Module, usb, names: dict[str, str]):
        """Both EMA models, started at the same weights apart from the model's; USB logs no assign loss before
        DASO's start (ours logs 0, checked below)."""
        from semilearn.core.utils.misc import EMA
        self.ours_ema = ModelEMA(ours_net, self.ema_m)
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for p in self.ours_ema.module.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g))
        usb.ema = EMA(usb.model, self.ema_m)
        usb.ema.register()
        for n, p in self.ours_ema.module.named_parameters():
            usb.ema.shadow[names[n]] = p.detach().clone()
        self.ours_alg = None
        step = usb.train_step

        def logged_step(**kwargs):
            out, log = step(**kwargs)
            return out, {"train/assign_loss": 0.0, **log}
        usb.train_step = logged_step
        return usb.model, names

    def prepare(self, ours, usb, generator) -> None:
        if hasattr(super(), "prepare"):
            super().prepare(ours, usb, generator)
        ours.ctx = dataclasses.replace(ours.ctx, ema_model=self.ours_ema.module)

    def after_sgd(self, ours, usb) -> None:
        """The trainer's order after the optimiser: EMA update, then the algorithm's after_step (USB's
        after_train_step hooks, before its ``it`` advances)."""
        self.ours_ema.update()
        usb.ema.update()
        ours.after_step(usb.it - 1)
        usb.it -= 1
        usb.hooks_dict["PseudoLabelingHook"].after_train_step(usb)
        usb.it += 1

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["PseudoLabelingHook"]
        pending = torch.cat(hook.pseudo_label_list) if hook.pseudo_label_list else torch.zeros(0, dtype=torch.long)
        state = {**super().state(ours, usb), "prototypes": (ours.daso_prototypes, usb.queue.prototypes),
                 "distribution": (ours.daso_dist, hook.get_pl_dist(normalize=False)),
                 "pending": (ours.daso_pending, torch.bincount(pending, minlength=4))}
        if hasattr(usb, "probs_sim") and ours.imb.form == "usb":
            state["previous semantic labels"] = (ours.daso_sim, usb.probs_sim)
        return state


class DASOFixMatchLockstep(_DASO, FixMatchLockstep):
    usb_args = {**FixMatchLockstep.usb_args, **DASO_ARGS}
    terms = {**FixMatchLockstep.terms, "daso": "train/assign_loss"}


class DASOReMixMatchLockstep(_DASO, ReMixMatchLockstep):
    usb_args = {**ReMixMatchLockstep.usb_args, **DASO_ARGS}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss", "daso": "train/assign_loss"}
    min_mixed = 0    # ReMixMatch has no confidence mask


class DASOFixedFixMatchLockstep(DASOFixMatchLockstep):
    """The fixed form against USB with the defect repaired: before its pseudo-labelling hook, ``probs_sim`` is the
    current batch's (its weak rows of the base's forward, the prototypes after this step's enqueue)."""

    imb_params = {**DASOFixMatchLockstep.imb_params, "form": "fixed"}

    def wrap(self, ours_net: nn.Module, usb, names: dict[str, str]):
        model, names = super().wrap(ours_net, usb, names)
        forward, seen = model.forward, {}

        def recording(x, *args, **kwargs):
            seen["out"] = forward(x, *args, **kwargs)
            return seen["out"]
        model.forward = recording
        hook = usb.hooks_dict["PseudoLabelingHook"]
        gen = hook.gen_ulb_targets

        def own_batch(algorithm, logits, **kwargs):
            feats_w = seen["out"]["feat"][-2 * len(logits):-len(logits)].detach()
            sim = F.cosine_similarity(feats_w[:, None], usb.queue.prototypes[None], dim=2) / usb.T_proto
            usb.probs_sim = sim.softmax(dim=1)
            return gen(algorithm, logits, **kwargs)
        hook.gen_ulb_targets = own_batch
        return model, names


def _check_switches(records) -> None:
    pre, align, blended = records[:2], records[2], records[3:]
    assert all(r.ours.terms["daso"] == 0 for r in pre) and align.ours.terms["daso"] > 0
    assert all(r.ours.terms["daso"] > 0 for r in blended)
    plain = [torch.equal(r.ours.pseudo_label, r.usb_hooks["gen_ulb_targets.kwargs"]["logits"].argmax(dim=1))
             for r in records]
    assert all(plain[:3]) and not all(plain[3:])     # the blend changes some pseudo-labels after the start


def test_fixmatch_daso_equals_usb_step_for_step(usb_lockstep):
    _check_switches(usb_lockstep(DASOFixMatchLockstep()))


def test_remixmatch_daso_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(DASOReMixMatchLockstep())
    assert all(r.ours.terms["daso"] == 0 for r in records[:2]) and all(r.ours.terms["daso"] > 0 for r in records[2:])


def test_fixed_form_equals_usb_with_the_batchs_own_semantic_labels(usb_lockstep):
    fixed = usb_lockstep(DASOFixedFixMatchLockstep())
    _check_switches(fixed)
    usb_form = usb_lockstep(DASOFixMatchLockstep())
    assert any(not torch.equal(a.ours.pseudo_label, b.ours.pseudo_label) for a, b in zip(fixed[3:], usb_form[3:]))
