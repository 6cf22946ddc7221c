"""The small CNN's parameter count in closed form, written from its module's description."""
from __future__ import annotations

from torch import nn

from mutexmatch.models import BACKBONES, build_backbone


def _small_cnn_count(c: int, in_ch: int) -> int:
    # Three bias-free 3x3 convs (32/64/128) with BatchNorm (weight and bias), then Linear(128, c).
    return in_ch * 32 * 9 + 2 * 32 + 32 * 64 * 9 + 2 * 64 + 64 * 128 * 9 + 2 * 128 + 128 * c + c


def test_closed_form_parameter_count() -> None:
    assert _small_cnn_count(10, 3) == BACKBONES["small_cnn"].param_count
    one_channel = build_backbone("small_cnn", num_classes=10, in_channels=1)
    assert sum(p.numel() for p in one_channel.parameters()) == _small_cnn_count(10, 1)


def test_keeps_its_batchnorm_momentum_under_any_ema() -> None:
    model = build_backbone("small_cnn", num_classes=10)
    before = [m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    model.tie_bn_momentum_to_ema(0.9)
    assert [m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)] == before
