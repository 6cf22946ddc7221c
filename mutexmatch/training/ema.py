"""Exponential moving average of the model, as the released code keeps it.

``torch.optim.swa_utils.AveragedModel`` either averages the BatchNorm buffers too (``use_buffers=True``) or leaves
them stale; the released code averages the parameters only and copies the buffers from the trained model, so we keep
this small class instead.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["ModelEMA"]


class ModelEMA:
    """θ_ema ← decay·θ_ema + (1 − decay)·θ after every step; buffers (BN running stats) copied."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self._params = [p for p in self.module.parameters()]
        self._src_params = [p for p in model.parameters()]
        self._buffers = [b for b in self.module.buffers()]
        self._src_buffers = [b for b in model.buffers()]

    @torch.no_grad()
    def update(self) -> None:
        if self.decay > 0:
            torch._foreach_lerp_(self._params, [p.detach() for p in self._src_params], 1.0 - self.decay)
        else:
            torch._foreach_copy_(self._params, [p.detach() for p in self._src_params])
        if self._buffers:
            torch._foreach_copy_(self._buffers, self._src_buffers)

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)
