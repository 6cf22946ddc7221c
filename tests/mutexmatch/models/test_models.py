"""Backbone registry, every registered backbone (parametrised over BACKBONES), and the MutexNet wrapper."""
from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from mutexmatch.models import BACKBONES, Backbone, MutexNet, build_backbone, build_model
from mutexmatch.models.wrn import WideBasicBlock, WideResNet

ALL_BACKBONES = sorted(BACKBONES)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _test_size(name: str) -> int:
    # Natural size, capped at 32 so the large nets (WRN-37-2 at 96, ResNet-18) stay fast.
    return min(BACKBONES[name].typical_image_size, 32)


# --- independent parameter counts (closed forms, written from the architecture descriptions) -------------------

def _bn(c: int) -> int:
    return 2 * c


def _wrn_count(k: int, groups: int, c: int, in_ch: int = 3, n: int = 4) -> int:
    total = in_ch * 16 * 9
    prev = 16
    for g in range(groups):
        w = 16 * k * 2**g
        for i in range(n):
            cin = prev if i == 0 else w
            total += _bn(cin) + cin * w * 9 + _bn(w) + w * w * 9
            if cin != w:
                total += cin * w  # 1x1 shortcut, no bias
        prev = w
    return total + _bn(prev) + prev * c + c


def _wn_conv(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout + cout  # direction v, magnitude g (one per output channel), bias


def _cnn13_count(c: int, in_ch: int = 3) -> int:
    convs = [(in_ch, 128, 3), (128, 128, 3), (128, 128, 3), (128, 256, 3), (256, 256, 3), (256, 256, 3),
             (256, 512, 3), (512, 256, 1), (256, 128, 1)]
    return sum(_wn_conv(a, b, k) + _bn(b) for a, b, k in convs) + 128 * c + c


def _small_cnn_count(c: int, in_ch: int) -> int:
    return in_ch * 32 * 9 + _bn(32) + 32 * 64 * 9 + _bn(64) + 64 * 128 * 9 + _bn(128) + 128 * c + c


# Exact counts for C = 10, in_channels = 3 (every registered backbone must appear here).
EXPECTED_PARAMS = {
    "wrn28_2": 1_467_610,  # the widely quoted FixMatch WRN-28-2 figure
    "wrn28_8": 23_354_842,  # 23,401,012 with C = 100 (the "23.4 M" of FixMatch's CIFAR-100 net)
    "wrn37_2": 5_929_434,
    "cnn13": 3_125_898,
    "resnet18": 11_181_642,  # torchvision's 11,689,512 minus its 1000-way fc plus Linear(512, 10)
    "small_cnn": 94_762,
}
FEAT_DIM = {"wrn28_2": 128, "wrn28_8": 512, "wrn37_2": 256, "cnn13": 128, "resnet18": 512, "small_cnn": 128}


def test_registry_contents() -> None:
    assert set(BACKBONES) == set(EXPECTED_PARAMS) == set(FEAT_DIM)
    for name, spec in BACKBONES.items():
        assert spec.name == name
        assert spec.min_image_size <= spec.typical_image_size


def test_closed_forms_agree_with_expected_counts() -> None:
    assert _wrn_count(2, 3, 10) == EXPECTED_PARAMS["wrn28_2"]
    assert _wrn_count(8, 3, 10) == EXPECTED_PARAMS["wrn28_8"]
    assert _wrn_count(8, 3, 100) == 23_401_012
    assert _wrn_count(2, 4, 10) == EXPECTED_PARAMS["wrn37_2"]
    assert _cnn13_count(10) == EXPECTED_PARAMS["cnn13"]
    assert _small_cnn_count(10, 3) == EXPECTED_PARAMS["small_cnn"]
    tv = torchvision.models.resnet18(weights=None, num_classes=10)
    assert _n_params(tv) == EXPECTED_PARAMS["resnet18"]


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_parameter_count(name: str) -> None:
    backbone = build_backbone(name, num_classes=10)
    assert _n_params(backbone) == EXPECTED_PARAMS[name]
    assert backbone.feat_dim == FEAT_DIM[name]
    assert isinstance(backbone.classifier, nn.Linear)
    assert (backbone.classifier.in_features, backbone.classifier.out_features) == (FEAT_DIM[name], 10)


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_forward_backward_through_mutexnet(name: str) -> None:
    # Unusual C and in_channels on purpose: catches hard-coded 10 classes or RGB input.
    torch.manual_seed(0)
    num_classes, in_channels, size = 7, 2, _test_size(name)
    model = build_model(name, num_classes=num_classes, in_channels=in_channels, image_size=size)
    assert isinstance(model.backbone, Backbone)
    assert isinstance(model.tnc, nn.Linear)
    assert (model.tnc.in_features, model.tnc.out_features) == (FEAT_DIM[name], num_classes)
    model.train()
    x = torch.randn(2, in_channels, size, size)
    y = torch.tensor([1, 5])
    feats = model(x)
    assert feats.shape == (2, FEAT_DIM[name])
    tpc_logits, tnc_logits = model.tpc(feats), model.tnc(feats)
    assert tpc_logits.shape == tnc_logits.shape == (2, num_classes)
    assert torch.isfinite(feats).all() and torch.isfinite(tpc_logits).all() and torch.isfinite(tnc_logits).all()
    (F.cross_entropy(tpc_logits, y) + F.cross_entropy(tnc_logits, y)).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{pname} received no gradient (unused parameter?)"
        assert torch.isfinite(p.grad).all(), pname
    assert any(p.grad.abs().sum() > 0 for p in model.backbone.parameters())


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_eval_heads_and_channels_last(name: str) -> None:
    torch.manual_seed(0)
    size = _test_size(name)
    model = build_model(name, num_classes=10, image_size=size).eval()
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        feats = model(x)
        logits = model.forward_tpc(x)
        torch.testing.assert_close(logits, model.backbone(x))
        torch.testing.assert_close(logits, model.tpc(feats))
        torch.testing.assert_close(feats, model.backbone.forward_features(x))
        model_cl = model.to(memory_format=torch.channels_last)
        x_cl = x.contiguous(memory_format=torch.channels_last)
        assert x_cl.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(model_cl.forward_tpc(x_cl), logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in ALL_BACKBONES if BACKBONES[n].min_image_size > 1])
def test_minimum_image_size(name: str) -> None:
    spec = BACKBONES[name]
    model = build_backbone(name, num_classes=3, image_size=spec.min_image_size).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, spec.min_image_size, spec.min_image_size)).shape == (1, 3)
    with pytest.raises(ValueError, match=r"image_size=.*at least"):
        build_backbone(name, num_classes=3, image_size=spec.min_image_size - 1)


def test_unknown_backbone_names_the_field_and_lists_choices() -> None:
    with pytest.raises(ValueError, match=r"model\.backbone='wrn28_3'") as err:
        build_backbone("wrn28_3", num_classes=10)
    for name in BACKBONES:
        assert name in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": True}, "num_classes"),
        ({"num_classes": 10, "in_channels": 0}, "in_channels"),
        ({"num_classes": 10, "image_size": 0}, "image_size"),
        ({"num_classes": 10, "image_size": 32.0}, "image_size"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}="):
        build_backbone("small_cnn", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["wrn28_2", "wrn28_8", "wrn37_2"])
def test_wrn_batchnorm_momentum_follows_the_ema_like_the_released_code(name: str) -> None:
    """bn_momentum = 1 - ema_m in the released code; exactly 0.001 at the default EMA (the momentum we always used)."""
    model = build_backbone(name, num_classes=10)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(bn.momentum == 0.001 for bn in bns)
    model.tie_bn_momentum_to_ema(0.999)
    assert all(bn.momentum == 0.001 for bn in bns)
    model.tie_bn_momentum_to_ema(0.99)
    assert all(bn.momentum == 0.01 for bn in bns)
    model.tie_bn_momentum_to_ema(0.9997)
    assert all(bn.momentum == pytest.approx(0.0003, abs=1e-15) for bn in bns)


def test_other_backbones_keep_their_momentum_under_any_ema() -> None:
    for name in ("small_cnn", "cnn13", "resnet18"):
        model = build_backbone(name, num_classes=10)
        before = [m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        model.tie_bn_momentum_to_ema(0.9)
        assert [m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)] == before


def test_mutexnet_without_tnc_and_head_mismatch() -> None:
    with_tnc = build_model("small_cnn", num_classes=10, in_channels=1, image_size=16)
    without = build_model("small_cnn", num_classes=10, in_channels=1, image_size=16, with_tnc=False)
    assert without.tnc is None
    assert _n_params(with_tnc) - _n_params(without) == 128 * 10 + 10
    assert _n_params(without) == _small_cnn_count(10, 1)
    with pytest.raises(ValueError, match=r"num_classes=5"):
        MutexNet(build_backbone("small_cnn", num_classes=10), num_classes=5)


def test_wrn_hyper_parameters_and_init() -> None:
    torch.manual_seed(0)
    model = build_backbone("wrn28_2", num_classes=10)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 3 * 4 * 2 + 1
    for bn in bns:
        assert bn.momentum == pytest.approx(0.001)
        assert torch.equal(bn.weight, torch.ones_like(bn.weight)) and torch.equal(bn.bias, torch.zeros_like(bn.bias))
    acts = [m for m in model.modules() if isinstance(m, nn.LeakyReLU)]
    assert acts and all(a.negative_slope == pytest.approx(0.1) for a in acts)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 1 + 3 * 4 * 2 + 3 and all(c.bias is None for c in convs)
    # The largest 3x3 conv (128 -> 128, 147k weights): N(0, sqrt(2 / (9 * 128))).
    big = max(convs, key=lambda c: c.weight.numel())
    assert big.weight.std().item() == pytest.approx(math.sqrt(2 / (9 * 128)), rel=0.02)
    assert big.weight.mean().abs().item() < 0.002
    assert torch.equal(model.classifier.bias, torch.zeros(10))


def test_wrn_width_changing_blocks_activate_before_both_branches() -> None:
    """Released-code behaviour: the first block of every group feeds LeakyReLU(BN(x)) to the shortcut conv."""
    torch.manual_seed(0)
    model = build_backbone("wrn28_2", num_classes=10).eval()
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    first_blocks = [group[0] for group in model.groups]
    assert all(isinstance(b, WideBasicBlock) and b.shortcut is not None for b in first_blocks)
    for gi, block in enumerate(first_blocks):
        # Non-trivial BN statistics so that "activated" and "raw" inputs differ by more than the ReLU.
        block.bn1.running_mean.uniform_(-1, 1)
        block.bn1.running_var.uniform_(0.5, 2)

        def hook(mod: nn.Module, args: tuple[torch.Tensor, ...], gi: int = gi) -> None:
            seen.setdefault(gi, (args[0].clone(), torch.empty(0)))

        def shortcut_hook(mod: nn.Module, args: tuple[torch.Tensor, ...], gi: int = gi) -> None:
            seen[gi] = (seen[gi][0], args[0].clone())

        block.register_forward_pre_hook(hook)
        block.shortcut.register_forward_pre_hook(shortcut_hook)
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert sorted(seen) == [0, 1, 2]
    for gi, block in enumerate(first_blocks):
        block_in, shortcut_in = seen[gi]
        expected = F.leaky_relu(block.bn1(block_in), 0.1)
        torch.testing.assert_close(shortcut_in, expected)
        assert not torch.allclose(shortcut_in, block_in)


def test_wrn37_2_topology_at_stl10_size() -> None:
    model = build_backbone("wrn37_2", num_classes=10)
    assert isinstance(model, WideResNet)
    assert [group[0].conv2.out_channels for group in model.groups] == [32, 64, 128, 256]
    assert [len(group) for group in model.groups] == [4, 4, 4, 4]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 37  # the "37": stem + 32 block convs + 4 shortcut convs
    shapes: list[torch.Size] = []
    for group in model.groups:
        group.register_forward_hook(lambda m, a, out: shapes.append(out.shape[-2:]))
    model.eval()
    with torch.no_grad():
        model(torch.randn(1, 3, 96, 96))
    assert shapes == [torch.Size([96, 96]), torch.Size([48, 48]), torch.Size([24, 24]), torch.Size([12, 12])]


def test_cnn13_layout() -> None:
    model = build_backbone("cnn13", num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [128, 128, 128, 256, 256, 256, 512, 256, 128]
    assert [c.padding for c in convs][-3:] == [(0, 0), (0, 0), (0, 0)]
    assert all(hasattr(c, "parametrizations") and "weight" in c.parametrizations for c in convs)
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert [d.p for d in drops] == [0.5, 0.5]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 9
