"""ResNet backbones: torchvision's ``resnet18`` with random init, as the released MutexMatch code uses it, and
torchvision's ``resnet50`` for USB's ImageNet-scale settings (USB's ``nets/resnet``: torchvision's layout).

The released code builds ``torchvision.models.resnet18`` without pre-trained weights (ImageNet stem: 7×7 stride-2
conv and 3×3 max-pool, kept even for small images) and puts its own ``Linear(512, C)`` on the pooled features. Here
torchvision's ``fc`` becomes ``nn.Identity`` so the trunk returns the 512-d pooled features, and the new Linear is
the backbone's classifier (the TPC). For ``in_channels != 3`` the stem conv is replaced by one of the same shape
and torchvision's init (Kaiming normal, fan-out).

ResNet-50 keeps torchvision's parameter names (``conv1``, ``bn1``, ``layer1`` … ``layer4``, its head ``fc``), so
torchvision's and USB's weight files load by name (``model.pretrained``; :mod:`mutexmatch.models.pretrained`).
"""
from __future__ import annotations

import torch
import torchvision
from torch import nn

from mutexmatch.models.base import Backbone
from mutexmatch.models.registry import register_backbone


def _stem(trunk: torchvision.models.ResNet, in_channels: int) -> None:
    """Replace the stem convolution for ``in_channels`` != 3 (same shape otherwise, torchvision's init)."""
    if in_channels != 3:
        old = trunk.conv1
        trunk.conv1 = nn.Conv2d(
            in_channels, old.out_channels, old.kernel_size, stride=old.stride, padding=old.padding, bias=False
        )
        nn.init.kaiming_normal_(trunk.conv1.weight, mode="fan_out", nonlinearity="relu")


class ResNet18(Backbone):
    """torchvision ResNet-18 trunk (random init) + a fresh ``Linear(512, num_classes)`` head; feat_dim 512."""

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        trunk = torchvision.models.resnet18(weights=None)
        _stem(trunk, in_channels)
        self.feat_dim = trunk.fc.in_features
        trunk.fc = nn.Identity()
        self.trunk = trunk
        self.classifier = nn.Linear(self.feat_dim, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


@register_backbone(
    "resnet18", feat_dim=512, param_count=11_181_642,  # torchvision's 11,689,512 less its 1000-way fc
    typical_image_size=96, activation_bytes_per_pixel=430,
    description="torchvision ResNet-18, random init, ImageNet stem, new Linear(512, C) head",
)
def resnet18(num_classes: int, in_channels: int) -> ResNet18:
    return ResNet18(num_classes, in_channels)


class ResNet50(Backbone):
    """torchvision ResNet-50 (random init, its parameter names) with a fresh ``Linear(2048, num_classes)`` head
    ``fc`` (the TPC); feat_dim 2048."""

    _TRUNK = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool")

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        trunk = torchvision.models.resnet50(weights=None)
        _stem(trunk, in_channels)
        for name in self._TRUNK:
            setattr(self, name, getattr(trunk, name))
        self.feat_dim = trunk.fc.in_features
        self.fc = nn.Linear(self.feat_dim, num_classes)

    @property
    def classifier(self) -> nn.Linear:   # type: ignore[override]  # the TPC under torchvision's name
        return self.fc

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        for name in self._TRUNK:
            x = getattr(self, name)(x)
        return torch.flatten(x, 1)


@register_backbone(
    "resnet50", feat_dim=2048, param_count=23_528_522,  # torchvision's 25,557,032 less its 1000-way fc
    typical_image_size=224, activation_bytes_per_pixel=None,
    description="torchvision ResNet-50, random init, its parameter names, new Linear(2048, C) head `fc`",
)
def resnet50(num_classes: int, in_channels: int) -> ResNet50:
    return ResNet50(num_classes, in_channels)
