"""ShrinkMatch (Yang, Zhao, Qi, Wang & Shi, "Shrinking Class Space for Enhanced Certainty in Semi-Supervised
Learning", ICCV 2023), as its official CIFAR code runs it (LiheYoung/ShrinkMatch, CIFAR/shrinkmatch.py and
CIFAR/network/shrinkmatch.py; the golden test tests/mutexmatch/algorithms/test_shrinkmatch.py was made by it).

Like MutexMatch it learns from the low-confidence samples FixMatch discards. One forward of [labeled | weak |
strong]; with p^w the weak view's probabilities (distribution-aligned with ``dist_align``) and tau the threshold:

- L_u = 1/muB sum_b 1(max p^w_b >= tau) H(p^w_b, p^s_b): FixMatch's loss with the *soft* pseudo-label p^w;
- the shrunk class space of an uncertain sample (max p^w_b < tau): with p^w sorted descending (p_(0) >= p_(1) ...),
  drop the classes of ranks 1 .. c-1 for the smallest c >= 2 with p_(0) / (p_(0) + sum_{j >= c} p_(j)) >= tau (the
  top class's share of the kept space reaches tau), or c = C - 1 if none does; the removed classes' number is c - 1
  (:func:`shrunk_space`);
- L_shrink = 1/muB sum_{b uncertain} max p^w_b 1(share_b >= tau) H(0, softmax(a_(0), a_(c_b), ..., a_(C-1))), the
  cross-entropy towards the top class in the shrunk space, of an auxiliary head a (``model.heads["aux"]``: Linear
  D->D/4, BatchNorm, LeakyReLU(0.1), Linear D/4->D/4, BatchNorm, LeakyReLU(0.1), Linear D/4->C) on the strong
  view's features; weighted by the sample's confidence (the paper's reweighting principle 1; a sample whose share
  never reaches tau weighs 0);
- L = L_sup + lambda_p L_u + lambda_s r_t L_shrink, r_t the EMA (momentum 0.999) of the batch's confident ratio
  mean 1(max p^w >= tau) (principle 2), restarted from the batch's ratio at the first step of each epoch (the official
  ``train`` sets it to None every epoch; its epoch is 1024 steps: ``epoch_steps``).

Distribution alignment (``dist_align``, the official ``--DA``, off by default): p^w <- Normalize(p^w / p~), p~ the mean
of a queue of the last 32 batch means over all its slots (empty ones as zeros), no epsilon: the alignment piece with
ratio ``all_slots``. The official model updates its EMA copy *before* each step's forward (with the weights of the
step before); this trainer updates the EMA after the optimiser step, so the evaluated EMA model runs one update
ahead of the official one (training itself is unaffected). Where the paper and the code differ is not checked here.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, TrainContext, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import USB_EPOCH_STEPS, FixMatchParams, QueueLength, Steps, Weight

RATIO_MOMENTUM = 0.999   # the official code's EMA of the confident ratio


class ShrinkMatchParams(FixMatchParams.without("_ShrinkMatchBase", da_estimate="queue", da_target="uniform",
                                               da_ratio="all_slots", da_momentum=0.999)):
    """ShrinkMatch: tau, the weights of L_u and L_shrink, the epoch the confident-ratio EMA restarts at and the
    official code's optional distribution alignment. Defaults: the official CIFAR script (threshold 0.95, weights 1,
    1024 steps an epoch, DA off)."""

    lambda_s: Weight = Field(1.0, description="[λ_s] ShrinkMatch: weight of L_shrink (the official code: 1).")
    da_window: QueueLength = Field(32, description="ShrinkMatch DA: queue length in batches (the official code: 32).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description="ShrinkMatch: steps of an epoch, at whose first step the "
                               "EMA of the confident ratio restarts (the official code: 1024); 0 = one pass over "
                               "the unlabeled pool, ceil(N_u / muB).")


def shrunk_space(probs: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """Per row of ``probs`` (sorted descending: p_(0) >= p_(1) >= ...): the first kept rank c (ranks 1 .. c-1
    removed), the smallest c in 2 .. C-1 with p_(0) / (p_(0) + sum_{j >= c} p_(j)) >= tau, else C - 1; and whether
    that share reaches tau. Rows need C >= 3 (two classes have no space to shrink)."""
    num_classes = probs.shape[1]
    if num_classes < 3:
        raise ValueError(f"ShrinkMatch: the shrunk class space needs at least 3 classes, got {num_classes}")
    top = probs[:, :1]
    tails = probs.flip(1).cumsum(1).flip(1)[:, 2:]           # sum_{j >= c} p_(j) for c = 2 .. C-1
    reached = top / (top + tails) >= tau
    first = torch.where(reached.any(dim=1), reached.float().argmax(dim=1), num_classes - 3) + 2
    return first, reached.any(dim=1)


def shrink_terms(probs: Tensor, logits_aux: Tensor, tau: float) -> tuple[Tensor, Tensor, Tensor]:
    """Per row: L_shrink's summand (0 for confident rows), the first kept rank c and the confident mask."""
    conf = probs.max(dim=1).values
    confident = conf >= tau
    sorted_probs, order = probs.topk(probs.shape[1], dim=1, sorted=True)
    first, reached = shrunk_space(sorted_probs, tau)
    sorted_aux = logits_aux.gather(1, order)
    ranks = torch.arange(probs.shape[1], device=probs.device)
    kept = (ranks[None] == 0) | (ranks[None] >= first[:, None])
    log_norm = torch.logsumexp(sorted_aux.masked_fill(~kept, float("-inf")), dim=1)
    weight = conf * (reached & ~confident).to(conf.dtype)
    return weight * (log_norm - sorted_aux[:, 0]), first, confident.to(probs.dtype)


@register_algorithm("shrinkmatch")
class ShrinkMatch(FixMatch):
    """ShrinkMatch: FixMatch with soft pseudo-labels, plus a confidence-weighted loss of an auxiliary head in each
    uncertain sample's shrunk class space, weighted by the EMA of the confident ratio (Yang et al., ICCV 2023)."""

    terms = ("sup", "p", "shrink")
    Params = ShrinkMatchParams
    params: ShrinkMatchParams

    @classmethod
    def heads(cls, params: ShrinkMatchParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """The auxiliary head a (``aux``, the official ``head_aux``), applied to the strong view's features."""
        hidden = max(1, feat_dim // 4)
        return {"aux": nn.Sequential(nn.Linear(feat_dim, hidden), nn.BatchNorm1d(hidden), nn.LeakyReLU(0.1),
                                     nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.LeakyReLU(0.1),
                                     nn.Linear(hidden, num_classes))}

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        if self.num_classes < 3:
            raise ValueError(f"algorithm.name='shrinkmatch': needs at least 3 classes (got {self.num_classes}): "
                             "two classes leave no class space to shrink")
        self.certain_ratio = torch.tensor(0.0)   # r_t, the EMA of the confident ratio
        self.last_first_kept: Tensor | None = None   # this step's first kept rank per row (diagnostics, tests)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        feats_s = inp.feats[b + u:]
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        probs = self.align(logits_w.detach().softmax(dim=1), logits_lb)
        shrink_rows, self.last_first_kept, mask = shrink_terms(probs, model.heads["aux"](feats_s),
                                                               self.threshold)
        sup = nn.functional.cross_entropy(logits_lb, inp.targets_lb)
        unsup = (soft_cross_entropy(probs, logits_s) * mask).mean()
        self.certain_ratio = self._ratio_ema(mask.mean(), inp.step)
        terms = {"sup": sup, "p": unsup, "shrink": shrink_rows.sum() / u}
        p = self.params
        loss = sup + p.lambda_p * unsup + p.lambda_s * self.certain_ratio * terms["shrink"]
        conf, pseudo_label = probs.max(dim=1)
        return StepOutput(loss=loss, terms=terms, mask=mask, conf=conf, pseudo_label=pseudo_label,
                          comp_label=probs.argmin(dim=1), soft_target=probs)

    def _ratio_ema(self, ratio: Tensor, step: int) -> Tensor:
        """r_t: the batch's ratio at an epoch's first step, else 0.999 r_{t-1} + 0.001 ratio."""
        ratio = ratio.detach().float()
        if step % (self.params.epoch_steps or self.ctx.steps_per_epoch) == 0:
            return ratio
        return self.certain_ratio.to(ratio.device) * RATIO_MOMENTUM + ratio * (1 - RATIO_MOMENTUM)

    def term_weights(self) -> dict[str, float]:
        """lambda_s is the constant part of L_shrink's weight; r_t, its running part, is in the step's loss."""
        return {"sup": 1.0, "p": self.params.lambda_p, "shrink": self.params.lambda_s}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "certain_ratio": self.certain_ratio.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        ratio = state["certain_ratio"]
        if not isinstance(ratio, Tensor) or ratio.shape != ():
            raise ValueError(f"shrinkmatch state certain_ratio: expected a scalar tensor, got {type(ratio).__name__}")
        self.certain_ratio = ratio.float().clone()
