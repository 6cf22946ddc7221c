"""Scoring a model on held-out images: test and validation accuracy, and the reference loss an algorithm may ask
for (:attr:`mutexmatch.algorithms.TrainContext.reference_loss`, e.g. Dash's rho_hat).

Images stay uint8 on the host and are normalised per ``train.eval_batch_size`` batch on the training device, under
``train.precision``'s autocast, through the model's TPC (``forward_tpc``), in eval mode meanwhile. Data parallel:
each rank scores its contiguous share of the test and validation images, the correct counts summed over the ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.config import RunConfig
from mutexmatch.data.augment import normalize
from mutexmatch.data.load import DatasetBundle
from mutexmatch.data.splits import Split
from mutexmatch.training.distributed import DataParallel

__all__ = ["Evaluator"]


class Evaluator:
    """The test, validation and reference images of one run, and the functions that score a model on them."""

    def __init__(self, cfg: RunConfig, bundle: DatasetBundle, split: Split, device: torch.device,
                 autocast: Callable[[], AbstractContextManager], dp: DataParallel | None = None):
        self.cfg, self.bundle, self.split, self.device, self.autocast = cfg, bundle, split, device, autocast
        self.dp = dp or DataParallel()   # data parallel: each rank scores its share of the images

    @torch.no_grad()
    def logits(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
               ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(TPC logits, labels) per ``eval_batch_size`` batch of ``x``, ``model`` in eval mode meanwhile."""
        info = self.bundle.info
        was_training = model.training
        model.eval()
        bs = self.cfg.train.eval_batch_size
        try:
            for i in range(0, len(y), bs):
                xb = normalize(x[i:i + bs].to(self.device), info.mean, info.std,
                               channels_last=self.cfg.model.channels_last)
                with self.autocast():
                    logits = model.forward_tpc(xb)
                yield logits, y[i:i + bs].to(self.device)
        finally:
            model.train(was_training)

    @torch.no_grad()
    def accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        """The share of ``y`` that ``model``'s argmax gets right (data parallel: every rank calls it; each scores
        its share of the rows and the counts are summed)."""
        correct = torch.zeros((), device=self.device)
        mine = self.dp.shard(len(y))
        for logits, yb in self.logits(model, x[mine], y[mine]):
            correct += (logits.argmax(1) == yb).sum()
        return self.dp.sum_over_ranks(correct).item() / max(1, len(y))

    @torch.no_grad()
    def reference_loss(self, model: nn.Module) -> float:
        """``model``'s mean cross-entropy on the validation split, or on the labeled images without one; never the
        test split."""
        x, y = self.reference_data()
        total = torch.zeros((), device=self.device)
        for logits, yb in self.logits(model, x, y):
            total += F.cross_entropy(logits.float(), yb, reduction="sum")
        return total.item() / max(1, len(y))

    def reference_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        val = self.val_data()
        if val is not None:
            return val
        idx = torch.from_numpy(self.split.labeled)
        return self.bundle.train.x[idx], self.bundle.train.y[idx]

    def val_data(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Validation images and labels: an image folder's val/, else the split's held-out train images."""
        if self.bundle.val is not None:
            return self.bundle.val.x, self.bundle.val.y
        if len(self.split.val):
            idx = torch.from_numpy(self.split.val)
            return self.bundle.train.x[idx], self.bundle.train.y[idx]
        return None

    @property
    def eval_images(self) -> int:
        """Images one evaluation scores: the test set twice (EMA and raw model) and the validation images."""
        val = self.val_data()
        return 2 * len(self.bundle.test.y) + (0 if val is None else len(val[1]))
