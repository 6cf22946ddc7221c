"""UDA (Xie et al., "Unsupervised Data Augmentation for Consistency Training", NeurIPS 2020) for image
classification, as in the paper's Sections 3.2-3.3 and compared step for step with USB 0.3.2's ``uda``:

    L = 1/B sum_b 1(p(y*_b|x_b) <= eta_t) H(y*_b, p_b)                                  (TSA, Section 3.3)
      + lambda_p * 1/muB sum 1(max p^w >= tau) H(softmax(z^w / T), p^s)   (Eq. 1 with Section 3.2's masking and
                                                                           sharpening)

eta_t follows ``tsa_schedule`` (:func:`mutexmatch.selection.tsa_threshold`; ``none`` keeps every example), over the
run's total steps. The confidence mask reads the *unsharpened* p^w, as in the paper and Google's code. The
consistency term is the cross-entropy H(target, p^s), as USB computes it; the paper's KL divergence differs from it
by the target's entropy, a constant of the parameters, so the gradients are the same and only the logged value of
``p`` differs.

Deliberate deviations from USB 0.3.2 (docs/training.md, UDA; asserted by
tests/mutexmatch/algorithms/usb/test_uda_lockstep.py):

- USB never applies its temperature T: its pseudo-labelling hook is called with probabilities and ``softmax=False``,
  which returns them unchanged whatever T is. We apply the paper's softmax(z^w / T); ``temperature: 1.0`` is USB's
  computation exactly (no separate switch is needed).
- USB's TSA compares the *largest* predicted probability with eta_t; the paper and Google's code compare the
  probability of the *correct* class, which we do. USB's published runs all use ``tsa_schedule: none``, where the
  two agree.

With TSA the supervised sum is divided by B (USB); Google's code divides it by the number of kept examples.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, register_algorithm
from mutexmatch.losses import confidence_mask, soft_cross_entropy
from mutexmatch.params import AlgorithmParams, Positive, Probability, Weight
from mutexmatch.selection import TSA_SCHEDULES, sharpen, tsa_mask, tsa_threshold


class UDAParams(AlgorithmParams):
    """UDA: the confidence-masking threshold, the sharpening temperature, the TSA schedule and the consistency's
    weight (USB 0.3.2's defaults: p_cutoff 0.8, T 0.4, tsa_schedule none, ulb_loss_ratio 1.0). No distribution
    alignment: USB's UDA registers it only for its imbalanced (CReST) runs."""

    tau: Probability = Field(0.8, description="[β] UDA's confidence mask 1(max p^w >= τ) on the unsharpened weak "
                             "prediction (the paper's and USB's 0.8).")
    temperature: Positive = Field(0.4, description="[T] UDA's sharpening: the consistency target is softmax(z^w / T) "
                                  "(the paper's and USB's 0.4). USB never applies it: 1.0 computes what USB does "
                                  "(docs/training.md, UDA).")
    tsa_schedule: Literal[TSA_SCHEDULES] = Field(  # type: ignore[valid-type]
        "none", description="UDA's training signal annealing: keep a labeled example while its correct class's "
        "probability is <= η_t, η_t rising from 1/C to 1 over the run (linear, log or exp); none keeps every "
        "example (USB's default).")
    lambda_p: Weight = Field(1.0, description="[λ_u] weight of UDA's consistency loss (USB's ulb_loss_ratio).")


@register_algorithm("uda")
class UDA(Algorithm):
    """UDA: TSA-masked L_sup + lambda_p times the confidence-masked consistency H(softmax(z^w / T), p^s) (Xie et al.
    2020, Eq. 1 and Sections 3.2-3.3)."""

    terms = ("sup", "p")
    Params = UDAParams
    params: UDAParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        eta = tsa_threshold(self.params.tsa_schedule, inp.step, self.ctx.total_steps, self.num_classes)
        sup = (F.cross_entropy(logits_lb, inp.targets_lb, reduction="none")
               * tsa_mask(logits_lb, inp.targets_lb, eta)).mean()               # TSA: 1/B sum over kept rows
        probs_w = torch.softmax(logits_w.detach(), dim=1)
        mask = confidence_mask(probs_w, self.params.tau)                         # 1(max p^w >= beta), unsharpened
        target = sharpen(logits_w, self.params.temperature)                      # softmax(z^w / T)
        p = (soft_cross_entropy(target, logits_s) * mask).mean()
        conf, pseudo_label = probs_w.max(dim=1)
        return StepOutput(loss=sup + self.params.lambda_p * p, terms={"sup": sup, "p": p}, mask=mask, conf=conf,
                          pseudo_label=pseudo_label, soft_target=target)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}
