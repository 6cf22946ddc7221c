"""Mean Teacher (Tarvainen & Valpola, "Mean teachers are better role models", NeurIPS 2017, Sec. 2), as USB runs it:

    L = L_sup + lambda_u w(t) 1/(muB C) sum_i || softmax(f_theta(x_i^w2)) - softmax(f_theta'(x_i^w)) ||^2

theta' is the exponential moving average of the weights (the trainer's EMA, ``train.ema``: USB's ``ema_m``, the
model evaluated too), its prediction on one weak view the target for the student's on a second weak view (USB's
``x_ulb_s`` of Mean Teacher is a weak view). w(t) is USB's linear ramp-up (the paper's is sigmoid-shaped). As USB:
the labeled batch updates BatchNorm's running statistics; the teacher's forward (EMA weights, train mode, no
gradient) and the student's unlabeled forward leave them alone.
"""
from __future__ import annotations

from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.algorithms.pimodel import consistency_output
from mutexmatch.params import RampUpParams, Weight


class MeanTeacherParams(RampUpParams):
    """Mean Teacher: the consistency weight (USB's classic-CV 50) and its ramp-up; the EMA decay is ``train.ema``."""

    lambda_u: Weight = Field(50.0, description="[w_max] weight of the consistency loss once ramped up (USB's "
                             "ulb_loss_ratio, 50 in its classic-CV configs).")


@register_algorithm("meanteacher")
class MeanTeacher(Algorithm):
    """Mean Teacher: L_sup + lambda_u w(t) times the squared difference between the student's predicted distribution
    and the EMA teacher's on another weak view (Tarvainen & Valpola 2017; USB's linear ramp-up)."""

    terms = ("sup", "mse")
    step = StepSpec(views=("lb", "weak", "weak2"), forward="separate", teacher=True)
    Params = MeanTeacherParams
    params: MeanTeacherParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        if inp.teacher is None:
            raise ValueError("meanteacher: StepInputs.teacher is None (the step must give the EMA model's forward)")
        logits_lb = model.tpc(inp.forward(inp.view("lb")))           # BatchNorm statistics: the labeled batch only
        logits_t = inp.teacher(inp.view("weak"))                     # f_theta'(x^w): EMA weights, no gradient
        logits_s = model.tpc(inp.forward(inp.view("weak2"), update_bn=False))
        return consistency_output(self, inp, logits_lb, logits_t, logits_s)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "mse": self.params.lambda_u}
