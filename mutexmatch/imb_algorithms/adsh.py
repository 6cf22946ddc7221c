"""Adsh, adaptive thresholding (Guo & Li, ICML 2022), as USB 0.3.2 runs it (``semilearn/imb_algorithms/adsh``; the
lockstep test is its reference). FixMatch only (USB's rule).

Per class c a score s_c (start: tau_1 for every class) replaces FixMatch's fixed threshold: an unlabeled row is kept
when max p^w >= exp(-s_{argmax p^w}). At every boundary of USB's epoch (``epoch_steps``), from the softmax of the
TPC's logits on the unlabeled pool: C_k = the confidences of the rows predicted k, sorted descending;
rho = (m - 1) / |C_0| with m the number of class-0 confidences >= tau_1 (rho = 1 when m = 0: USB's loop never
sets it), and s_k = -log C_k[int(|C_k| rho) - 1] for every non-empty C_k (index -1: the smallest); an empty class
keeps its score. Class 0 stands for the head class, as in USB (under reversed imbalance it is the tail).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import StepInputs
from mutexmatch.imb_algorithms.base import (EPOCH_STEPS_DOC, EpochNeeds, ImbAlgorithm, ImbParams,
                                            register_imb_algorithm, state_tensor)
from mutexmatch.params import USB_EPOCH_STEPS, Probability, Steps


class AdshParams(ImbParams):
    """Adsh: USB's get_argument default (its classic_cv_imb configs set no other)."""

    tau_1: Probability = Field(0.95, description="[tau_1] Adsh: the start score of every class and the head "
                               "class's confidence level that sets rho (USB's adsh_tau_1).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"Adsh: {EPOCH_STEPS_DOC}")


@register_imb_algorithm("adsh")
class Adsh(ImbAlgorithm):
    """Adsh (Guo & Li, 2022): class-wise thresholds exp(-s_c), re-derived from the pool's predictions at every
    epoch boundary."""

    imb_params_model = AdshParams
    imb: AdshParams
    imb_terms = ()
    bases = ("fixmatch",)
    epoch_needs = EpochNeeds(pool_logits=True)

    def imb_init(self) -> None:
        self.adsh_scores = torch.ones((self.num_classes,), device=self.ctx.device) * self.imb.tau_1

    def imb_term_weights(self) -> dict[str, float]:
        return {}

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        """1(max p^w >= exp(-s_{argmax p^w})) per row."""
        conf, pred = probs_w.detach().max(dim=-1)
        scores = self.adsh_scores.to(conf.device)
        return conf.ge(torch.exp(-scores[pred])).to(conf.dtype)

    @torch.no_grad()
    def on_epoch_end(self, pool_logits: Tensor) -> None:
        """USB's after_train_epoch: the scores from the pool's probabilities (module doc)."""
        conf, pred = torch.softmax(pool_logits.float().cpu(), dim=-1).max(dim=-1)
        ranked = [torch.sort(conf[pred == k], descending=True)[0] for k in range(self.num_classes)]
        confident = int((ranked[0] >= self.imb.tau_1).sum())    # sorted: USB's loop stops at the first below tau_1
        rho = 1.0 if confident == 0 else (confident - 1) / len(ranked[0])
        scores = self.adsh_scores.cpu().clone()
        for k, c_k in enumerate(ranked):
            if len(c_k):
                scores[k] = -torch.log(c_k[int(len(c_k) * rho) - 1])
        self.adsh_scores = scores.to(self.adsh_scores.device)

    def imb_state_dict(self) -> dict[str, Any]:
        return {"scores": self.adsh_scores.detach().cpu().clone()}

    def imb_load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().imb_load_state_dict(state)
        self.adsh_scores = state_tensor("adsh", state, "scores", self.adsh_scores).float()
