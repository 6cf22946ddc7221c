"""RDA (Duan, Qi, Wang, Zhou & Shi, "RDA: Reciprocal Distribution Alignment for Robust Semi-supervised Learning",
ECCV 2022), as its official code runs it (NJUyued/RDA4RobustSSL, models/rda/rda.py and rda_utils.py; the golden
test tests/mutexmatch/algorithms/test_rda.py was made by it). The MutexMatch authors' method for labeled and
unlabeled data whose class distributions differ (imbalanced, mismatched); no confidence threshold.

Two linear classifiers on shared features: the default classifier (DC, the TPC ``model.tpc``) predicts the class,
the complementary classifier (CC, the reference's ``ReverseCLS``: Linear(D, C), declared like MutexMatch's TNC and
built as ``model.tnc``) predicts a class the sample is NOT. One forward of [labeled | weak | strong]; with p^w, p^s
the DC's and q^w, q^s the CC's probabilities on the weak / strong view (the code's names in brackets):

- L_sup = CE(DC(x_lb), y) [sup_loss];
- L_rev = CE(CC(x_lb), ybar), ybar a complementary label drawn uniformly from the C - 1 classes other than y, a new
  draw every step [reverse_loss, ``res_torch``];
- the reciprocal distribution alignment: rho and rho~, the DC's and the CC's class distributions on unlabeled data,
  are the means of queues of the last ``da_window`` (128) batch means of p^w and q^w [``distri``,
  ``distri_reverse``], every slot starting at 1 (so the mean is taken over all slots, unfilled ones counting as 1),
  the current batch included. Each classifier's prediction is aligned by the complement of the other's:
      p~^w = N(p^w * mean(N(1 - Q~)) / rho),   q~^w = N(q^w * mean(N(1 - Q)) / rho~)
  where Q, Q~ are the queues (window x C), 1 - Q their complements and N(.) divides by the sum of ALL entries of
  the matrix it gets [``normalize_d``: ``torch.sum(x)`` without a dim] -- for p~^w and q~^w that is the sum over
  the whole batch, not per row (the reference's form; a row of q~^w sums to about 1/muB);
- L_cd = 1/muB sum_b CE(DC(u^s_b), argmax p~^w_b), every unlabeled sample, hard pseudo-labels [unsup_loss_cd];
- L_ca = 1/muB sum_b H(q~^w_b, CC(u^s_b)), the soft aligned complementary target [unsup_loss_ca];
- L = L_sup + L_rev + lambda_u (L_cd + L_ca) [total_loss; lambda_u = ulb_loss_ratio, 1 by default].

The gradient reaches the shared features from every term (the CC's features are not detached); the weak views'
predictions are detached. The DC is evaluated (the reference's ``evaluate`` reads the feature extractor's own
classifier); ``train/tnc_cpa`` is the CC's complementary-label accuracy on unlabeled data (argmax q^w is not the
class: the reference's ``ulb/complementary_pseudo_label_acc``), ``train/cpa`` the same of the aligned target's top
class, argmax q~^w, which L_ca trains the CC towards. The symbols rho, rho~, L_cd, L_ca, L_rev follow the reference
code's names (``distri``, ``unsup_loss_cd`` ...); the paper's printed equations were not at hand to check them
against.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.alignment import RunningMean
from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, TrainContext, register_algorithm
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import AlgorithmParams, QueueLength, Weight


class RDAParams(AlgorithmParams):
    """RDA: the weight of its two unlabeled losses and the length of its distribution queues. Defaults: the official
    train_rda.py (ulb_loss_ratio 1.0; queues of 128 batches, fixed there)."""

    lambda_u: Weight = Field(1.0, description="[λ_u] RDA: weight of both unlabeled losses, L_cd (DC, hard aligned "
                             "pseudo-labels) and L_ca (CC, soft aligned complementary targets); the official "
                             "ulb_loss_ratio: 1.")
    da_window: QueueLength = Field(128, description="RDA: length in batches of the queues whose means estimate the "
                                   "two classifiers' class distributions ρ, ρ̃ (the official code: 128, every slot "
                                   "starting at 1).")


def complement_mean(queue: Tensor) -> Tensor:
    """mean over the queue's rows of N(1 - Q), N dividing by the sum of all entries (the reference's normalize_d)."""
    comp = 1.0 - queue
    return (comp / comp.sum()).mean(dim=0)


def reciprocal_alignment(probs: Tensor, own_mean: Tensor, other_queue: Tensor) -> Tensor:
    """N(probs * mean(N(1 - other queue)) / own mean), N over the whole batch: p~^w (own = rho, other = Q~) or q~^w
    (own = rho~, other = Q)."""
    aligned = probs * (complement_mean(other_queue) / own_mean)
    return aligned / aligned.sum()


@register_algorithm("rda")
class RDA(Algorithm):
    """RDA: a complementary classifier trained on random complementary labels, and the two classifiers' pseudo-labels
    each aligned by the complement of the other's class distribution, no threshold (Duan et al., ECCV 2022)."""

    uses_tnc = True   # the complementary classifier (CC) is the TNC head, Linear(D, C)
    terms = ("sup", "rev", "cd", "ca")
    Params = RDAParams
    params: RDAParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        ones = torch.ones(self.num_classes)
        self.queues = {}
        for name in ("dc", "cc"):   # Q (distri) and Q~ (distri_reverse), every slot 1 at the start
            queue = RunningMean(self.num_classes, "queue", self.params.da_window, 0.0, ones)
            queue.rows.fill_(1.0)
            self.queues[name] = queue

    def complementary_labels(self, targets: Tensor) -> Tensor:
        """ybar: per labeled row a class drawn uniformly from the C - 1 others (torch's generator of the targets'
        device, checkpointed with the trainer's RNG state; the reference draws with numpy's)."""
        shift = torch.randint(1, self.num_classes, targets.shape, device=targets.device)
        return (targets + shift) % self.num_classes

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        if getattr(model, "tnc", None) is None:
            raise ValueError(f"algorithm {self.name!r} needs its complementary classifier, but model.tnc is None")
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        comp_lb, comp_w, comp_s = model.tnc(inp.feats).split([b, u, u])
        p_w, q_w = logits_w.detach().softmax(dim=1), comp_w.detach().softmax(dim=1)
        dc, cc = self.queues["dc"], self.queues["cc"]
        dc.update(p_w.float().mean(dim=0))
        cc.update(q_w.float().mean(dim=0))
        rho, rho_cc = dc.value(over_all_slots=True), cc.value(over_all_slots=True)
        q_aligned = reciprocal_alignment(q_w, rho_cc, dc.rows)          # q~^w, by N(1 - Q)
        p_aligned = reciprocal_alignment(p_w, rho, cc.rows)             # p~^w, by N(1 - Q~)
        pseudo_label = p_aligned.argmax(dim=1)
        terms = {"sup": F.cross_entropy(logits_lb, inp.targets_lb),
                 "rev": F.cross_entropy(comp_lb, self.complementary_labels(inp.targets_lb)),
                 "cd": F.cross_entropy(logits_s, pseudo_label),
                 "ca": soft_cross_entropy(q_aligned, comp_s).mean()}
        loss = terms["sup"] + terms["rev"] + self.params.lambda_u * (terms["cd"] + terms["ca"])
        row_aligned = p_aligned / p_aligned.sum(dim=1, keepdim=True)
        return StepOutput(loss=loss, terms=terms, mask=torch.ones_like(p_w[:, 0]), conf=row_aligned.max(dim=1).values,
                          pseudo_label=pseudo_label, comp_label=q_aligned.argmax(dim=1),
                          tnc_comp_label=q_w.argmax(dim=1), soft_target=q_aligned)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "rev": 1.0, "cd": self.params.lambda_u, "ca": self.params.lambda_u}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **{name: q.state_dict() for name, q in self.queues.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        for name, queue in self.queues.items():
            queue.load_state_dict(state[name], f"rda queue {name}")
