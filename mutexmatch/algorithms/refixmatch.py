"""ReFixMatch, as USB's code after 0.3.2 runs it (microsoft/Semi-supervised-learning, semilearn/algorithms/refixmatch,
added in March 2024, commit 639cfbf; not in any PyPI release): FixMatch plus a KL term on the low-confidence samples
FixMatch discards. The golden test (tests/mutexmatch/algorithms/usb/test_usb_after_032_golden.py) was made by it.

    L = L_sup + lambda_p L_u + lambda_p L_refix
    L_refix = 1/muB sum_b (1 - 1(max p^w_b >= tau)) KL(softmax(p^w_b / T) || softmax(p^s_logits_b / T))

with L_u FixMatch's thresholded hard pseudo-label loss (Eq. p) and T = 0.5 (USB's ``consistency_loss(..., 'kl')``
fixes it; its ``T`` argument is not read). USB passes the weak view's *probabilities* p^w as the KL's target
"logits", so the target is softmax(p^w / T), a much flatter distribution than the sharpened prediction
softmax(logits^w / T); ours follows USB. Its distribution-alignment hook is CReST's
(imbalanced learning), so ``dist_align`` is fixed off.
"""
from __future__ import annotations

import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.params import FixMatchParams, Positive


class ReFixMatchParams(FixMatchParams.without("_ReFixMatchBase", dist_align=False)):
    """ReFixMatch: FixMatch's tau and lambda_p (which weighs L_u and L_refix alike, as USB's ulb_loss_ratio) and
    the KL's temperature. Defaults: USB's (p_cutoff 0.95, ulb_loss_ratio 1.0, T 0.5 fixed in its KL)."""

    refix_temperature: Positive = Field(0.5, description="[T] ReFixMatch: temperature of both sides of the KL on "
                                        "low-confidence samples (USB fixes 0.5).")


@register_algorithm("refixmatch")
class ReFixMatch(FixMatch):
    """ReFixMatch: FixMatch plus a KL consistency on the low-confidence samples (USB after 0.3.2)."""

    terms = ("sup", "p", "refix")
    Params = ReFixMatchParams
    params: ReFixMatchParams

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        out = super().base_terms(v)
        t = self.params.refix_temperature
        kl = F.kl_div(F.log_softmax(v.logits_s / t, dim=-1), F.softmax(v.probs_w / t, dim=-1), reduction="none")
        out["refix"] = (kl.sum(dim=1) * (1.0 - out["mask"])).mean()
        out["loss"] = out["loss"] + self.params.lambda_p * out["refix"]
        return out

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), "refix": self.params.lambda_p}
