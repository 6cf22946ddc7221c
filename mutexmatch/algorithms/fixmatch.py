"""FixMatch, and the confidence-threshold seam every threshold-family method overrides."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, Views, register_algorithm
from mutexmatch.losses import confidence_mask, fixmatch_loss
from mutexmatch.params import FixMatchParams


@register_algorithm("fixmatch")
class FixMatch(Algorithm):
    """FixMatch: L_sup + lambda_p L_p (Eqs. s, p); ``dist_align`` gives the papers' "FixMatch w. DA" baseline."""

    terms = ("sup", "p")
    Params = FixMatchParams
    params: FixMatchParams

    @property
    def threshold(self) -> float:
        return self.params.tau

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        """The threshold seam, on each unlabeled batch: per unlabeled row 1 where p^w is confident enough, else 0
        (float, detached): here 1(max p^w >= tau) of Eq. (p). Override for per-class or adaptive thresholds,
        keeping any state in ``state_dict`` (per-sample state indexed by ``inp.pool_pos``)."""
        return confidence_mask(probs_w, self.threshold)

    def align(self, probs_w: Tensor, logits_lb: Tensor) -> Tensor:
        """The distribution-alignment hook: p^w aligned by ``self.dist_align`` (the labeled batch's probabilities
        feed a ``model`` target), or p^w unchanged without it."""
        if self.dist_align is None:
            return probs_w
        probs_lb = None if self.dist_align.labeled is None else torch.softmax(logits_lb.detach(), dim=1)
        return self.dist_align(probs_w, probs_lb)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        b, u = self._split(inp)
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        probs_w = self.align(torch.softmax(logits_w.detach(), dim=1), logits_lb)
        _, feats_w, feats_s = inp.feats.split([b, u, u])
        return Views(num_lb=b, targets_lb=inp.targets_lb, logits_lb=logits_lb, logits_w=logits_w,
                     logits_s=logits_s, probs_w=probs_w, mask=self.confidence_mask(probs_w, inp), feats_w=feats_w,
                     feats_s=feats_s)

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        return fixmatch_loss(logits_lb=v.logits_lb, targets_lb=v.targets_lb, logits_w=v.logits_w,
                             logits_s=v.logits_s, mask=v.mask, lambda_p=self.params.lambda_p, probs_w=v.probs_w)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}

