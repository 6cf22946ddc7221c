"""The network a run trains: the backbone with the algorithm's heads, set up by the algorithm, on the training
device, its EMA, and the forwards a step runs it through.

The weights are drawn here, the backbone's and then its heads' (the algorithm draws nothing), so the same seed
gives the same network whatever else the run does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch import nn

from mutexmatch.algorithms import Algorithm
from mutexmatch.config import ConfigError, RunConfig
from mutexmatch.models import build_model
from mutexmatch.models.pretrained import PretrainedError, load_pretrained
from mutexmatch.training.compiled import compiled_forward
from mutexmatch.training.distributed import DataParallel, sync_batchnorm
from mutexmatch.training.ema import ModelEMA
from mutexmatch.training.extended_step import features_forward, teacher_forward

__all__ = ["Network", "build_network"]


@dataclass
class Network:
    model: nn.Module
    ema: ModelEMA
    forward: Callable          # the model, or its compiled forward (train.compile, train.cuda_graphs)
    features: Callable         # StepInputs.forward: fp32 features under autocast, BatchNorm updated or not
    teacher: Callable          # StepInputs.teacher: the EMA model's logits, no gradient, no statistics touched

    def install(self, trainer: object) -> None:
        """Make this the trainer's network (its model, EMA and forwards): at the build and at a generation's
        re-initialisation (:mod:`mutexmatch.training.generations`)."""
        trainer.model, trainer.ema, trainer.forward, trainer.features, trainer.teacher = (   # type: ignore[attr-defined]
            self.model, self.ema, self.forward, self.features, self.teacher)


def start_from_file(backbone: nn.Module, cfg: RunConfig) -> None:
    """Load ``model.pretrained`` into ``backbone`` by USB's rules, saying what was loaded and what was not (one line
    each, on stderr); a file that does not fit is a :class:`~mutexmatch.config.ConfigError` naming the tensor."""
    try:
        report = load_pretrained(backbone, cfg.model.pretrained, cfg.model.pretrained_sha256, cfg.model.backbone)
    except PretrainedError as e:
        raise ConfigError(str(e)) from None
    for line in report:
        print(f"[train] {line}", file=sys.stderr, flush=True)


def build_network(cfg: RunConfig, alg_cls: type[Algorithm], num_classes: int, in_channels: int, image_size: int,
                  device: torch.device, autocast: Callable[[], AbstractContextManager],
                  dp: DataParallel | None = None, from_file: bool = True) -> Network:
    """The network (with the algorithm's extra heads, after its :meth:`~Algorithm.setup_model`) on ``device``,
    its EMA and the (optionally compiled) forward; the backbone starts from ``model.pretrained`` where
    ``from_file`` (a resumed run's checkpoint holds its weights: its file is not needed). Data parallel (``dp``
    active): the backbone's BatchNorm synced (``train.sync_bn``) and the features and teacher forwards run on this
    rank's rows, gathered (:mod:`.distributed`)."""
    dp = dp or DataParallel()
    model = build_model(cfg.model.backbone, num_classes=num_classes, in_channels=in_channels, image_size=image_size,
                        with_tnc=alg_cls.uses_tnc)
    if from_file and cfg.model.pretrained is not None:   # after the backbone's draws, before the heads' (unchanged)
        start_from_file(model.backbone, cfg)
    params = alg_cls.Params.parse(alg_cls.params_from(cfg.algorithm), alg_cls.name, num_classes)
    model.add_heads(alg_cls.heads(params, model.feat_dim, num_classes))
    alg_cls.setup_model(params, model, cfg.train.ema)
    if dp.active:
        dp.check_model(cfg.model.backbone, model.backbone)
        if cfg.train.sync_bn:   # the backbone's forward is the sliced one; heads see every row already
            sync_batchnorm(model.backbone)
    memory_format = torch.channels_last if cfg.model.channels_last else torch.contiguous_format
    model.to(device, memory_format=memory_format)
    ema = ModelEMA(model, cfg.train.ema)
    forward = compiled_forward(model, cfg.train, device)
    return Network(model, ema, forward, features_forward(dp.sliced(forward), model, autocast),
                   teacher_forward(ema.module, autocast, dp.sliced(ema.module)))
