"""AdaMatch (Berthelot et al., "AdaMatch: A Unified Approach to Semi-Supervised Learning and Domain Adaptation",
ICLR 2022) in its semi-supervised form, as USB implements it: FixMatch whose pseudo-labels come from distribution-
aligned weak predictions and whose threshold is relative to the labeled batch's confidence.

    p~^w = Normalize(p^w * p_target / p_model)     (Section 3.2, "Distribution alignment"; EMA form, see below)
    c_tau = tau * mean_b max p_lb                   (Section 3.2, "Relative confidence threshold")
    L = L_sup + lambda_p * 1/muB sum 1(max p~^w >= c_tau) H(argmax p~^w, p^s)

p_model is an EMA (momentum ``ema_p``) of the batch-mean weak unlabeled predictions, p_target an EMA of the labeled
ones (USB's DistAlignEMAHook with p_target_type "model"). The quotient is ``da_ratio``: ``usb`` (the default since
issue 32), (p_target + 1e-6) / (p_model + 1e-6) as USB and the authors' code (google-research/adamatch) compute it,
whose published numbers it produced; ``filled``, p_target / p_model as the paper prints it, lifts a class the model
never predicts by up to 1e12 instead of ~1e5 (:mod:`mutexmatch.algorithms.alignment`). The paper instead aligns with
the current batch's labeled/unlabeled means, interpolates labeled logits between the two BatchNorm passes (random
logit interpolation) and warms the unlabeled weight up with 1/2 - cos(min(pi, 2 pi t/T))/2; USB, whose numbers this
project compares with, does none of the three, and neither do we (docs/training.md, AdaMatch).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.alignment import DistributionAlignment
from mutexmatch.algorithms.base import StepInputs, TrainContext, Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.params import FixMatchParams, Probability, earlier
from mutexmatch.selection import relative_confidence_mask


class AdaMatchParams(FixMatchParams.without("AdaMatchParams", dist_align=False, keep=("da_ratio",))):
    """AdaMatch: tau (relative to the labeled confidence), lambda_p and the momentum of its EMA alignment."""

    ema_p: Probability = Field(0.999, description="AdaMatch: momentum of the EMAs of the labeled and unlabeled "
                               "mean predictions its distribution alignment divides.")
    da_ratio: Literal["filled", "usb"] = Field(
        "usb", description="AdaMatch: form of p_target / p_model: `usb` = (p_target + 1e-6) / (p_model + 1e-6) (USB, "
        "the authors' code; their published numbers); `filled` = the quotient as printed (the rule before issue 32). "
        "They differ when the model never predicts a class (docs/training.md).", json_schema_extra=earlier("filled"))


@register_algorithm("adamatch")
class AdaMatch(FixMatch):
    """AdaMatch: FixMatch with EMA distribution alignment (target: the labeled predictions) and the relative
    confidence threshold tau * mean max p_lb (Berthelot et al. 2022, Section 3.2)."""

    Params = AdaMatchParams
    params: AdaMatchParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        # p_model: EMA of the unlabeled batch means (from the first batch's); p_target: EMA of the labeled ones
        self.dist_align = DistributionAlignment(self.num_classes, estimate="ema", momentum=self.params.ema_p,
                                                target="model", ratio=self.params.da_ratio)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        b, u = self._split(inp)
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        probs_lb = torch.softmax(logits_lb.detach(), dim=1)
        probs_w = self.align(torch.softmax(logits_w.detach(), dim=1), logits_lb)      # p~^w
        mask = relative_confidence_mask(probs_lb, probs_w, self.params.tau)           # 1(max p~^w >= c_tau)
        return Views(num_lb=b, targets_lb=inp.targets_lb, logits_lb=logits_lb, logits_w=logits_w,
                     logits_s=logits_s, probs_w=probs_w, mask=mask)
