"""The 13-layer CNN ("CNN-13") of the Mean Teacher / FixMatch literature, as the released MutexMatch code uses it.

Layout (the Mean Teacher "conv-large" variant with weight-normalised convolutions and dropout, as listed in the
project's notes on the released code): three 3×3 convs of 128 channels → 2×2 max-pool → dropout 0.5 → three 3×3
convs of 256 → max-pool → dropout 0.5 → 3×3 *valid* conv to 512 → 1×1 conv to 256 → 1×1 conv to 128 → global
average pooling → Linear head (the TPC). Every conv is followed by BatchNorm and LeakyReLU(0.1) (conv → BN → act, the
Mean Teacher order). Convs keep their bias, as in the Mean Teacher code. The head is a plain ``nn.Linear``
(the released code's TPC/TNC pair are both plain linear layers on the 128-d features).
"""
from __future__ import annotations

from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from mutexmatch.models.base import PooledBackbone
from mutexmatch.models.registry import register_backbone

_LEAKY_SLOPE = 0.1


def _conv_bn_act(in_channels: int, out_channels: int, kernel_size: int, padding: int) -> list[nn.Module]:
    return [
        weight_norm(nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)),
        nn.BatchNorm2d(out_channels),
        nn.LeakyReLU(_LEAKY_SLOPE, inplace=True),
    ]


class CNN13(PooledBackbone):
    """CNN-13 (see module doc); feat_dim 128. Needs inputs of at least 12×12 (two pools, then a valid 3×3 conv)."""

    def __init__(self, num_classes: int, in_channels: int = 3, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv_bn_act(in_channels, 128, 3, 1),
            *_conv_bn_act(128, 128, 3, 1),
            *_conv_bn_act(128, 128, 3, 1),
            nn.MaxPool2d(2, stride=2),
            nn.Dropout(dropout),
            *_conv_bn_act(128, 256, 3, 1),
            *_conv_bn_act(256, 256, 3, 1),
            *_conv_bn_act(256, 256, 3, 1),
            nn.MaxPool2d(2, stride=2),
            nn.Dropout(dropout),
            *_conv_bn_act(256, 512, 3, 0),
            *_conv_bn_act(512, 256, 1, 0),
            *_conv_bn_act(256, 128, 1, 0),
        )
        self.feat_dim = 128
        self.classifier = nn.Linear(128, num_classes)


@register_backbone(
    "cnn13", feat_dim=128, param_count=3_125_898, typical_image_size=32, min_image_size=12,
    activation_bytes_per_pixel=6400,
    description="CNN-13 (Mean Teacher conv-large with weight norm and dropout 0.5)",
)
def cnn13(num_classes: int, in_channels: int) -> CNN13:
    return CNN13(num_classes, in_channels)
