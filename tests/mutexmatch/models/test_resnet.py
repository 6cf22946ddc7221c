"""ResNet-18: torchvision's trunk with a fresh head (its parameter count against torchvision's own)."""
from __future__ import annotations

import torchvision
from torch import nn

from mutexmatch.models import BACKBONES, build_backbone


def test_parameter_count_is_torchvisions() -> None:
    tv = torchvision.models.resnet18(weights=None, num_classes=10)
    assert sum(p.numel() for p in tv.parameters()) == BACKBONES["resnet18"].param_count


def test_keeps_its_batchnorm_momentum_under_any_ema() -> None:
    model = build_backbone("resnet18", num_classes=10)
    before = [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    model.tie_bn_momentum_to_ema(0.9)
    assert [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)] == before
