"""The optimiser, its learning-rate schedule and the fp16 gradient scaler.

SGD with momentum (Nesterov as configured), weight decay on every parameter except BatchNorm's, and the
cos(7πt/16T) factor of the released code (``optim.cosine_factor``) or a constant rate.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mutexmatch.config import RunConfig

__all__ = ["param_groups", "sgd", "lr_schedule", "grad_scaler"]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on every parameter except those of BatchNorm layers (selected by module type, not name)."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
                for p in m.parameters(recurse=False)}
    decay = [p for p in model.parameters() if id(p) not in no_decay]
    skip = [p for p in model.parameters() if id(p) in no_decay]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": skip, "weight_decay": 0.0}]


def sgd(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.SGD:
    """SGD over :func:`param_groups` with ``cfg.optim``'s settings, updating all parameters in one fused kernel on
    CUDA and with the multi-tensor (foreach) kernels elsewhere: the same update as the per-parameter loop, up to
    float rounding, in a few kernel launches instead of several per parameter."""
    o = cfg.optim
    fused = device.type == "cuda"
    return torch.optim.SGD(param_groups(model, o.weight_decay), lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                           foreach=not fused, fused=fused)


def lr_schedule(optimizer: torch.optim.Optimizer, cfg: RunConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """``optim.schedule``: cos(cosine_factor π t / T) over ``train.iterations`` T, or constant."""
    o, total = cfg.optim, cfg.train.iterations
    factor = (lambda t: math.cos(o.cosine_factor * math.pi * t / total)) if o.schedule == "cosine" else (
        lambda t: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def grad_scaler(cfg: RunConfig, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling for ``train.precision: fp16`` (disabled, a pass-through, otherwise)."""
    return torch.amp.GradScaler(device.type, enabled=cfg.train.precision == "fp16")
