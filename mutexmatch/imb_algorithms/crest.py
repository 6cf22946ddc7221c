"""CReST and CReST+ (Wei et al., CVPR 2021, "CReST: A Class-Rebalancing Self-Training Framework"), as USB 0.3.2
runs them (``semilearn/imb_algorithms/crest``; the lockstep test's reference).

Training runs in generations. At the end of a generation the EMA model labels the unlabeled pool; of the images
predicted as class c (most confident first) the first int(N_c^pred * (mu^(C-1-c))^(1/alpha)) join the labeled set
with pseudo-label c (Eq. 3's sampling rate, mu = (1/gamma)^(1/(C-1)) with gamma the labeled set's max/min class
ratio), and the next generation starts from re-initialised weights on the grown labeled set (:func:`crest_selection`;
USB's ``get_split``, which reads the class *index* c, not its rank by count: the rule assumes classes sorted from
head to tail, as consistent long tails are). CReST+ adds progressive distribution alignment (Sec. 3.3): the weak
view's probabilities are aligned towards the labeled distribution tempered by t_g, p(y)^t_g / sum p(y)^t_g, with
t_g going linearly from 1 in the first generation to ``dist_align_t`` in the last (USB's
``ProgressiveDistAlignEMAHook``: an EMA of p~(y), USB's (p(y) + 1e-6) / (p~(y) + 1e-6); it replaces ReMixMatch's own
alignment and keeps its estimate across generations, as USB's hook is built once).

A run's ``train.iterations`` T are ``num_gens`` generations of T // num_gens steps each, the last one also
running the remainder (USB runs num_train_iter steps per generation: ours is num_gens times that); the base sees
the step within its generation and a generation's length as its run (USB resets ``it`` each generation:
ReMixMatch's ramp-up restarts). The trainer's boundary (re-initialisation, the grown labeled set) is
:mod:`mutexmatch.training.generations`.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.alignment import DistributionAlignment
from mutexmatch.algorithms.base import StepInputs, StepOutput
from mutexmatch.imb_algorithms.base import ImbAlgorithm, ImbParams, register_imb_algorithm
from mutexmatch.params import Fraction, Positive, PositiveSteps


class CReSTParams(ImbParams):
    """CReST: the number of generations and the sampling exponent (USB's get_argument defaults)."""

    num_gens: PositiveSteps = Field(6, description="CReST: number of generations (USB's crest_num_gens); each runs "
                                    "train.iterations // num_gens steps (the last one the remainder too).")
    alpha: Positive = Field(3.0, description="[α] CReST: exponent of the sampling rate (mu^(C-1-c))^(1/α) of the "
                            "pseudo-labeled images of class c (USB's crest_alpha).")


class CReSTPlusParams(CReSTParams):
    """CReST+: CReST's and the progressive alignment's final temperature."""

    dist_align_t: Fraction = Field(0.5, description="[t_min] CReST+: the alignment target's temperature in the last "
                                   "generation (1 in the first, linear between; USB's crest_dist_align_t).")


@dataclass(frozen=True)
class CReSTSelection:
    """Pool positions that join the labeled set and their pseudo-labels, in USB's order (classes from the most to
    the least labeled, each by descending confidence)."""

    positions: Tensor
    labels: Tensor


def crest_selection(pool_logits: Tensor, labeled_counts: Tensor, alpha: float) -> CReSTSelection:
    """USB's generation end (``CReST.train``'s pseudo_label_list, then ``get_split``): the pool's predictions and
    confidences from ``pool_logits`` (N_u, C), per class c the first int(n_c (mu^(C-1-c))^(1/alpha)) of the n_c
    images predicted c, most confident first; mu = (1/gamma)^(1/(C-1)), gamma = max/min of the labeled class
    distribution. Host work, once a generation (USB's float64 and its sort calls, so the counts truncate alike)."""
    score, pred = torch.max(torch.softmax(pool_logits.detach().float().cpu(), dim=1), dim=1)
    counts = labeled_counts.cpu().numpy()
    dist = counts / counts.sum()
    num_classes = len(dist)
    order = np.argsort(dist)[::-1]
    with np.errstate(divide="ignore"):       # a class with no labeled image: gamma = inf, mu = 0, as USB's
        ratio = 1.0 / (dist[order][0] / dist[order[-1]])
    mu = math.pow(ratio, 1 / (num_classes - 1))
    positions, labels = [], []
    for c in order:
        idx = torch.where(pred == c)[0]
        idx = idx[torch.argsort(score[idx], descending=True)]
        take = int(len(idx) * math.pow(math.pow(mu, (num_classes - 1) - c), 1 / alpha))
        positions.append(idx[:take])
        labels.append(torch.full((len(idx[:take]),), int(c), dtype=torch.long))
    return CReSTSelection(torch.cat(positions), torch.cat(labels))


class ProgressiveAlignment(DistributionAlignment):
    """USB's ``ProgressiveDistAlignEMAHook``: EMA alignment towards the labeled distribution raised to the power
    ``t`` and renormalised (t = 1: the labeled distribution itself)."""

    def __init__(self, num_classes: int, labeled_counts: Tensor, momentum: float) -> None:
        super().__init__(num_classes, estimate="ema", momentum=momentum, target="labeled", ratio="usb",
                         labeled_prior=labeled_counts)
        self.t = 1.0

    def target(self) -> Tensor:
        p = super().target()
        if self.t == 1:
            return p
        p = p ** self.t
        return p / p.sum()


@register_imb_algorithm("crest")
class CReST(ImbAlgorithm):
    """CReST (Wei et al., 2021): generations, each from re-initialised weights on the labeled set grown by the
    pool's most confident pseudo-labels, more of them for the tail classes."""

    imb_params_model: ClassVar[type[ImbParams]] = CReSTParams
    imb: CReSTParams
    progressive: ClassVar[bool] = False

    def imb_init(self) -> None:
        gens, total = self.imb.num_gens, self.ctx.total_steps
        if total < gens:
            raise ValueError(f"imb_algorithm.num_gens={gens}: more generations than train.iterations={total}; "
                             "each generation runs train.iterations // num_gens steps")
        # The trainer's boundary (mutexmatch.training.generations) reads these; the base sees one generation's run.
        self.num_generations = gens
        self.generation_steps = total // gens if gens > 1 else None
        self.ctx = dataclasses.replace(self.ctx, total_steps=total // gens)
        if gens > 1 and bool(torch.isin(self.ctx.labeled, self.ctx.unlabeled).any()):
            warnings.warn(f"imb_algorithm.name={self.imb_name!r}: the unlabeled pool holds the labeled images "
                          "(data.unlabeled_includes_labeled: true), so a generation may add them again with "
                          "pseudo-labels; USB's CReST draws its pool without them: set "
                          "data.unlabeled_includes_labeled: false to run as USB", UserWarning, stacklevel=2)
        self.gen, self.picks = 0, None
        if self.progressive:    # USB registers its hook as "DistAlignHook", replacing ReMixMatch's
            self.dist_align = ProgressiveAlignment(self.num_classes, self.ctx.labeled_counts,
                                                   self.params.da_momentum)
        self.start_generation(0)

    def imb_term_weights(self) -> dict[str, float]:
        return {}

    def align_temperature(self, gen: int) -> float:
        """t_g of generation ``gen``: USB's (1 - g/(G-1)) * 1 + g/(G-1) * dist_align_t (CReST+ only)."""
        cur = gen / (self.imb.num_gens - 1) if self.imb.num_gens > 1 else 0.0
        return (1.0 - cur) * 1.0 + cur * self.imb.dist_align_t         # type: ignore[attr-defined]

    def start_generation(self, gen: int) -> None:
        """Before generation ``gen``'s first step (USB: the top of its generation loop)."""
        self.gen = gen
        if self.progressive:
            self.dist_align.t = self.align_temperature(gen)           # type: ignore[union-attr]

    def end_generation(self, pool_logits: Tensor) -> None:
        """USB's generation end: the pool images (positions) and pseudo-labels that join the original labeled set
        for the next generation (replacing the last generation's picks, as USB rebuilds its dataset), which starts."""
        picked = crest_selection(pool_logits, self.ctx.labeled_counts, self.imb.alpha)
        self.picks = (picked.positions, picked.labels)
        self.start_generation(self.gen + 1)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        """The base's step at the step within this generation (USB's ``it``, reset every generation)."""
        steps = self.generation_steps or 0
        return super().compute(model, dataclasses.replace(inp, step=inp.step - self.gen * steps))  # type: ignore[misc]

    def imb_state_dict(self) -> dict[str, Any]:
        return {"gen": self.gen, "picks": self.picks}

    def imb_load_state_dict(self, state: Any) -> None:
        super().imb_load_state_dict(state)
        self.picks = None if state["picks"] is None else tuple(t.long() for t in state["picks"])
        self.start_generation(int(state["gen"]))


@register_imb_algorithm("crest+")
class CReSTPlus(CReST):
    """CReST+ (Wei et al., 2021): CReST with progressive distribution alignment towards the labeled distribution,
    its temperature falling from 1 to `dist_align_t` over the generations."""

    imb_params_model = CReSTPlusParams
    imb: CReSTPlusParams
    progressive = True
