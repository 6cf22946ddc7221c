"""FixMatch with UPS's negative cross-entropy (the paper's "F w. NCE (1)-(3)" baselines, Table "nce")."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from mutexmatch.algorithms.base import Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.params import NCEParams


@register_algorithm("fixmatch_nce")
class FixMatchNCE(FixMatch):
    """FixMatch with UPS's negative cross-entropy, no TNC (Section "Utilization of Low-confidence Samples", (iv), (v);
    Table "nce").

    Positive part: L_p with threshold tau_p. Negative labels (UPS): every class c with p^w_c <= tau_n,
    on every unlabeled sample. NCE per sample: -(1/s) sum_{negative c} log(1 - q_c), s = its number of negative
    labels, averaged over the muB samples, with
      nce_variant 1, 2 ("F w. NCE (1)/(2)"): q = softmax(logits_w), NCE learns the complementary labels directly;
                                             the two differ only in tau_p (table: 0.95 and 0.7);
      nce_variant 3 ("F w. NCE (3)"): q = p^s, the strong view, i.e. consistency between p^w and p^s by NCE.
    tau_p None takes the table's value for the variant; tau_n defaults to the table's 0.05. The NCE term has weight
    1 (the paper gives it none). UPS's uncertainty-based selection is not part of these ablations (the text selects
    by the two thresholds only)."""

    terms = (*FixMatch.terms, "nce")
    Params = NCEParams
    params: NCEParams
    TABLE_TAU_P: ClassVar[dict[int, float]] = {1: 0.95, 2: 0.7, 3: 0.95}

    @property
    def threshold(self) -> float:
        tau_p = self.params.tau_p
        return self.TABLE_TAU_P[self.params.nce_variant] if tau_p is None else tau_p

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), "nce": 1.0}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        negative = (v.probs_w <= self.params.tau_n).to(v.probs_w.dtype)         # UPS negative labels, no gradient
        q = torch.softmax(v.logits_w if self.params.nce_variant in (1, 2) else v.logits_s, dim=1)
        # 1 - q is floored so a fully confident wrong prediction gives a large finite loss, not inf.
        ell = -(negative * (1.0 - q).clamp_min(1e-6).log()).sum(dim=1) / negative.sum(dim=1).clamp_min(1.0)
        return {"nce": ell.mean(), "neg_mask": negative}

