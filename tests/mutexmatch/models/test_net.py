"""MutexNet: the backbone's features, its TPC and the TNC; without a TNC; a head of the wrong width."""
from __future__ import annotations

import pytest
from torch import nn

from mutexmatch.models import BACKBONES, MutexNet, build_backbone, build_model


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_mutexnet_without_tnc_and_head_mismatch() -> None:
    with_tnc = build_model("small_cnn", num_classes=10, in_channels=1, image_size=16)
    without = build_model("small_cnn", num_classes=10, in_channels=1, image_size=16, with_tnc=False)
    assert without.tnc is None
    feat_dim = BACKBONES["small_cnn"].feat_dim
    assert with_tnc.feat_dim == feat_dim
    assert _n_params(with_tnc) - _n_params(without) == feat_dim * 10 + 10
    assert _n_params(without) == _n_params(build_backbone("small_cnn", num_classes=10, in_channels=1))
    with pytest.raises(ValueError, match=r"num_classes=5"):
        MutexNet(build_backbone("small_cnn", num_classes=10), num_classes=5)


def test_heads_are_attached_once() -> None:
    model = build_model("small_cnn", num_classes=10, image_size=16, with_tnc=False)
    model.add_heads({"proj": nn.Linear(model.feat_dim, 4)})
    assert isinstance(model.heads["proj"], nn.Linear)
    with pytest.raises(ValueError, match=r"model\.heads: a head 'proj' is attached already"):
        model.add_heads({"proj": nn.Linear(model.feat_dim, 4)})
