"""Index sampling for the labeled and unlabeled streams, with exactly restorable state.

The released code draws both streams with replacement (``RandomSampler(replacement=True)``); we do the same with
one ``torch.Generator`` so the data order is a pure function of (seed, step) and survives a resume bit for bit.
Images stay as uint8 tensors on the training device; the sampler only yields indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SSLSampler", "IndexBatch"]


@dataclass
class IndexBatch:
    lb: torch.Tensor   # (B,) positions into the labeled index list's images
    ulb: torch.Tensor  # (μB,) positions into the unlabeled pool (empty when the algorithm uses no unlabeled data)


class SSLSampler:
    """Yields B labeled and μB unlabeled image indices per step, drawn uniformly with replacement."""

    def __init__(self, labeled: torch.Tensor, unlabeled: torch.Tensor, *, batch_size: int, mu: int, seed: int,
                 with_unlabeled: bool = True):
        if labeled.numel() == 0:
            raise ValueError("SSLSampler: the labeled set is empty")
        if with_unlabeled and unlabeled.numel() == 0:
            raise ValueError("SSLSampler: the unlabeled pool is empty")
        self.labeled = labeled.long().cpu()
        self.unlabeled = unlabeled.long().cpu()
        self.batch_size = batch_size
        self.num_ulb = batch_size * mu if with_unlabeled else 0
        self.generator = torch.Generator().manual_seed(seed)

    def next(self) -> IndexBatch:
        g = self.generator
        lb = self.labeled[torch.randint(len(self.labeled), (self.batch_size,), generator=g)]
        if self.num_ulb:
            ulb = self.unlabeled[torch.randint(len(self.unlabeled), (self.num_ulb,), generator=g)]
        else:
            ulb = torch.empty(0, dtype=torch.long)
        return IndexBatch(lb, ulb)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
