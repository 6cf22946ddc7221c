"""FlexMatch (Zhang et al., NeurIPS 2021): FixMatch with Curriculum Pseudo Labeling (CPL), class-wise thresholds
that follow how well each class is learnt.

Curriculum Pseudo Labeling (CPL; the paper's Section 3, USB's ``FlexMatchThresholdingHook``, the released code):

- every unlabeled sample n keeps the class it was last predicted as *above* the fixed threshold tau, or "unused"
  while it never was: \\hat u_n = argmax p^w_n when max p^w_n >= tau;
- the learning effect of class c is sigma_t(c) = sum_n 1(\\hat u_n = c), normalised to
  beta_t(c) = sigma_t(c) / max_c' sigma_t(c'), or, with the threshold warm-up,
  beta_t(c) = sigma_t(c) / max(max_c' sigma_t(c'), N - sum_c' sigma_t(c')) (N - sum sigma: the unused samples);
- the flexible thresholds are T_t(c) = M(beta_t(c)) tau with the convex mapping M(x) = x / (2 - x) (the
  non-linear mapping the paper and the released code use);
- L_p = 1/muB sum_b 1(max p^w_b >= T_t(argmax p^w_b)) H(\\hat p^w_b, p^s_b), FixMatch's loss with those thresholds.

As in the released code, beta is not updated while every sample sits in one bucket (all unused, or all one class),
and a step first masks with the current beta, then records its confident predictions and updates beta for the next
step. Everything runs on the device: no host synchronisation (counts by ``index_add_``, updates by ``torch.where``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from mutexmatch.algorithms.base import StepInputs, TrainContext, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.checks import check_int
from mutexmatch.params import FixMatchParams


class FlexMatchParams(FixMatchParams):
    """FlexMatch: FixMatch's tau (the upper bound of the class thresholds) and the threshold warm-up."""

    thresh_warmup: bool = Field(True, description="FlexMatch threshold warm-up: count the unused unlabeled samples "
                                "in the normaliser of the learning effects; false normalises by the best-learnt "
                                "class only.")


class CurriculumThresholds:
    """CPL's state over an unlabeled pool of ``pool_size`` samples: \\hat u_n (-1 = unused) and beta_t(c)."""

    def __init__(self, pool_size: int, num_classes: int, warmup: bool) -> None:
        self.pool_size = check_int("FlexMatch unlabeled pool size", pool_size, low=1, high=1 << 40)
        self.num_classes, self.warmup = num_classes, warmup
        self.selected = torch.full((pool_size,), -1, dtype=torch.long)      # \hat u_n, -1 = unused
        self.beta = torch.zeros(num_classes)                                # beta_t(c)

    def _to(self, device: torch.device) -> None:
        if self.selected.device != device:
            self.selected, self.beta = self.selected.to(device), self.beta.to(device)

    def mask(self, probs_w: Tensor, tau: float, pool_idx: Tensor) -> Tensor:
        """1(max p^w >= T_t(argmax p^w)) per row (float); then records the rows with
        max p^w >= tau at their pool positions ``pool_idx`` and updates beta."""
        probs_w = probs_w.detach()
        self._to(probs_w.device)
        conf, pred = probs_w.max(dim=1)
        beta = self.beta[pred]
        mask = conf.ge(tau * (beta / (2.0 - beta))).to(probs_w.dtype)     # T_t(c) = M(beta_t(c)) tau
        chosen = conf.ge(tau)
        self.selected[pool_idx] = torch.where(chosen, pred, self.selected[pool_idx])
        self._update_beta()
        return mask

    def _update_beta(self) -> None:
        counts = torch.zeros(self.num_classes + 1, device=self.selected.device)
        counts.index_add_(0, self.selected + 1, torch.ones_like(self.selected, dtype=counts.dtype))
        sigma, biggest = counts[1:], counts.max()                           # sigma_t(c); counts[0]: unused
        fresh = sigma / (biggest if self.warmup else sigma.max())           # beta_t(c), with or without warm-up
        self.beta = torch.where(biggest < self.pool_size, fresh, self.beta)  # one bucket holds all: no update

    def state_dict(self) -> dict[str, Any]:
        return {"selected": self.selected.detach().cpu().clone(), "beta": self.beta.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name in ("selected", "beta"):
            mine, theirs = getattr(self, name), state[name]
            if not isinstance(theirs, Tensor) or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
                raise ValueError(f"flexmatch state {name}: {getattr(theirs, 'dtype', type(theirs))} "
                                 f"{tuple(getattr(theirs, 'shape', ()))} does not match {mine.dtype} "
                                 f"{tuple(mine.shape)} (a different unlabeled pool or number of classes?)")
        self.selected = state["selected"].to(self.selected.device).clone()
        self.beta = state["beta"].to(self.beta.device).clone()


@register_algorithm("flexmatch")
class FlexMatch(FixMatch):
    """FlexMatch: FixMatch with Curriculum Pseudo Labeling, class-wise thresholds T_t(c) = M(beta_t(c)) tau."""

    Params = FlexMatchParams
    params: FlexMatchParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        if ctx.num_unlabeled < 1:
            raise ValueError("flexmatch: needs an unlabeled pool (TrainContext.unlabeled is empty) for its "
                             "per-sample state")
        self.cpl = CurriculumThresholds(ctx.num_unlabeled, ctx.num_classes, self.params.thresh_warmup)

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        return self.cpl.mask(probs_w, self.params.tau, inp.pool_pos)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "cpl": self.cpl.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)      # checks the keys, loads dist_align
        self.cpl.load_state_dict(state["cpl"])
