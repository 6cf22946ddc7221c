"""The optimiser, its learning-rate schedule and the fp16 gradient scaler.

``optim.name: sgd``: SGD with momentum (Nesterov as configured), weight decay on every parameter except BatchNorm's,
and the cos(7πt/16T) factor of the released code (``optim.cosine_factor``) or a constant rate. ``optim.name: adamw``:
USB's fine-tuning recipe, AdamW over USB's parameter groups (:mod:`mutexmatch.training.layer_decay`). Either may
warm up linearly (``optim.warmup``), as USB's ``get_cosine_schedule_with_warmup``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mutexmatch.config import RunConfig
from mutexmatch.training.layer_decay import usb_param_groups

__all__ = ["param_groups", "sgd", "adamw", "optimizer", "lr_schedule", "lr_factor", "grad_scaler"]


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


def adamw(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over USB's parameter groups (``optim.layer_decay``) with USB's arguments: ``optim.lr``,
    ``optim.weight_decay`` (decoupled), torch's default betas and eps; fused on CUDA, foreach elsewhere."""
    o = cfg.optim
    fused = device.type == "cuda"
    return torch.optim.AdamW(usb_param_groups(model, o.lr, o.weight_decay, o.layer_decay), lr=o.lr,
                             weight_decay=o.weight_decay, foreach=not fused, fused=fused)


def optimizer(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.Optimizer:
    """The optimiser ``optim.name`` names."""
    return adamw(model, cfg, device) if cfg.optim.name == "adamw" else sgd(model, cfg, device)


def lr_factor(cfg: RunConfig):
    """The learning-rate factor at step t. Without warm-up: cos(cosine_factor π t / T) over ``train.iterations`` T,
    or 1 (``optim.schedule: constant``). With ``optim.warmup`` W > 0, USB's get_cosine_schedule_with_warmup (its
    expression, float for float): t / W for t < W, then max(0, cos(π c (t - W) / (T - W))) or 1."""
    o, total, warm = cfg.optim, cfg.train.iterations, cfg.optim.warmup
    if warm == 0:
        return (lambda t: math.cos(o.cosine_factor * math.pi * t / total)) if o.schedule == "cosine" else (
            lambda t: 1.0)

    def factor(t: int) -> float:
        if t < warm:
            return float(t) / float(max(1, warm))
        if o.schedule == "constant":
            return 1.0
        progress = float(t - warm) / float(max(1, total - warm))
        return max(0.0, math.cos(math.pi * o.cosine_factor * progress))
    return factor


def lr_schedule(optimizer: torch.optim.Optimizer, cfg: RunConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """``optim.schedule`` with ``optim.warmup``: :func:`lr_factor` of every step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg))


def grad_scaler(cfg: RunConfig, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling for ``train.precision: fp16`` (disabled, a pass-through, otherwise)."""
    return torch.amp.GradScaler(device.type, enabled=cfg.train.precision == "fp16")
