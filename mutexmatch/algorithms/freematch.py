"""FreeMatch (Wang et al., ICLR 2023): Self-Adaptive Thresholding (SAT) and the Self-Adaptive class Fairness
regularisation (SAF).

SAT (the paper's Section 3.2; USB's ``FreeMatchThresholdingHook``, the released code), with q_b = p^w_b, momentum
lambda (``ema_p``) and C classes, each step *before* the mask:

- global threshold tau_t = lambda tau_{t-1} + (1 - lambda) 1/muB sum_b max q_b, tau_0 = 1/C;
- local class confidences p~_t(c) = lambda p~_{t-1}(c) + (1 - lambda) 1/muB sum_b q_b(c), p~_0 = 1/C;
- class thresholds tau_t(c) = MaxNorm(p~_t)(c) tau_t = p~_t(c) / max_c' p~_t(c') * tau_t;
- L_u = 1/muB sum_b 1(max q_b >= tau_t(argmax q_b)) H(\\hat q_b, Q_b) with Q_b = p^s_b (the released code's >=).

SAF (Section 3.3): with the EMA histogram of the weak predictions h~_t = lambda h~_{t-1} + (1 - lambda)
Hist_muB(\\hat q_b) (h~_0 = 1/C), and over the *masked* strong predictions their mean p-bar and normalised histogram
h-bar,

    L_f = -H(SumNorm(p~_t / h~_t), SumNorm(p-bar / h-bar))   (= sum_c SumNorm(p~/h~)_c log SumNorm(p-bar/h-bar)_c)

with 1/h = 0 where h = 0 (a class no masked sample predicts), the target and both 1/h detached, and L_f = 0 at a
step without masked samples. L = L_s + lambda_p L_u + lambda_f L_f (the paper's w_u, w_f).

Everything stays on the device: USB's ``if mask.sum() > 0`` (a host synchronisation) becomes a ``torch.where``,
and its boolean row selection a 0/1 weighting, which gives the same value and gradient.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import StepInputs, TrainContext, Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.params import PositiveConsistencyParams, Probability, Weight


class FreeMatchParams(PositiveConsistencyParams.without("_NoDistAlign", dist_align=False)):
    """FreeMatch: L_u's weight, the EMA momentum of its thresholds and the weight of the fairness term (no
    distribution alignment: SAT's class thresholds already follow p~_t)."""

    ema_p: Probability = Field(0.999, description="[λ] momentum of the EMAs of FreeMatch's / SoftMatch's "
                               "thresholds and statistics.")
    lambda_f: Weight = Field(0.01, description="[w_f] weight of FreeMatch's self-adaptive fairness term L_f.")


def _inverse(h: Tensor) -> Tensor:
    """1/h with 0 where h = 0 (the released code's replace_inf_to_zero), detached."""
    h = h.detach()
    return torch.where(h > 0, 1.0 / torch.where(h > 0, h, torch.ones_like(h)), torch.zeros_like(h))


def _sum_norm(x: Tensor) -> Tensor:
    total = x.sum(dim=-1, keepdim=True)
    return x / torch.where(total > 0, total, torch.ones_like(total))


def fairness_loss(logits_s: Tensor, mask: Tensor, p_model: Tensor, label_hist: Tensor) -> Tensor:
    """L_f of SAF over the rows with ``mask`` 1 (0/1 float, muB); 0 when no row is masked."""
    m = mask.detach()
    probs_s = torch.softmax(logits_s, dim=1)
    hist = torch.zeros_like(p_model).index_add_(0, probs_s.detach().argmax(dim=1), m)     # masked Hist(argmax p^s)
    count = m.sum()
    p_bar = (probs_s * m.unsqueeze(1)).sum(dim=0) / torch.where(count > 0, count, torch.ones_like(count))
    target = _sum_norm(p_model * _inverse(label_hist)).detach()                        # SumNorm(p~ / h~)
    estimate = _sum_norm(p_bar * _inverse(_sum_norm(hist)))                            # SumNorm(p-bar / h-bar)
    loss = (target * torch.log(estimate + 1e-12)).sum()                                # -H(target, estimate)
    return torch.where(count > 0, loss, torch.zeros_like(loss))


class SelfAdaptiveThresholds:
    """SAT's state: tau_t (``time_p``), p~_t (``p_model``) and h~_t (``label_hist``), all starting at 1/C."""

    def __init__(self, num_classes: int, momentum: float) -> None:
        self.momentum = momentum
        self.p_model = torch.full((num_classes,), 1.0 / num_classes)
        self.label_hist = torch.full((num_classes,), 1.0 / num_classes)
        self.time_p = self.p_model.mean()

    def mask(self, probs_w: Tensor) -> Tensor:
        """Update tau_t, p~_t, h~_t with this batch, then 1(max q >= tau_t(argmax q)) per row (float)."""
        q = probs_w.detach()
        if self.p_model.device != q.device:
            self.p_model, self.label_hist, self.time_p = (t.to(q.device) for t in self.state_tensors())
        m = self.momentum
        conf, pred = q.max(dim=1)
        self.time_p = self.time_p * m + (1 - m) * conf.mean()
        self.p_model = self.p_model * m + (1 - m) * q.mean(dim=0)
        hist = torch.zeros_like(self.p_model).index_add_(0, pred, torch.ones_like(conf))
        self.label_hist = self.label_hist * m + (1 - m) * (hist / hist.sum())
        local = self.p_model / self.p_model.max()                                           # MaxNorm(p~_t)
        return conf.ge(self.time_p * local[pred]).to(q.dtype)

    def state_tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.p_model, self.label_hist, self.time_p

    def state_dict(self) -> dict[str, Any]:
        return {n: t.detach().cpu().clone() for n, t in zip(("p_model", "label_hist", "time_p"), self.state_tensors())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, mine in zip(("p_model", "label_hist", "time_p"), self.state_tensors()):
            theirs = state[name]
            if not isinstance(theirs, Tensor) or theirs.shape != mine.shape:
                raise ValueError(f"freematch state {name}: shape {tuple(getattr(theirs, 'shape', ()))} does not "
                                 f"match {tuple(mine.shape)} (a different number of classes?)")
            setattr(self, name, theirs.to(mine.device, mine.dtype).clone())


@register_algorithm("freematch")
class FreeMatch(FixMatch):
    """FreeMatch: self-adaptive class thresholds tau_t(c) (SAT) and the fairness term L_f (SAF)."""

    terms = (*FixMatch.terms, "fair")
    Params = FreeMatchParams
    params: FreeMatchParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.sat = SelfAdaptiveThresholds(ctx.num_classes, self.params.ema_p)

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        return self.sat.mask(probs_w)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p, "fair": self.params.lambda_f}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        return {"fair": fairness_loss(v.logits_s, out["mask"], self.sat.p_model, self.sat.label_hist)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "sat": self.sat.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)      # checks the keys, loads dist_align
        self.sat.load_state_dict(state["sat"])
