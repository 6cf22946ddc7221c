"""DebiasPL (Wang et al., CVPR 2022, "Debiased Learning from Naturally Imbalanced Pseudo-Labels"), in two forms.

Both keep a running estimate p^ of the model's class marginal on the unlabeled weak views (start 1/C), debias the
pseudo-labels by it (p~ = softmax(z^w - tau log p^), the counterfactual logit adjustment) and add the adaptive
margin to the strong view's logits in the consistency loss (CE(z^s + tau log p^, argmax p~)·mask):

- ``form: usb`` (USB 0.3.2, ``semilearn/imb_algorithms/debiaspl``; the lockstep test's reference): p^ <- ema_m p^ +
  (1 - ema_p) mean(softmax(z^w)), where ``ema_m`` is USB's model-EMA momentum (``usb_ema_m``) and ``ema_p`` the
  prior's; the pseudo-labels use the updated p^; the margin uses the p^ of the step's start (its hook sets it before
  the step) and tau = 0.4 whatever ``tau`` is (``DebiasPLConsistencyLoss`` sets ``self.tau = 0.4``);
- ``form: paper`` (the authors' frank-xwang/debiased-pseudo-labeling, ``main_DebiasPL.py``): the pseudo-labels use
  the p^ of the step's start, then p^ <- m p^ + (1 - m) mean(softmax(z^w)) (m = ``ema_p``), and the margin uses the
  updated p^ with ``tau``.

The forms agree when usb_ema_m = ema_p and tau = 0.4 but for which p^ the pseudo-labels and the margin read (one step
apart). With FixMatch as the base (the mixin debiases the base's alignment hook and its strong logits).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import Views
from mutexmatch.imb_algorithms.base import ImbAlgorithm, ImbParams, register_imb_algorithm
from mutexmatch.params import Fraction, Weight

USB_MARGIN_TAU = 0.4     # DebiasPLConsistencyLoss.__init__: self.tau = 0.4, its tau argument unused


class DebiasPLParams(ImbParams):
    """DebiasPL: the logit-adjustment strength, the prior's momentum and the form (USB's get_argument defaults)."""

    form: Literal["usb", "paper"] = Field("usb", description="DebiasPL: `usb` = semilearn 0.3.2's computation (the "
                                          "margin's tau fixed at 0.4, the prior decayed by usb_ema_m); `paper` = "
                                          "the authors' code (docs/longtail.md).")
    tau: Weight = Field(0.4, description="[τ] DebiasPL: strength of the debiasing tau log p^ (USB's debiaspl_tau); "
                        "in the usb form the margin's is 0.4 regardless.")
    ema_p: Fraction = Field(0.999, description="[m] DebiasPL: momentum of the class prior p^ (USB's debiaspl_ema_p).")
    usb_ema_m: Fraction = Field(0.999, description="DebiasPL usb form: the factor USB multiplies the old prior by, its "
                                "model-EMA momentum ema_m (0.999 in its classic-CV-imb configs); unused in the "
                                "paper form.")


@register_imb_algorithm("debiaspl")
class DebiasPL(ImbAlgorithm):
    """DebiasPL (Wang et al., 2022): pseudo-labels debiased by the running class prior, an adaptive margin on the
    strong view; two forms, USB's and the paper's (`form`)."""

    imb_params_model = DebiasPLParams
    imb: DebiasPLParams
    bases = ("fixmatch",)

    def imb_init(self) -> None:
        self.p_hat = torch.full((self.num_classes,), 1 / self.num_classes, device=self.ctx.device)
        self.p_start = self.p_hat

    def imb_term_weights(self) -> dict[str, float]:
        return {}

    def align(self, probs_w: Tensor, logits_lb: Tensor) -> Tensor:
        """USB's ``compute_prob`` (usb form) or the authors' ``causal_inference`` + ``update_qhat`` (paper form) on
        the weak view's probabilities; the base's alignment (if any) after it."""
        imb, self.p_start = self.imb, self.p_hat
        updated = self._momentum() * self.p_hat + (1 - imb.ema_p) * probs_w.mean(dim=0)
        prior = updated if imb.form == "usb" else self.p_hat
        # softmax(z - tau log p): log softmax(z) differs from z by a per-row constant, which softmax ignores
        debiased = torch.softmax(torch.log(probs_w) - imb.tau * torch.log(prior), dim=1)
        self.p_hat = updated
        return super().align(debiased, logits_lb)                          # type: ignore[misc]

    def _momentum(self) -> float:
        return self.imb.usb_ema_m if self.imb.form == "usb" else self.imb.ema_p

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        """The base's terms with the adaptive margin on the strong logits: z^s + tau log p^."""
        usb = self.imb.form == "usb"
        tau, prior = (USB_MARGIN_TAU, self.p_start) if usb else (self.imb.tau, self.p_hat)
        margined = dataclasses.replace(v, logits_s=v.logits_s + tau * torch.log(prior))
        return super().base_terms(margined)                                # type: ignore[misc]

    def imb_state_dict(self) -> dict[str, Any]:
        return {"p_hat": self.p_hat}

    def imb_load_state_dict(self, state: Any) -> None:
        super().imb_load_state_dict(state)
        self.p_hat = self.p_start = state["p_hat"].to(self.p_hat.device)
