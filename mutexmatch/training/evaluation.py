"""Scoring a model on held-out images: test and validation accuracy with the class-wise scores of the test and
validation confusion matrices (:mod:`.class_scores`), and the reference loss an algorithm may ask for
(:attr:`mutexmatch.algorithms.TrainContext.reference_loss`, e.g. Dash's rho_hat).

Images stay uint8 on the host and are normalised per ``train.eval_batch_size`` batch on the training device, under
``train.precision``'s autocast, through the model's TPC (``forward_tpc``), in eval mode meanwhile. Data parallel:
each rank scores its contiguous share of the test and validation images, the counts summed over the ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch import metrics as M
from mutexmatch.config import RunConfig
from mutexmatch.data.augment import normalize
from mutexmatch.data.load import DatasetBundle
from mutexmatch.data.splits import Split
from mutexmatch.training.class_scores import add_to_confusion, balanced_accuracy, class_groups, class_scores
from mutexmatch.training.class_scores import confusion_record
from mutexmatch.training.distributed import DataParallel
from mutexmatch.training.run_files import per_class_counts

__all__ = ["Evaluator"]


class Evaluator:
    """The test, validation and reference images of one run, and the functions that score a model on them."""

    def __init__(self, cfg: RunConfig, bundle: DatasetBundle, split: Split, device: torch.device,
                 autocast: Callable[[], AbstractContextManager], dp: DataParallel | None = None):
        self.cfg, self.bundle, self.split, self.device, self.autocast = cfg, bundle, split, device, autocast
        self.dp = dp or DataParallel()   # data parallel: each rank scores its share of the images
        self.labeled_per_class = per_class_counts(bundle.train.y.numpy(), split,
                                                  bundle.info.num_classes)["labeled_per_class"]
        self.groups = class_groups(self.labeled_per_class)   # head, medium, tail by the split's labeled counts

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
    def confusion(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        """``counts[true, predicted]`` of ``model``'s argmax over ``y`` (data parallel: every rank calls it; each
        counts its share of the rows and the counts are summed)."""
        c = self.bundle.info.num_classes
        counts = torch.zeros(c, c, dtype=torch.long, device=self.device)
        mine = self.dp.shard(len(y))
        for logits, yb in self.logits(model, x[mine], y[mine]):
            add_to_confusion(counts, yb, logits.argmax(1))
        return self.dp.sum_over_ranks(counts).cpu().numpy()

    def test_scores(self, model: nn.Module) -> tuple[dict[str, float], np.ndarray]:
        """``test/acc`` and the class-wise test metrics of ``model`` (:func:`.class_scores.class_scores`), and the
        test confusion matrix they are read off."""
        test = self.bundle.test
        conf = self.confusion(model, test.x, test.y)
        return {M.TEST_ACC: int(np.trace(conf)) / max(1, len(test.y)), **class_scores(conf, self.groups)}, conf

    def val_scores(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """``val/acc`` and ``val/balanced_acc`` of ``model`` on the validation images ``x``, ``y``."""
        conf = self.confusion(model, x, y)
        return {M.VAL_ACC: int(np.trace(conf)) / max(1, len(y)), M.VAL_BALANCED_ACC: balanced_accuracy(conf)}

    def confusion_record(self, step: int, conf: np.ndarray) -> dict:
        """The run folder's ``confusion_matrix.json`` for the test confusion matrix ``conf`` of step ``step``."""
        return confusion_record(step, conf, self.groups, self.labeled_per_class, self.bundle.classes)

    @torch.no_grad()
    def reference_loss(self, model: nn.Module) -> float:
        """``model``'s mean cross-entropy on the validation split, or on the labeled images without one; never the
        test split."""
        x, y = self.reference_data()
        total = torch.zeros((), device=self.device)
        for logits, yb in self.logits(model, x, y):
            total += F.cross_entropy(logits.float(), yb, reduction="sum")
        return total.item() / max(1, len(y))

    @torch.no_grad()
    def pool_logits(self, model: nn.Module) -> torch.Tensor:
        """``model``'s logits (fp32, its evaluated head, eval mode) on every image of the unlabeled pool, in the pool's
        order (``split.unlabeled``, extra unlabeled images included), un-augmented: what USB's
        ``evaluate('eval_ulb')`` gives Adsh and SAW at an epoch boundary (USB passes the images through its weak
        augmentation). Every rank computes all of them (the EMA weights are the same on every rank)."""
        idx = torch.from_numpy(self.split.unlabeled)
        train, extra = self.bundle.train, self.bundle.extra_unlabeled
        n = len(train.y)
        x = torch.empty((len(idx), *train.x.shape[1:]), dtype=train.x.dtype)
        own = idx < n
        x[own] = train.x[idx[own]]
        if extra is not None:
            x[~own] = extra.x[idx[~own] - n]
        dummy = torch.zeros(len(idx), dtype=torch.long)
        return torch.cat([logits.float() for logits, _ in self.logits(model, x, dummy)])

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
