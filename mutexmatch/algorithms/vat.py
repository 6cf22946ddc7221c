"""Virtual Adversarial Training (Miyato et al., "Virtual Adversarial Training: A Regularization Method for Supervised
and Semi-Supervised Learning", TPAMI 2018), with entropy minimisation (VAT+EntMin, Sec. 4), as USB runs it:

    r_adv = eps g / ||g||,  g = grad_d KL(p(y|x^w) || p(y|x^w + d)) at d = xi u / ||u||, u ~ N(0, I)   (Eqs. 12-13)
    L = L_sup + lambda_u w(t) KL(p(y|x^w) || p(y|x^w + r_adv)) + lambda_ent H(p(y|x^w))

one power iteration (K = 1), the norms per image over all pixels; p(y|x^w) is detached as the KL's target but keeps
its gradient in the entropy term. The probe d (``vat_probe``, issue 32): USB's and the original code's ||d|| = xi =
1e-6 over all pixels of an image puts ~2e-8 on each pixel of a CIFAR image, below float32's spacing near 1 (1.2e-7),
so most pixels of x + d round back to x and g is decided by rounding (cosine with the float64 direction ~0.02 on a
small CNN, tests/mutexmatch/algorithms/test_vat.py). ``relative`` (the default) scales the probe to the image,
||d_i|| = 1e-4 ||x_i||: still a finite difference of the same direction (float64 finds the two directions 0.9998
alike), but one float32 resolves (cosine 0.999 with float64). ``usb`` keeps USB's for the lockstep test. w(t) is
USB's linear ramp-up. The noise u is drawn from the global torch generator of the images' device (checkpointed with
the run, so a resumed run draws the same). All unlabeled forwards leave BatchNorm's running statistics alone (USB's
``bn_controller``); the labeled one updates them.
USB's VAT sees only a weak view: the step makes no strong one.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.params import Positive, RampUpParams, Weight, earlier
from mutexmatch.selection import rampup_weight

XI = 1e-6   # USB's vat_loss default (the finite-difference step of the power iteration), ||d|| in `usb`
# ||d_i|| / ||x_i|| in `relative`: the smallest power of ten whose float32 direction matched float64's (cosine 0.999
# at 1e-4, 0.92 at 1e-5, 0.28 at 1e-6 on a small CNN over N(0, 1) CIFAR-sized images; issue 32, and
# tests/mutexmatch/algorithms/test_vat.py checks 1e-4)
RELATIVE_XI = 1e-4


class VATParams(RampUpParams):
    """VAT: the adversarial radius, the entropy weight and the ramped unlabeled weight (USB's defaults)."""

    vat_eps: Positive = Field(6.0, description="[ε] L2 radius of the adversarial perturbation r_adv, per image, in "
                              "normalised pixel units (USB's vat_eps).")
    lambda_ent: Weight = Field(0.06, description="Weight of the entropy-minimisation term H(p(y|x^w)) (USB's "
                               "ent_loss_ratio).")
    vat_probe: Literal["relative", "usb"] = Field(
        "relative", description="Length of the power iteration's probe d: `relative` = 1e-4 ||x|| per image, which "
        "float32 resolves; `usb` = 1e-6 (USB, the original code; the rule before issue 32), below float32's spacing "
        "near 1, so x + d mostly rounds back to x (docs/training.md).", json_schema_extra=earlier("usb"))


def l2_normalize(d: Tensor) -> Tensor:
    """d_i / (||d_i||_2 + 1e-16) per image i, over all its other dimensions (USB's _l2_normalize)."""
    norm = d.flatten(1).norm(dim=1).view(-1, *([1] * (d.dim() - 1)))
    return d / (norm + 1e-16)


def kl_with_logits(q_logits: Tensor, p_logits: Tensor) -> Tensor:
    """KL(q || p) = mean_i sum_c q log q - q log p, for logits of q and p (USB's kl_div_with_logit)."""
    q = torch.softmax(q_logits, dim=1)
    return (q * F.log_softmax(q_logits, dim=1)).sum(dim=1).mean() - (q * F.log_softmax(p_logits, dim=1)).sum(dim=1).mean()


@register_algorithm("vat")
class VAT(Algorithm):
    """VAT+EntMin: L_sup + lambda_u w(t) times the KL divergence between the predictions on a weak view and on that
    view plus the virtual adversarial perturbation, + lambda_ent times their entropy (Miyato et al. 2018)."""

    terms = ("sup", "vat", "ent")
    step = StepSpec(views=("lb", "weak"), forward="separate", extra_forwards=1)   # x^w + r_adv keeps activations
    Params = VATParams
    params: VATParams

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        sup = F.cross_entropy(model.tpc(inp.forward(inp.view("lb"))), inp.targets_lb)   # BN statistics: labeled
        x_w = inp.view("weak")
        logits_w = model.tpc(inp.forward(x_w, update_bn=False))
        vat = kl_with_logits(logits_w.detach(), model.tpc(inp.forward(x_w + self.adversarial(model, inp, x_w, logits_w),
                                                                       update_bn=False)))
        probs_w = torch.softmax(logits_w, dim=1)
        ent = -(probs_w * F.log_softmax(logits_w, dim=1)).sum(dim=1).mean()
        ramp = rampup_weight(inp.step, self.ctx.total_steps, self.params.unsup_warm_up)   # w(t)
        conf, pseudo_label = probs_w.detach().max(dim=1)
        loss = sup + self.params.lambda_u * ramp * vat + self.params.lambda_ent * ent
        return StepOutput(loss=loss, terms={"sup": sup, "vat": vat, "ent": ent}, conf=conf, pseudo_label=pseudo_label)

    def adversarial(self, model: nn.Module, inp: StepInputs, x_w: Tensor, logits_w: Tensor) -> Tensor:
        """r_adv (Eqs. 12-13, one power iteration), detached; the model's parameters get no gradient from it."""
        u = l2_normalize(torch.randn(x_w.shape, device=x_w.device, dtype=x_w.dtype))
        d = (self.probe_length(x_w) * u).requires_grad_()
        kl = kl_with_logits(logits_w.detach(), model.tpc(inp.forward(x_w + d, update_bn=False)))
        (grad,) = torch.autograd.grad(kl, d)
        return self.params.vat_eps * l2_normalize(grad)

    def probe_length(self, x_w: Tensor) -> Tensor | float:
        """||d||: xi (``usb``) or RELATIVE_XI ||x_i|| per image (``relative``), no gradient."""
        if self.params.vat_probe == "usb":
            return XI
        return RELATIVE_XI * x_w.detach().flatten(1).norm(dim=1).view(-1, *([1] * (x_w.dim() - 1)))

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "vat": self.params.lambda_u, "ent": self.params.lambda_ent}
