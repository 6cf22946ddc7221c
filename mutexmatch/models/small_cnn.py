"""A small CNN for the embedded ``digits`` dataset (1×16×16 images, 10 classes) and CPU smoke runs.

Not from the paper: it exists so that a full MutexMatch run (B = 64, μ = 7: 960 images per step) fits in seconds
per step on two CPU cores. Three conv blocks (3×3 conv without bias → BN → LeakyReLU(0.1)) of 32, 64 and 128
channels with 2×2 max-pooling after the first two, then global average pooling and a Linear head (the TPC);
feat_dim 128, about 94k parameters at in_channels = 1 and C = 10. Conv init as in the WRNs (Kaiming normal,
fan-out); BN weight 1, bias 0; head bias 0.
"""
from __future__ import annotations

from torch import nn

from mutexmatch.models.base import PooledBackbone
from mutexmatch.models.registry import register_backbone

_LEAKY_SLOPE = 0.1
_WIDTHS = (32, 64, 128)


class SmallCNN(PooledBackbone):
    """Three conv-BN-LeakyReLU blocks (32/64/128), max-pool after the first two, global average pool; feat_dim 128."""

    def __init__(self, num_classes: int, in_channels: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = in_channels
        for i, width in enumerate(_WIDTHS):
            layers += [
                nn.Conv2d(in_ch, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.LeakyReLU(_LEAKY_SLOPE, inplace=True),
            ]
            if i < len(_WIDTHS) - 1:
                layers.append(nn.MaxPool2d(2))
            in_ch = width
        self.features = nn.Sequential(*layers)
        self.feat_dim = in_ch
        self.classifier = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)


@register_backbone(
    "small_cnn", feat_dim=128, param_count=94_762, typical_image_size=16, min_image_size=4,
    activation_bytes_per_pixel=None,  # not measured: the memory check counts the input batch alone
    description="small 3-block CNN (32/64/128) for the embedded 16×16 digits data",
)
def small_cnn(num_classes: int, in_channels: int) -> SmallCNN:
    return SmallCNN(num_classes, in_channels)
