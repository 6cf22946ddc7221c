"""Distribution alignment of p^w (ReMixMatch, Berthelot et al. 2020, Sec. 3.2), a configurable piece.

    p^w <- Normalize(p^w * p(y) / p~(y))

- p~(y), the model's running class distribution on unlabeled data, is estimated from the batch means of p^w by a
  queue of the last ``window`` batches (``estimate`` "queue": ReMixMatch, FixMatch w. DA) or an exponential moving
  average with ``momentum`` (``estimate`` "ema": AdaMatch, SoftMatch), the current batch included in both.
- p(y), the target: ``uniform``; ``labeled``, the class histogram of the labeled set (the trainer's
  :class:`~mutexmatch.algorithms.base.TrainContext`); or ``model``, the same running estimate of the model's
  predictions on the labeled batch (AdaMatch).
- ``ratio`` names the two forms of the quotient in use (issue 22):
  ``filled`` (the generic ``dist_align`` switch's default): p(y) / max(p~(y), 1e-12), the queue mean taken over the
  slots filled so far;
  ``usb``: (p(y) + 1e-6) / (p~(y) + 1e-6) with the queue mean over all ``window`` slots, empty ones counting as zero
  (USB 0.3.2's ``DistAlignQueueHook``/``DistAlignEMAHook``, Google's ReMixMatch/FixMatch-DA code);
  ``all_slots``: p(y) / p~(y), the queue mean over all slots as ``usb``, without the epsilon (ShrinkMatch's released
  code, issue 43; not a choice of the generic switch).
  They differ while the queue fills (aligned probabilities by up to 0.6-0.8 in a run's first steps, as a class whose
  mean probability is below 1e-6 * window is pulled towards the epsilon). Once it is full, and always with the EMA
  estimate, they differ by the epsilon alone, which is negligible only while every class keeps a mean probability
  well above 1e-6: a class the model never predicts (p~(y) << 1e-6, the normal state of a confident model late in a
  run and AdaMatch's domain-shift case) is multiplied by p(y) / p~(y), up to 1e12 at the floor, under ``filled`` but
  by at most (p(y) + 1e-6) / 1e-6, ~1e5, under ``usb``, and far fewer rows then pass tau (issue 32 measured 31 % vs
  100 % of rows above 0.95 with a full queue, AdaMatch 22 % vs 100 %; tests/mutexmatch/algorithms/usb/
  test_adamatch_lockstep.py: 0 % vs 61 %). ``filled`` is the equation as ReMixMatch and AdaMatch print it; the
  authors' code (google-research remixmatch, adamatch) and USB compute ``usb``, which produced their published
  numbers. Which algorithm defaults to which, and why: docs/training.md, "Distribution alignment".

Works on detached probabilities, without host synchronisation (the queue position is a host counter). The state
(the estimates and the counter) is saved in checkpoints.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from mutexmatch.checks import check_int
from mutexmatch.params import MAX_QUEUE

ESTIMATES = ("queue", "ema")
TARGETS = ("uniform", "labeled", "model")
RATIOS = ("filled", "usb", "all_slots")


class RunningMean:
    """A running estimate of a class distribution from batch means: a queue of ``window`` rows or an EMA."""

    def __init__(self, num_classes: int, estimate: str, window: int, momentum: float, initial: Tensor,
                 first_batch_starts: bool = True) -> None:
        self.estimate, self.momentum, self.first_batch_starts = estimate, momentum, first_batch_starts
        rows = check_int("dist_align window", window, low=1, high=MAX_QUEUE) if estimate == "queue" else 1
        self.initial = initial.float()
        self.rows = torch.zeros(rows, num_classes) if estimate == "queue" else self.initial.clone()[None]
        self.count = 0

    def update(self, batch_mean: Tensor) -> None:
        if self.rows.device != batch_mean.device:
            self.rows, self.initial = self.rows.to(batch_mean.device), self.initial.to(batch_mean.device)
        if self.estimate == "queue":
            self.rows[self.count % len(self.rows)] = batch_mean
        elif self.count == 0 and self.first_batch_starts:   # USB's p_model: the first batch mean, no average
            self.rows[0] = batch_mean
        else:
            self.rows[0] = self.rows[0] * self.momentum + batch_mean * (1.0 - self.momentum)
        self.count += 1

    def value(self, over_all_slots: bool) -> Tensor:
        """The estimate: ``initial`` before any batch; a queue's mean over all slots or over the filled ones."""
        if self.count == 0:
            return self.initial.clone()
        used = len(self.rows) if over_all_slots else min(self.count, len(self.rows))
        return self.rows.sum(dim=0) / used if over_all_slots else self.rows[:used].mean(dim=0)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.rows.detach().cpu().clone(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any], what: str) -> None:
        history = state["history"]
        if not isinstance(history, Tensor) or history.shape != self.rows.shape:
            raise ValueError(f"{what} state: history of shape {tuple(getattr(history, 'shape', ()))} does not "
                             f"match {tuple(self.rows.shape)} (window, C)")
        self.rows = history.to(self.rows.device, torch.float32).clone()
        self.count = check_int(f"{what} state count", state["count"], low=0, high=1 << 62)


class DistributionAlignment:
    """p^w <- Normalize(p^w * p(y) / p~(y)), with p~(y) and p(y) as the module docstring describes."""

    def __init__(self, num_classes: int, window: int = 128, *, estimate: str = "queue", momentum: float = 0.999,
                 target: str = "uniform", ratio: str = "filled", labeled_prior: Tensor | None = None) -> None:
        for what, value, allowed in (("estimate", estimate, ESTIMATES), ("target", target, TARGETS),
                                     ("ratio", ratio, RATIOS)):
            if value not in allowed:
                raise ValueError(f"dist_align {what}={value!r}: must be one of {', '.join(allowed)}")
        if target == "labeled" and labeled_prior is None:
            raise ValueError("dist_align target='labeled': needs the labeled class histogram (TrainContext)")
        uniform = torch.full((num_classes,), 1.0 / num_classes)
        self.window, self.target_kind, self.ratio = window, target, ratio
        self.prior = (labeled_prior.float() / labeled_prior.sum()) if target == "labeled" else uniform
        self.model = RunningMean(num_classes, estimate, window, momentum, uniform)
        # USB's "model" target: a queue starts all zeros (its mean over all slots), an EMA at uniform and averages
        # in the first labeled batch (its p_model instead starts at the first unlabeled batch mean).
        start = uniform if estimate == "ema" or ratio == "filled" else torch.zeros(num_classes)
        self.over_all_slots = ratio in ("usb", "all_slots")
        self.labeled = None if target != "model" else RunningMean(num_classes, estimate, window, momentum, start,
                                                                  first_batch_starts=False)

    @classmethod
    def from_params(cls, params: Any, ctx: Any) -> "DistributionAlignment | None":
        """The piece an algorithm's parameters ask for (``dist_align`` and ``da_*``,
        :class:`mutexmatch.params.DistAlignParams`), or None without ``dist_align``; ``ctx`` is its TrainContext."""
        if not getattr(params, "dist_align", False):
            return None
        return cls(ctx.num_classes, params.da_window, estimate=params.da_estimate, momentum=params.da_momentum,
                   target=params.da_target, ratio=params.da_ratio, labeled_prior=ctx.labeled_counts)

    @property
    def running_mean(self) -> Tensor:
        """p~(y); uniform before the first batch."""
        return self.model.value(over_all_slots=self.over_all_slots)

    def target(self) -> Tensor:
        """p(y)."""
        if self.labeled is None:
            return self.prior
        return self.labeled.value(over_all_slots=self.over_all_slots)

    def __call__(self, probs: Tensor, probs_lb: Tensor | None = None) -> Tensor:
        probs = probs.detach()
        self.prior = self.prior.to(probs.device)
        self.model.update(probs.float().mean(dim=0))
        if self.labeled is not None:
            if probs_lb is None:
                raise ValueError("dist_align target='model': the labeled batch's probabilities are needed")
            self.labeled.update(probs_lb.detach().float().mean(dim=0))
        p_model, p_target = self.running_mean, self.target()
        if self.ratio == "usb":
            aligned = probs.float() * (p_target + 1e-6) / (p_model + 1e-6)
        elif self.ratio == "all_slots":
            aligned = probs.float() * p_target / p_model
        else:  # the floor only matters for a class whose probability underflowed to 0 in every recent batch
            aligned = probs.float() * p_target / p_model.clamp_min(1e-12)
        return (aligned / aligned.sum(dim=1, keepdim=True)).to(probs.dtype)

    def state_dict(self) -> dict[str, Any]:
        state = self.model.state_dict()
        return state if self.labeled is None else {**state, "labeled": self.labeled.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state, "dist_align")
        if self.labeled is not None:
            self.labeled.load_state_dict(state["labeled"], "dist_align target")
