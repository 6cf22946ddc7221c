"""ResNet-18 backbone: torchvision's ``resnet18`` with random init, as the released MutexMatch code uses it.

The released code builds ``torchvision.models.resnet18`` without pre-trained weights (ImageNet stem: 7×7 stride-2
conv and 3×3 max-pool, kept even for small images) and puts its own ``Linear(512, C)`` on the pooled features. Here
torchvision's ``fc`` becomes ``nn.Identity`` so the trunk returns the 512-d pooled features, and the new Linear is
the backbone's classifier (the TPC). For ``in_channels != 3`` the stem conv is replaced by one of the same shape
and torchvision's init (Kaiming normal, fan-out).
"""
from __future__ import annotations

import torch
import torchvision
from torch import nn

from mutexmatch.models.base import Backbone
from mutexmatch.models.registry import register_backbone


class ResNet18(Backbone):
    """torchvision ResNet-18 trunk (random init) + a fresh ``Linear(512, num_classes)`` head; feat_dim 512."""

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        trunk = torchvision.models.resnet18(weights=None)
        if in_channels != 3:
            old = trunk.conv1
            trunk.conv1 = nn.Conv2d(
                in_channels, old.out_channels, old.kernel_size, stride=old.stride, padding=old.padding, bias=False
            )
            nn.init.kaiming_normal_(trunk.conv1.weight, mode="fan_out", nonlinearity="relu")
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
