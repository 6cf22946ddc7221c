"""One step's batch: the sampler's indices, the algorithm's views augmented on the training device, normalised.

Images stay uint8 on the training device; a batch is gathered by index and augmented there. It is a pure function
of :meth:`BatchSource.state` (the sampler's and the augmentation generators' states, checkpoint keys), so the
:class:`~mutexmatch.data.prefetch.Prefetcher` can make it ahead and a resumed run makes it again.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mutexmatch.algorithms import StepSpec
from mutexmatch.config import RunConfig
from mutexmatch.data.augment import normalize, weak_crop
from mutexmatch.data.load import DatasetBundle
from mutexmatch.data.prefetch import Prefetcher, to_device
from mutexmatch.data.sampler import SSLSampler
from mutexmatch.data.splits import Split
from mutexmatch.training.extended_step import make_views

__all__ = ["Batch", "BatchSource"]


class Batch(NamedTuple):
    x: torch.Tensor                # the views (by default [labeled weak | unlabeled weak | unlabeled strong])
    y_lb: torch.Tensor             # the labeled rows' labels
    ulb: torch.Tensor              # the unlabeled rows' dataset indices
    ulb_pos: torch.Tensor          # their positions in the unlabeled pool
    num_ulb: int                   # muB (0 without unlabeled batches)
    rot: torch.Tensor | None       # rotation labels of a rotated view
    lb_pos: torch.Tensor           # the labeled rows' positions in the labeled set


class BatchSource:
    """The training images on ``device``, the sampler and the augmentation generators of one run, and the
    :class:`Prefetcher` that hands out its batches (``prefetcher.next()``)."""

    def __init__(self, cfg: RunConfig, bundle: DatasetBundle, split: Split, step: StepSpec, uses_unlabeled: bool,
                 device: torch.device, grown: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.cfg, self.info, self.step_spec, self.device = cfg, bundle.info, step, device
        extra = bundle.extra_unlabeled
        self.train_x = bundle.train.x.to(device)
        self.train_y = bundle.train.y.to(device)
        self.ulb_x = torch.cat([self.train_x, extra.x.to(device)]) if extra is not None else self.train_x
        self.ulb_y = torch.cat([self.train_y, extra.y.to(device)]) if extra is not None else self.train_y
        t = cfg.train
        labeled, self.lb_x, self.lb_y = torch.from_numpy(split.labeled), self.train_x, self.train_y
        if grown is not None:   # pool images (positions) labeled with pseudo-labels (CReST's generations)
            picked = torch.from_numpy(split.unlabeled)[grown[0].cpu()].to(device)
            self.lb_x, self.lb_y = torch.cat([self.train_x, self.ulb_x[picked]]), torch.cat([self.train_y,
                                                                                               grown[1].to(device)])
            labeled = torch.cat([labeled, len(self.train_x) + torch.arange(len(picked))])
        self.sampler = SSLSampler(labeled, torch.from_numpy(split.unlabeled),
                                  batch_size=t.batch_size, mu=t.mu, seed=t.seed, with_unlabeled=uses_unlabeled)
        self.aug_generator = torch.Generator(device=device).manual_seed(t.seed + 1)
        # RandAugment's op choices are drawn on the host (mutexmatch.data.augment): from aug_generator itself on the
        # CPU.
        self.op_generator = None if device.type == "cpu" else torch.Generator().manual_seed(t.seed + 2)
        # The strong view's ops fused (issue 45) or each on its own sub-batch: the same images, compared for speed by
        # benchmarks/train_step.py's ours+per_op_augment.
        self.fused_augment = True
        self.prefetcher = Prefetcher(self.make, self.state, device)

    def state(self) -> dict:
        """Everything a batch is drawn from: the sampler's and the augmentations' generators (checkpoint keys)."""
        state = {"sampler": self.sampler.state_dict(), "aug_generator": self.aug_generator.get_state()}
        if self.op_generator is not None:
            state["op_generator"] = self.op_generator.get_state()
        return state

    def set_state(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.aug_generator.set_state(state["aug_generator"])
        if self.op_generator is not None and "op_generator" in state:
            self.op_generator.set_state(state["op_generator"])
        self.prefetcher.drop()  # a batch made ahead came from the state just replaced

    def make(self) -> Batch:
        """One step's batch, made from :meth:`state` only."""
        info, device = self.info, self.device
        idx = self.sampler.next()
        pad, pad_mode = weak_crop(info, self.cfg.data.crop_ratio)
        aug = {"flip": info.flip, "pad": pad, "pad_mode": pad_mode, "generator": self.aug_generator}
        lb = to_device(idx.lb, device)
        ulb = to_device(idx.ulb, device)
        views, rot = make_views(self.step_spec, self.lb_x[lb], self.ulb_x[ulb] if ulb.numel() else None,
                                aug, self.op_generator, self.fused_augment)
        x = normalize(torch.cat(views), info.mean, info.std, channels_last=self.cfg.model.channels_last)
        return Batch(x, self.lb_y[lb], ulb, to_device(idx.ulb_pos, device), len(ulb), rot,
                     to_device(idx.lb_pos, device))
