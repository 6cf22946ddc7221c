"""Pseudo-Label (Lee, "Pseudo-Label: The Simple and Efficient Semi-Supervised Learning Method for Deep Neural
Networks", ICML 2013 Workshop on Challenges in Representation Learning), as USB runs it:

    L = L_sup + lambda_p * alpha(t) * 1/muB sum 1(max p^w >= tau) H(argmax p^w, p^w)        (Lee 2013, Eq. 15)

The prediction and its pseudo-label come from the *same* (weakly augmented) view; the gradient flows through the
prediction, not the argmax. alpha(t) is Eq. (16)'s linear ramp-up with T_1 = 0 and T_2 = ``unsup_warm_up`` x the
run's steps (:func:`mutexmatch.selection.rampup_weight`). Lee's original keeps every sample (no tau) and uses
dropout; USB adds the confidence threshold tau = 0.95 (``tau`` = 0 would be Lee's, but the parameter must lie in
(0, 1], so tau's smallest values approach it). The step is USB's (issue 32): two forwards, the labeled batch
updating BatchNorm's running statistics, the weak batch normalised by its own statistics and kept out of the running
ones (USB's ``bn_controller``); no strong view is made. Before issue 32 it was one concatenated forward of
[labeled | weak | strong] (BatchNorm over all three, a third of the images computed only to be ignored); that form is
not kept (it is neither Lee's nor USB's), and its stored runs are told apart by the config hash (``hash_revision``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.losses import confidence_mask
from mutexmatch.params import FixMatchParams, Fraction
from mutexmatch.selection import rampup_weight


class PseudoLabelParams(FixMatchParams.without("PseudoLabelParams", dist_align=False)):
    """Pseudo-Label: the confidence threshold, the unlabeled loss weight and its ramp-up length."""

    hash_revision = 1   # issue 32: USB's two forwards replaced one concatenated forward with a strong view

    unsup_warm_up: Fraction = Field(0.4, description="Pseudo-Label: fraction of the run over which "
                                 "the unlabeled loss weight ramps up linearly from 0 (Lee 2013, Eq. 16; USB's 0.4).")


@register_algorithm("pseudolabel")
class PseudoLabel(Algorithm):
    """Pseudo-Label: L_sup + lambda_p alpha(t) times the confidence-masked cross-entropy of the weak view with its
    own argmax (Lee 2013, Eqs. 15-16, with USB's threshold)."""

    terms = ("sup", "p")
    step = StepSpec(views=("lb", "weak"), forward="separate")
    Params = PseudoLabelParams
    params: PseudoLabelParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        logits_lb = model.tpc(inp.forward(inp.view("lb")))                            # BN statistics: labeled
        logits_w = model.tpc(inp.forward(inp.view("weak"), update_bn=False))
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
