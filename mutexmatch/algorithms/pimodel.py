"""Π-Model (Laine & Aila, "Temporal Ensembling for Semi-Supervised Learning", ICLR 2017, Sec. 2.1), as USB runs it:

    L = L_sup + lambda_u w(t) 1/(muB C) sum_i || softmax(f(x_i^w2)) - softmax(f(x_i^w)) ||^2

two weak augmentations of each unlabeled image (USB's ``x_ulb_s`` of the Π-Model is a second *weak* view); the
first is the target (detached), the gradient flows through the second. w(t) = min(t / (``unsup_warm_up`` T), 1), a
linear ramp-up (the paper's is Gaussian over 80 epochs). Three forwards, as USB: the labeled batch updates
BatchNorm's running statistics, the two unlabeled batches are normalised by their own statistics and leave the
running ones alone (USB's ``bn_controller``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.params import RampUpParams, Weight
from mutexmatch.selection import rampup_weight


def probability_mse(logits: Tensor, target: Tensor) -> Tensor:
    """1/(N C) sum || softmax(logits) - target ||^2: the Π-Model / Mean Teacher consistency (USB's 'mse')."""
    return F.mse_loss(torch.softmax(logits, dim=-1), target, reduction="none").mean(dim=1).mean()


class PiModelParams(RampUpParams):
    """Π-Model: the consistency weight (USB's classic-CV 10) and its ramp-up."""

    lambda_u: Weight = Field(10.0, description="[w_max] weight of the consistency loss once ramped up (USB's "
                             "ulb_loss_ratio, 10 in its classic-CV configs).")


@register_algorithm("pimodel")
class PiModel(Algorithm):
    """Π-Model: L_sup + lambda_u w(t) times the squared difference of the predicted distributions of two weak views
    (Laine & Aila 2017, Sec. 2.1; USB's linear ramp-up and stop-gradient on the first view)."""

    terms = ("sup", "mse")
    step = StepSpec(views=("lb", "weak", "weak2"), forward="separate")
    Params = PiModelParams
    params: PiModelParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        logits_lb = model.tpc(inp.forward(inp.view("lb")))           # BatchNorm statistics: the labeled batch only
        logits_w = model.tpc(inp.forward(inp.view("weak"), update_bn=False))
        logits_w2 = model.tpc(inp.forward(inp.view("weak2"), update_bn=False))
        return consistency_output(self, inp, logits_lb, logits_w, logits_w2)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "mse": self.params.lambda_u}


def consistency_output(alg: Algorithm, inp: StepInputs, logits_lb: Tensor, logits_target: Tensor,
                       logits_student: Tensor) -> StepOutput:
    """L_sup + lambda_u w(t) MSE(softmax(student), softmax(target)) with the target detached, and the target's
    argmax / max probability as diagnostics (Π-Model, Mean Teacher)."""
    sup = F.cross_entropy(logits_lb, inp.targets_lb)
    probs_t = torch.softmax(logits_target.detach(), dim=-1)
    mse = probability_mse(logits_student, probs_t)
    ramp = rampup_weight(inp.step, alg.ctx.total_steps, alg.params.unsup_warm_up)    # w(t)
    conf, pseudo_label = probs_t.max(dim=1)
    return StepOutput(loss=sup + alg.params.lambda_u * ramp * mse, terms={"sup": sup, "mse": mse}, conf=conf,
                      pseudo_label=pseudo_label)
