"""SAW, Smoothed Adaptive Weighting (Lai et al., ICML 2022), as USB 0.3.2 runs it (``semilearn/imb_algorithms/saw``;
the lockstep test is its reference).

Class weights from effective numbers (Cui et al., CVPR 2019): beta = (N - 1) / N, w_c = (1 - beta) / (1 - beta^{n_c}),
normalised to sum to C, with N the mean class count (USB fixes the paper's hyper-parameter N that way). The base's
supervised loss weighs each labeled row by w^lb_{y} (n_c: the labeled counts), its consistency loss multiplies the
confidence mask by w^ulb of the pseudo-label:

  L_sup = mean_i w^lb_{y_i} CE(z_i, y_i),   L_p = mean_j mask_j w^ulb_{\\hat y_j} CE(z^s_j, \\hat y_j);

w^ulb starts from n_c = N_u / C for every class (float64, as USB's numpy) and, at every boundary of USB's epoch
(``epoch_steps``), is recomputed from the pool's predicted class counts (the TPC's argmax on the unlabeled pool, at
least 1 per class). The reported mask is the base's confidence mask, unweighted.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import Views
from mutexmatch.imb_algorithms.base import (EPOCH_STEPS_DOC, EpochNeeds, ImbAlgorithm, ImbParams,
                                            register_imb_algorithm, state_tensor)
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import USB_EPOCH_STEPS, Steps


def effective_weights(counts: Tensor) -> Tensor:
    """w_c = (1 - beta) / (1 - beta^{n_c}), beta = (N - 1) / N, N = mean n_c, normalised to sum to C (float32 from
    integer counts, float64 from float64 counts, as USB)."""
    n = torch.sum(counts) / len(counts)
    beta = (n - 1) / n
    weights = (1.0 - beta) / (1.0 - torch.pow(beta, counts))
    return weights / weights.sum() * len(counts)


class SawParams(ImbParams):
    """SAW: no parameter of its own in USB (its classic_cv_imb configs set none); USB's epoch length."""

    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"SAW: {EPOCH_STEPS_DOC}")


@register_imb_algorithm("saw")
class SAW(ImbAlgorithm):
    """SAW (Lai et al., 2022): losses weighted per class by effective numbers, the unlabeled weights from the pool's
    predictions at every epoch boundary."""

    imb_params_model = SawParams
    imb: SawParams
    imb_terms = ()
    bases = ("fixmatch", "remixmatch")
    epoch_needs = EpochNeeds(pool_logits=True)

    def imb_init(self) -> None:
        self.saw_lb = effective_weights(self.ctx.labeled_counts.cpu()).to(self.ctx.device)
        uniform = torch.full((self.num_classes,), self.ctx.num_unlabeled / self.num_classes, dtype=torch.float64)
        self.saw_ulb = effective_weights(uniform).to(self.ctx.device)

    def imb_term_weights(self) -> dict[str, float]:
        return {}

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        """The base's terms with L_sup and L_p weighted per class (module doc); its diagnostics unchanged."""
        out = super().base_terms(v)                                         # type: ignore[misc]
        lb_w, ulb_w = self.saw_lb.to(v.logits_lb.device), self.saw_ulb.to(v.logits_lb.device)
        sup = (F.cross_entropy(v.logits_lb, v.targets_lb, reduction="none") * lb_w[v.targets_lb]).mean()
        pseudo = out["pseudo_label"]
        p = (F.cross_entropy(v.logits_s, pseudo, reduction="none") * (v.mask * ulb_w[pseudo])).mean()
        return {**out, "sup": sup, "p": p, "loss": sup + self.params.lambda_p * p}

    def soft_loss(self, term: str, targets: Tensor, logits: Tensor) -> Tensor:
        """ReMixMatch's soft terms as USB's SAW losses make them: ``sup`` (SAWCELoss) the soft cross-entropy weighted
        by the labeled weight of each target's argmax; ``p`` and ``kl`` (SAWConsistencyLoss, which replaces a soft
        target by its argmax before the loss) the hard cross-entropy on the argmax, weighted by its unlabeled
        weight."""
        hard = targets.argmax(dim=-1)
        if term == "sup":
            return (soft_cross_entropy(targets, logits) * self.saw_lb.to(logits.device)[hard]).mean()
        return (F.cross_entropy(logits, hard, reduction="none") * self.saw_ulb.to(logits.device)[hard]).mean()

    @torch.no_grad()
    def on_epoch_end(self, pool_logits: Tensor) -> None:
        """USB's after_train_epoch: w^ulb from the pool's predicted class counts (at least 1 each)."""
        counts = torch.bincount(pool_logits.argmax(dim=-1).cpu(), minlength=self.num_classes)
        self.saw_ulb = effective_weights(torch.maximum(counts, torch.ones_like(counts))).to(self.saw_lb.device)

    def imb_state_dict(self) -> dict[str, Any]:
        return {"ulb_weights": self.saw_ulb.detach().cpu().clone()}

    def imb_load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().imb_load_state_dict(state)
        self.saw_ulb = state_tensor("saw", state, "ulb_weights", self.saw_ulb)  # its dtype: float64 before a boundary
