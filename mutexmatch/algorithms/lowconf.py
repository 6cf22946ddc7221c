"""The paper's low-confidence ablations FULL, SOFT and MSE (Section "Utilization of Low-confidence Samples",
settings (i)-(iii); Table "r1"): FixMatch plus a loss on the samples below the threshold."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from mutexmatch.algorithms.base import Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import LowConfidenceParams


class _LowConfidence(FixMatch):
    """FixMatch plus lambda_ab1 L_ab1 on the low-confidence samples (Section "Utilization of Low-confidence
    Samples"; Table "r1" varies lambda_ab1, 0 = FixMatch). Subclasses give the per-row loss."""

    terms = (*FixMatch.terms, "ab1")
    Params = LowConfidenceParams
    params: LowConfidenceParams

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), "ab1": self.params.lambda_ab1}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        return {"ab1": ((1.0 - out["mask"]) * self.per_row(out, v)).mean()}

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        raise NotImplementedError


@register_algorithm("lowconf_full")
class LowConfFull(_LowConfidence):
    """FULL, setting (i): H(\\hat p^w, p^s) with the hard pseudo-label on low-confidence samples too."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return F.cross_entropy(v.logits_s, out["pseudo_label"], reduction="none")


@register_algorithm("lowconf_soft")
class LowConfSoft(_LowConfidence):
    """SOFT, setting (ii): H(p^w, p^s) with the (detached) soft p^w as target."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return soft_cross_entropy(v.probs_w, v.logits_s)


@register_algorithm("lowconf_mse")
class LowConfMSE(_LowConfidence):
    """MSE, setting (iii): E(z^w, z^s), the mean squared difference of the backbone features (mean over the feature
    dimension). The paper writes z^w = theta(x^w) without a stop-gradient, so both views receive gradient."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return F.mse_loss(v.feats_w, v.feats_s, reduction="none").mean(dim=1)

