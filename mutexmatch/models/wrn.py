"""Wide ResNets as in the released MutexMatch code (a FixMatch-pytorch port): WRN-28-2, WRN-28-8 and WRN-37-2.

Architecture (``models/nets/wrn.py`` of the released code, run with ``leaky_slope=0.1`` and
``bn_momentum = 1 - ema_m = 0.001``):

* 3×3 stem conv to 16 channels, then groups of ``blocks_per_group`` pre-activation basic blocks
  (BN → LeakyReLU(0.1) → 3×3 conv → BN → LeakyReLU(0.1) → 3×3 conv, plus the shortcut) with widths 16k, 32k, 64k
  (and 128k for the four-group WRN-37-2); groups after the first downsample by 2 in their first block.
* The first block of **every** group (the one that changes the width) activates its input before both the residual
  branch and the 1×1 shortcut conv. (kekmodel's FixMatch-pytorch only does this in the first group and feeds the
  raw input to both branches of the other groups' first blocks; the TF FixMatch activates only the residual branch
  there. We follow the released MutexMatch code.)
* Final BN → LeakyReLU(0.1) → global average pooling → Linear head (the TPC).
* Convs have no bias. Init: conv weights N(0, √(2 / (k·k·out_channels))) (Kaiming normal, fan-out); BN weight 1,
  bias 0; head bias 0 and head weight left at PyTorch's default (the released code only zeroes the bias).
* BN momentum 0.001, eps 1e-5. The released code derives it from the EMA decay (``bn_momentum = 1 - ema_m``);
  under ``algorithm.form: official`` the trainer does the same through :meth:`WideResNet.tie_bn_momentum_to_ema`
  (0.001 exactly at the default EMA 0.999, so the default is unchanged).

The released code also creates an unused ``BatchNorm2d(16k)`` (``bn3``) that never enters the forward pass; it is
omitted here, so WRN-28-2 with 10 classes has 1,467,610 parameters (the released code counts 64 more).
"""
from __future__ import annotations

from decimal import Decimal

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.models.base import Backbone
from mutexmatch.models.registry import register_backbone

_BN_MOMENTUM = 0.001  # = 1 - EMA decay 0.999: the released code ties them (args.bn_momentum = 1.0 - args.ema_m)
_LEAKY_SLOPE = 0.1


def bn_momentum_for_ema(ema: float) -> float:
    """The released code's ``bn_momentum = 1 - ema_m``, subtracted in decimal so that the default EMA 0.999 gives
    exactly the 0.001 our WRNs always used (the released code's binary ``1.0 - 0.999`` is 0.0010000000000000009)."""
    return float(Decimal(1) - Decimal(repr(float(ema))))


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=_BN_MOMENTUM)


class WideBasicBlock(nn.Module):
    """Pre-activation basic block; a width-changing block activates before both branches (see module doc)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = _bn(in_channels)
        self.act1 = nn.LeakyReLU(_LEAKY_SLOPE, inplace=True)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = _bn(out_channels)
        self.act2 = nn.LeakyReLU(_LEAKY_SLOPE, inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        # Identity shortcut only when the shapes allow it; the released code decides on width alone, and in these
        # networks every strided block also changes the width.
        if in_channels == out_channels and stride == 1:
            self.shortcut: nn.Conv2d | None = None
        else:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.act1(self.bn1(x))
        out = self.conv2(self.act2(self.bn2(self.conv1(pre))))
        # Projection shortcut: fed the activated input (released code), identity shortcut: the raw input.
        return out + (x if self.shortcut is None else self.shortcut(pre))


class WideResNet(Backbone):
    """Wide ResNet with ``num_groups`` groups of ``blocks_per_group`` blocks and widths 16k·2^g (see module doc).

    Args:
        num_classes: outputs of the head (the TPC).
        in_channels: image channels.
        widen_factor: k.
        blocks_per_group: n; depth = 6n + 4 for three groups (WRN-28: n = 4).
        num_groups: 3 (WRN-28-k) or 4 (WRN-37-2).
        first_stride: stride of the first group (1 in FixMatch for both CIFAR and STL-10).
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int = 3,
        *,
        widen_factor: int,
        blocks_per_group: int = 4,
        num_groups: int = 3,
        first_stride: int = 1,
    ) -> None:
        super().__init__()
        widths = [16 * widen_factor * 2**g for g in range(num_groups)]
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        groups: list[nn.Module] = []
        in_ch = 16
        for g, width in enumerate(widths):
            blocks = [
                WideBasicBlock(in_ch if i == 0 else width, width, (first_stride if g == 0 else 2) if i == 0 else 1)
                for i in range(blocks_per_group)
            ]
            groups.append(nn.Sequential(*blocks))
            in_ch = width
        self.groups = nn.Sequential(*groups)
        self.bn_final = _bn(in_ch)
        self.act_final = nn.LeakyReLU(_LEAKY_SLOPE, inplace=True)
        self.feat_dim = in_ch
        self.classifier = nn.Linear(in_ch, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                # std = sqrt(2 / (k*k*out)), the released code's normal_(0, sqrt(2/n)) with n = k*k*out_channels.
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def tie_bn_momentum_to_ema(self, ema: float) -> None:
        """Every BatchNorm momentum := 1 - ``ema`` (:func:`bn_momentum_for_ema`), as the released code's WRN."""
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = bn_momentum_for_ema(ema)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.groups(self.conv1(x))
        out = self.act_final(self.bn_final(out))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)


@register_backbone(
    "wrn28_2", feat_dim=128, param_count=1_467_610,  # the widely quoted FixMatch WRN-28-2 figure
    typical_image_size=32, activation_bytes_per_pixel=3700,
    description="WRN-28-2 (CIFAR-10/SVHN backbone of FixMatch and MutexMatch)",
)
def wrn28_2(num_classes: int, in_channels: int) -> WideResNet:
    return WideResNet(num_classes, in_channels, widen_factor=2)


@register_backbone(
    "wrn28_8", feat_dim=512, param_count=23_354_842,  # 23,401,012 with C = 100 (FixMatch's "23.4 M")
    typical_image_size=32, activation_bytes_per_pixel=14400,
    description="WRN-28-8 (CIFAR-100 backbone of FixMatch and MutexMatch)",
)
def wrn28_8(num_classes: int, in_channels: int) -> WideResNet:
    return WideResNet(num_classes, in_channels, widen_factor=8)


@register_backbone(
    "wrn37_2", feat_dim=256, param_count=5_929_434, typical_image_size=96, activation_bytes_per_pixel=3900,
    description="WRN-37-2 (FixMatch's STL-10 backbone): 4 groups × 4 blocks, widths 32/64/128/256",
)
def wrn37_2(num_classes: int, in_channels: int) -> WideResNet:
    """FixMatch's STL-10 WRN-37-2: the WRN-28-2 recipe with a fourth group of width 128k (k = 2), feat_dim 256.

    Source: google-research/fixmatch ``libml/models.py`` ``ResNet.classifier`` with ``filters=32, repeat=4`` and
    ``scales = log2(96) - 2 = 4`` for 96×96 inputs: the first scale has stride 1, the next three stride 2
    (96 → 96, 48, 24, 12). The name counts conv layers: 1 stem + 4·4·2 block convs + 4 shortcut convs = 37.
    The released MutexMatch code cannot build it (its WRN asserts (depth − 4) % 6 == 0 and has three groups).
    TorchSSL / USB (``wrn_var``) build the same topology but with conv biases and BN eps 1e-3 (TF defaults), and
    USB's ``wrn_var_37_2`` uses first stride 2; here the block, init and BN conventions are those of our WRN-28
    (the released code's), so the only difference from WRN-28-2 is the fourth group.
    """
    return WideResNet(num_classes, in_channels, widen_factor=2, num_groups=4, first_stride=1)
