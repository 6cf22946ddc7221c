"""DASO, Distribution-Aware Semantics-Oriented pseudo-labels (Oh et al., CVPR 2022), as USB 0.3.2 runs it
(``semilearn/imb_algorithms/daso``; the lockstep test is its reference). With FixMatch or ReMixMatch (USB's rule);
USB's ReMixMatch never calls the pseudo-labelling hook DASO replaces, so with it DASO is the queue and the alignment
term only (no blend), as USB's.

Every step, before the base's forward, the labeled batch goes through the model with the EMA weights (USB's
``ema.apply_shadow()``: train mode, so BatchNorm normalises with the batch's statistics and its running statistics,
the model's own, are updated too, as USB's are) and its features enter a class-wise queue (the last ``queue_len`` of
each class); the prototype q_k is the mean of class k's queue (0 while it is empty).

From step ``num_pretrain_iter`` on, the weak view's pseudo-label is the argmax of

  p~ = (1 - w) p^w + w p^sim,   p^sim = softmax(cos(f^w, q) / T_proto),   w = pi~(argmax p^w)

(the paper's distribution-aware blend), pi~ = pi^(1/T_dist) / sum, divided by its max, pi the class histogram of
the pseudo-labels of the last ``num_pl_dist_iter`` steps (refreshed every ``num_pl_dist_iter`` steps; w =
``interp_alpha`` without ``with_dist_aware``); FixMatch's mask stays on p^w. From step ``num_pretrain_iter - 1``
on, the semantic alignment term L_daso = CE(cos(f^s, q) / T_proto, p^sim), weight ``assign_loss_ratio``, is added.

Forms (USB's defect): ``usb`` mixes in the p^sim of the *previous* step's batch (USB computes it after the base's
pseudo-labelling hook has read ``probs_sim``), so a row's semantic label belongs to another image; ``fixed`` mixes in
the batch's own p^sim (each image's own semantic label, as the paper defines it). Ours keeps the whole queue in
checkpoints (USB saves only the prototypes). The composed class runs the base's step with forward 'separate' and
concatenates the views itself, so the EMA forward comes before the base's (the order of BatchNorm's updates).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn
from torch.func import functional_call

from mutexmatch.algorithms.base import StepInputs, StepOutput, Views
from mutexmatch.imb_algorithms.base import ImbAlgorithm, ImbParams, register_imb_algorithm
from mutexmatch.params import Positive, PositiveSteps, Steps, Weight


_STATE = ("fill", "ptr", "pending", "dist", "bank", "sim")


class DasoParams(ImbParams):
    """DASO: USB's get_argument defaults."""

    form: Literal["usb", "fixed"] = Field("usb", description="DASO: `usb` = semilearn 0.3.2 (the previous batch's "
                                          "semantic labels mixed in); `fixed` = the batch's own (docs/longtail.md).")
    queue_len: PositiveSteps = Field(256, description="DASO: labeled features kept per class (USB's daso_queue_len).")
    t_proto: Positive = Field(0.05, description="[T_proto] DASO: temperature of the prototype similarities "
                              "(USB's daso_T_proto).")
    t_dist: Positive = Field(1.5, description="[T_dist] DASO: temperature of the pseudo-label distribution "
                             "(USB's daso_T_dist).")
    interp_alpha: Weight = Field(0.5, description="DASO: the fixed blend weight without with_dist_aware "
                                 "(USB's daso_interp_alpha).")
    with_dist_aware: bool = Field(True, description="DASO: blend by the pseudo-label distribution (USB's "
                                  "daso_with_dist_aware).")
    assign_loss_ratio: Weight = Field(1.0, description="[lambda_align] DASO: weight of the semantic alignment term "
                                      "(USB's daso_assign_loss_ratio).")
    num_pl_dist_iter: PositiveSteps = Field(100, description="DASO: steps between refreshes of the pseudo-label "
                                            "distribution (USB's daso_num_pl_dist_iter).")
    num_pretrain_iter: Steps = Field(5120, description="DASO: steps before the semantic pseudo-labels (USB's "
                                     "daso_num_pretrain_iter).")


@register_imb_algorithm("daso")
class DASO(ImbAlgorithm):
    """DASO (Oh et al., 2022): pseudo-labels blended with prototype-similarity labels by the pseudo-label
    distribution, and a semantic alignment term; two forms, USB's and the fixed one (`form`)."""

    imb_params_model = DasoParams
    imb: DasoParams
    imb_terms = ("daso",)
    bases = ("fixmatch", "remixmatch")
    daso_concat = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A concat base's forward runs in compute (after the EMA forward of the labeled batch, USB's order of
        # BatchNorm updates): the base's views, forward 'separate', compute concatenates them again.
        super().__init_subclass__(**kwargs)
        cls.daso_concat = cls.step.forward == "concat"                     # type: ignore[attr-defined]
        cls.step = dataclasses.replace(cls.step, forward="separate")        # type: ignore[attr-defined]

    def imb_init(self) -> None:
        c, dev = self.num_classes, self.ctx.device
        self.daso_bank: Tensor | None = None                               # (C, L + 1, D): slot L takes the overflow
        self.daso_fill = torch.zeros(c, dtype=torch.long, device=dev)
        self.daso_ptr = torch.zeros(c, dtype=torch.long, device=dev)
        self.daso_pending = torch.zeros(c, device=dev)                     # pseudo-labels since the last refresh
        self.daso_dist = torch.zeros(c, device=dev)                        # USB's pseudo_label_dist
        self.daso_sim: Tensor | None = None                                # usb form: the previous batch's p^sim
        self._sim_now: Tensor | None = None

    def imb_term_weights(self) -> dict[str, float]:
        return {"daso": self.imb.assign_loss_ratio}

    @property
    def daso_prototypes(self) -> Tensor:
        """q (C, D): each class's queue mean, 0 while empty."""
        bank = self.daso_bank[:, :-1]
        return bank.sum(dim=1) / self.daso_fill.clamp_min(1)[:, None].to(bank.dtype)

    @torch.no_grad()
    def enqueue(self, feats: Tensor, labels: Tensor) -> None:
        """USB's DASOFeatureQueue.enqueue as a ring per class, without host synchronisation."""
        length, c = self.imb.queue_len, self.num_classes
        if self.daso_bank is None:
            self.daso_bank = feats.new_zeros(c, length + 1, feats.shape[1])
        onehot = torch.zeros(len(labels), c, dtype=torch.long, device=labels.device).scatter_(1, labels[:, None], 1)
        rank = (onehot.cumsum(0) - onehot).gather(1, labels[:, None])[:, 0]   # earlier rows of the same class
        count = onehot.sum(0)
        keep = rank >= count[labels] - length                               # the last queue_len of each class
        slot = torch.where(keep, (self.daso_ptr[labels] + rank) % length, length)
        self.daso_bank[labels, slot] = feats.to(self.daso_bank.dtype)
        self.daso_ptr = (self.daso_ptr + count) % length
        self.daso_fill = (self.daso_fill + count).clamp_max(length)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        ema = self.ctx.ema_model if self.ctx.ema_model is not None else model   # no trainer: the model's weights
        with torch.no_grad():
            feats_lb = functional_call(model, dict(ema.named_parameters()), (inp.view("lb"),))
        self.enqueue(feats_lb.float(), inp.targets_lb)
        if self.daso_concat:
            x = torch.cat(list(inp.images.values()))                       # type: ignore[union-attr]
            inp = dataclasses.replace(inp, feats=inp.forward(x), images=None, forward=None)   # type: ignore[misc]
        self._sim_now = None
        out = super().compute(model, inp)                                   # type: ignore[misc]
        if inp.step + 1 < self.imb.num_pretrain_iter:
            return self.add_terms(out, {"daso": torch.zeros((), device=out.loss.device)}, {})
        feats = self.view_features(inp, out)
        protos = self.daso_prototypes
        prob_sim = self._sim_now if self._sim_now is not None else self._semantic(feats["weak"], protos)
        sim_s = F.cosine_similarity(feats["strong"][:, None], protos[None], dim=2) / self.imb.t_proto
        term = -(prob_sim * F.log_softmax(sim_s, dim=1)).sum(dim=1).mean()
        if self.imb.form == "usb":
            self.daso_sim = prob_sim
        return self.add_terms(out, {"daso": term}, {"daso_prob_sim": prob_sim})

    @torch.no_grad()
    def _semantic(self, feats_w: Tensor, protos: Tensor) -> Tensor:
        """p^sim = softmax(cos(f^w, q) / T_proto)."""
        return torch.softmax(F.cosine_similarity(feats_w.detach()[:, None], protos[None], dim=2) / self.imb.t_proto,
                             dim=1)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        """The base's views with p^w replaced, from ``num_pretrain_iter`` on, by the blend p~ its pseudo-label is
        the argmax of (the mask stays the base's); the pseudo-labels counted for the distribution."""
        v = super().views(model, inp)                                       # type: ignore[misc]
        if not self.daso_concat:       # ReMixMatch: USB's never calls the pseudo-labelling hook DASO replaces
            return v
        if inp.step >= self.imb.num_pretrain_iter:
            if self.imb.form == "fixed" or self.daso_sim is None:   # usb form, no previous batch: the batch's own
                self._sim_now = sim = self._semantic(v.feats_w, self.daso_prototypes)
            else:
                sim = self.daso_sim
            v.probs_w = self.blend(v.probs_w, sim)
        self.daso_pending.scatter_add_(0, v.probs_w.argmax(dim=1), torch.ones_like(v.probs_w[:, 0]))
        return v

    @torch.no_grad()
    def blend(self, probs_w: Tensor, prob_sim: Tensor) -> Tensor:
        """p~ = (1 - w) p^w + w p^sim, w = pi~(argmax p^w) (USB's DASOPseudoLabelingHook)."""
        if self.imb.with_dist_aware:
            dist = self.daso_dist / self.daso_dist.sum()
            dist = dist ** (1.0 / self.imb.t_dist)
            dist = dist / dist.sum()
            weight = (dist / dist.max())[probs_w.argmax(dim=1)][:, None]
        else:
            weight = self.imb.interp_alpha
        return (1.0 - weight) * probs_w + weight * prob_sim

    def after_step(self, step: int) -> None:
        super().after_step(step)
        if (step + 1) % self.imb.num_pl_dist_iter == 0:                     # USB's every_n_iters
            self.daso_dist, self.daso_pending = self.daso_pending, torch.zeros_like(self.daso_pending)

    def imb_state_dict(self) -> dict[str, Any]:
        return {k: None if getattr(self, f"daso_{k}") is None else getattr(self, f"daso_{k}").detach().clone()
                for k in _STATE}

    def imb_load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().imb_load_state_dict(state)
        dev = self.daso_fill.device
        for k in _STATE:
            setattr(self, f"daso_{k}", None if state[k] is None else state[k].to(dev).clone())
