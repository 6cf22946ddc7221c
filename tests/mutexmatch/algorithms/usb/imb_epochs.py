"""Epoch boundaries in an imbalance algorithm's lockstep (Adsh, SAW): USB's ``after_train_epoch`` reads the unlabeled
pool's logits through ``evaluate('eval_ulb')`` (its EMA model in eval mode); the harness has no EMA and no loaders,
so at each boundary of USB's epoch both sides get the same logits, the model's in eval mode on the pool the driver
draws (a :class:`~.conftest.Data` made from the same settings and seed)."""
from __future__ import annotations

import dataclasses
from unittest import mock

import torch
from torch import Tensor

from .conftest import Data, Lockstep


class PoolLogits:
    """Adapter mixin: ``after_sgd`` runs the epoch boundary on both sides when USB's iteration reaches one (USB's
    hooks by ``usb_epoch_end(usb)``, ours by the trainer's call); ``boundaries`` counts them, ``scores_after`` keeps
    what ``state`` gave after each."""

    def _pool(self) -> Tensor:
        if not hasattr(self, "_x_pool"):
            cfg = Lockstep(**{k: getattr(self, k) for k in Lockstep.__dataclass_fields__ if hasattr(self, k)})
            if cfg.lb_counts is not None:
                cfg = dataclasses.replace(cfg, lb_size=sum(cfg.lb_counts))
            self._x_pool = Data(cfg, cfg.seed + 1).x_ulb_pool      # the driver's pool (same settings, same seed)
        return self._x_pool

    def after_sgd(self, ours, usb) -> None:
        if usb.it % usb.num_iter_per_epoch:
            return
        model = usb.model
        model.eval()
        with torch.no_grad():
            logits = model(self._pool())["logits"]
        model.train()
        with mock.patch.object(usb, "evaluate", lambda *a, **k: {"eval_ulb/logits": logits.numpy()}, create=True), \
                mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t):
            self.usb_epoch_end(usb)
        ours.on_epoch_end(logits.clone())
        self.boundaries = getattr(self, "boundaries", 0) + 1
        self.pool_logits = logits
        self.scores_after = [mine for mine, _ in self.state(ours, usb).values()]
