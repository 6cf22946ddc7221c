"""Distribution alignment of p^w (ReMixMatch), a piece algorithms with a positive consistency term use."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from mutexmatch.checks import check_int


class DistributionAlignment:
    """ReMixMatch distribution alignment: p^w <- Normalize(p^w * p(y) / p~(y)).

    p(y), the labeled class prior, is taken as uniform: every split in this project draws num_labels / C labels per
    class. p~(y) is the mean over the last ``window`` batches (the current one included: it is recorded before
    aligning) of the batch-mean p^w. Works on detached probabilities; applied before threshold, pseudo-label, argmin.
    """

    def __init__(self, num_classes: int, window: int = 128) -> None:
        self.window = check_int("dist_align window", window, low=1, high=1 << 20)
        self.prior = torch.full((num_classes,), 1.0 / num_classes)
        self.history = torch.zeros(window, num_classes)
        self.count = 0

    @property
    def running_mean(self) -> Tensor:
        """p~(y); uniform before the first batch."""
        if self.count == 0:
            return self.prior.clone()
        return self.history[: min(self.count, self.window)].mean(dim=0)

    def __call__(self, probs: Tensor) -> Tensor:
        probs = probs.detach()
        if self.history.device != probs.device:
            self.history, self.prior = self.history.to(probs.device), self.prior.to(probs.device)
        self.history[self.count % self.window] = probs.float().mean(dim=0)
        self.count += 1
        # The floor only matters for a class whose probability underflowed to 0 in every recent batch.
        aligned = probs.float() * self.prior / self.running_mean.clamp_min(1e-12)
        return (aligned / aligned.sum(dim=1, keepdim=True)).to(probs.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history.detach().cpu().clone(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        history = state["history"]
        if not isinstance(history, Tensor) or history.shape != self.history.shape:
            raise ValueError(f"dist_align state: history of shape {tuple(getattr(history, 'shape', ()))} does not "
                             f"match (window, C) = {tuple(self.history.shape)}")
        self.history = history.to(self.history.device, torch.float32).clone()
        self.count = check_int("dist_align state count", state["count"], low=0, high=1 << 62)

