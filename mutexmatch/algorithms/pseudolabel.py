"""Pseudo-Label (Lee, "Pseudo-Label: The Simple and Efficient Semi-Supervised Learning Method for Deep Neural
Networks", ICML 2013 Workshop on Challenges in Representation Learning), as USB runs it:

    L = L_sup + lambda_p * alpha(t) * 1/muB sum 1(max p^w >= tau) H(argmax p^w, p^w)        (Lee 2013, Eq. 15)

The prediction and its pseudo-label come from the *same* (weakly augmented) view; the gradient flows through the
prediction, not the argmax. alpha(t) is Eq. (16)'s linear ramp-up with T_1 = 0 and T_2 = ``unsup_warm_up`` x the
run's steps (:func:`mutexmatch.selection.rampup_weight`). Lee's original keeps every sample (no tau) and uses
dropout; USB adds the confidence threshold tau = 0.95 (``tau`` = 0 would be Lee's, but the parameter must lie in
(0, 1], so tau's smallest values approach it). Our trainer computes the strong view too and this algorithm ignores
it; BatchNorm sees one concatenated batch, where USB forwards the labeled and unlabeled batches separately and
keeps the unlabeled one out of the running statistics (docs/training.md, Pseudo-Label).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, register_algorithm
from mutexmatch.losses import confidence_mask
from mutexmatch.params import FixMatchParams, Fraction
from mutexmatch.selection import rampup_weight


class PseudoLabelParams(FixMatchParams.without("PseudoLabelParams", dist_align=False)):
    """Pseudo-Label: the confidence threshold, the unlabeled loss weight and its ramp-up length."""

    unsup_warm_up: Fraction = Field(0.4, description="Pseudo-Label: fraction of the run over which "
                                 "the unlabeled loss weight ramps up linearly from 0 (Lee 2013, Eq. 16; USB's 0.4).")


@register_algorithm("pseudolabel")
class PseudoLabel(Algorithm):
    """Pseudo-Label: L_sup + lambda_p alpha(t) times the confidence-masked cross-entropy of the weak view with its
    own argmax (Lee 2013, Eqs. 15-16, with USB's threshold)."""

    terms = ("sup", "p")
    Params = PseudoLabelParams
    params: PseudoLabelParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        logits_lb, logits_w = model.tpc(inp.feats[:b + u]).split([b, u])
        sup = F.cross_entropy(logits_lb, inp.targets_lb)
        probs_w = torch.softmax(logits_w.detach(), dim=1)
        mask = confidence_mask(probs_w, self.params.tau)                              # 1(max p^w >= tau)
        conf, pseudo_label = probs_w.max(dim=1)                                       # argmax p^w
        p = (F.cross_entropy(logits_w, pseudo_label, reduction="none") * mask).mean()
        alpha = rampup_weight(inp.step, self.ctx.total_steps, self.params.unsup_warm_up)  # alpha(t), Eq. (16)
        return StepOutput(loss=sup + self.params.lambda_p * alpha * p, terms={"sup": sup, "p": p}, mask=mask,
                          conf=conf, pseudo_label=pseudo_label)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}
