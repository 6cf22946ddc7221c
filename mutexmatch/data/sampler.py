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
    lb: torch.Tensor       # (B,) dataset indices of the labeled images
    lb_pos: torch.Tensor   # (B,) their positions in the labeled set: lb == labeled[lb_pos]
    ulb: torch.Tensor      # (μB,) dataset indices of the unlabeled images (empty when no unlabeled data is used)
    ulb_pos: torch.Tensor  # (μB,) their positions in the unlabeled pool: ulb == unlabeled[ulb_pos]


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
        lb_pos = torch.randint(len(self.labeled), (self.batch_size,), generator=g)
        if self.num_ulb:
            pos = torch.randint(len(self.unlabeled), (self.num_ulb,), generator=g)
        else:
            pos = torch.empty(0, dtype=torch.long)
        return IndexBatch(self.labeled[lb_pos], lb_pos, self.unlabeled[pos], pos)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
