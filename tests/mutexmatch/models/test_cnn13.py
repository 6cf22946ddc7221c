"""CNN-13: parameter count in closed form (weight-normalised convs) and its layer layout."""
from __future__ import annotations

from torch import nn

from mutexmatch.models import BACKBONES, build_backbone


def _wn_conv(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout + cout  # direction v, magnitude g (one per output channel), bias


def test_closed_form_parameter_count() -> None:
    convs = [(3, 128, 3), (128, 128, 3), (128, 128, 3), (128, 256, 3), (256, 256, 3), (256, 256, 3),
             (256, 512, 3), (512, 256, 1), (256, 128, 1)]
    count = sum(_wn_conv(a, b, k) + 2 * b for a, b, k in convs) + 128 * 10 + 10
    assert count == BACKBONES["cnn13"].param_count


def test_keeps_its_batchnorm_momentum_under_any_ema() -> None:
    model = build_backbone("cnn13", num_classes=10)
    before = [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    model.tie_bn_momentum_to_ema(0.9)
    assert [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)] == before


def test_cnn13_layout() -> None:
    model = build_backbone("cnn13", num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [128, 128, 128, 256, 256, 256, 512, 256, 128]
    assert [c.padding for c in convs][-3:] == [(0, 0), (0, 0), (0, 0)]
    assert all(hasattr(c, "parametrizations") and "weight" in c.parametrizations for c in convs)
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert [d.p for d in drops] == [0.5, 0.5]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 9
