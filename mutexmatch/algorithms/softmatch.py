"""SoftMatch (Chen et al., ICLR 2023): a truncated-Gaussian sample weight instead of a confidence threshold, and
Uniform Alignment (UA) of the probabilities the weight reads.

Per step (the paper's Section 3; USB's ``SoftMatchWeightingHook`` and ``DistAlignEMAHook``, the released code), with
momentum m (``ema_p``):

- UA: p^w <- Normalize(p^w * (p_target + eps) / (E[p^w] + eps)), eps = 1e-6 as in the released code, where E[p^w]
  is the EMA of the batch-mean p^w (the first batch's mean to start; the current batch is recorded first) and the
  target is uniform, or with ``dist_uniform`` false the EMA of the labeled batch-mean prediction (from 1/C): the
  alignment piece :class:`~mutexmatch.algorithms.alignment.DistributionAlignment` with estimate ``ema`` and
  ratio ``usb``;
- the Gaussian's parameters are the EMAs of the mean and the (unbiased) variance of max p^w over each batch,
  mu_t = m mu_{t-1} + (1 - m) mean_b max p^w_b and sigma_t^2 likewise, from mu_0 = 1/C and sigma_0^2 = 1, updated
  with the current batch before weighting;
- the weight is lambda(p) = exp(-(max p - mu_t)^2 / (2 sigma_t^2 / n_sigma^2)) for max p < mu_t and 1 otherwise
  (lambda_max = 1; the released code narrows the Gaussian by ``n_sigma`` = 2 standard deviations);
- L_u = 1/muB sum_b lambda(p^w_b) H(\\hat p^w_b, p^s_b), with the hard pseudo-label from the *unaligned* p^w (UA
  only shapes the weights, as in the released code).

Everything stays on the device (USB reads the batch statistics to the host with ``.item()``; the EMAs here stay
tensors).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.alignment import DistributionAlignment
from mutexmatch.algorithms.base import StepInputs, TrainContext, Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.params import Positive, PositiveConsistencyParams, Probability


class SoftMatchParams(PositiveConsistencyParams.without("_OwnAlignment", dist_align=False)):
    """SoftMatch: L_u's weight, the EMA momentum, the Gaussian's width and UA's target (its own alignment, so no
    ReMixMatch ``dist_align``)."""

    ema_p: Probability = Field(0.999, description="[λ] momentum of the EMAs of FreeMatch's / SoftMatch's "
                               "thresholds and statistics.")
    n_sigma: Positive = Field(2.0, description="SoftMatch: the Gaussian weight's width is sigma_t / n_sigma.")
    dist_uniform: bool = Field(True, description="SoftMatch Uniform Alignment towards the uniform distribution; "
                               "false: towards the EMA of the labeled predictions.")


def _ema(old: Tensor, new: Tensor, m: float) -> Tensor:
    return old * m + (1 - m) * new


class TruncatedGaussian:
    """The weight's state: mu_t and sigma_t^2 of max p^w."""

    def __init__(self, num_classes: int, momentum: float, n_sigma: float) -> None:
        self.momentum, self.n_sigma = momentum, n_sigma
        self.mu, self.var = torch.tensor(1.0 / num_classes), torch.tensor(1.0)

    def __call__(self, probs: Tensor) -> Tensor:
        """Update mu_t, sigma_t^2 with this batch, then lambda(p) per row."""
        if self.mu.device != probs.device:
            self.mu, self.var = self.mu.to(probs.device), self.var.to(probs.device)
        conf = probs.max(dim=1).values
        self.mu = _ema(self.mu, conf.mean(), self.momentum)
        self.var = _ema(self.var, conf.var(unbiased=True), self.momentum)
        below = torch.clamp(conf - self.mu, max=0.0)
        return torch.exp(-(below ** 2) / (2 * self.var / (self.n_sigma ** 2)))


@register_algorithm("softmatch")
class SoftMatch(FixMatch):
    """SoftMatch: L_u weighted by a truncated Gaussian of the confidence, on uniformly aligned probabilities."""

    Params = SoftMatchParams
    params: SoftMatchParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        p = self.params
        # UA: the configurable alignment piece with an EMA estimate and USB's quotient (its epsilon, its first batch).
        self.alignment = DistributionAlignment(ctx.num_classes, estimate="ema", momentum=p.ema_p, ratio="usb",
                                               target="uniform" if p.dist_uniform else "model")
        self.weighting = TruncatedGaussian(ctx.num_classes, p.ema_p, p.n_sigma)

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        """A placeholder: the weights need the labeled predictions too (UA's target), so :meth:`views` sets them."""
        return torch.ones_like(probs_w[:, 0])

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        v = super().views(model, inp)      # p^w unaligned (no dist_align): the pseudo-labels' source
        v.mask = self.weighting(self.alignment(v.probs_w, torch.softmax(v.logits_lb.detach(), dim=1)))
        return v

    def state_dict(self) -> dict[str, Any]:
        w = self.weighting
        return {**super().state_dict(), "alignment": self.alignment.state_dict(),
                "weighting": {"mu": w.mu.detach().cpu().clone(), "var": w.var.detach().cpu().clone()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)      # checks the keys
        self.alignment.load_state_dict(state["alignment"])
        for name in ("mu", "var"):
            t = state["weighting"][name]
            if not isinstance(t, Tensor) or t.shape != ():
                raise ValueError(f"softmatch state weighting.{name}: expected a scalar tensor, got "
                                 f"{type(t).__name__} {tuple(getattr(t, 'shape', ()))}")
            setattr(self.weighting, name, t.to(getattr(self.weighting, name).device).clone())
