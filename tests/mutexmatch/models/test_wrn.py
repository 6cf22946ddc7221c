"""The Wide ResNets: parameter counts in closed form, BatchNorm momentum tied to the EMA like the released code,
init, the released code's activated shortcut, and WRN-37-2's topology at the STL-10 size."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.models import BACKBONES, build_backbone
from mutexmatch.models.wrn import WideBasicBlock, WideResNet


def _wrn_count(k: int, groups: int, c: int, in_ch: int = 3, n: int = 4) -> int:
    """Parameters of a WRN written from the module's description (BatchNorm: weight and bias)."""
    total = in_ch * 16 * 9
    prev = 16
    for g in range(groups):
        w = 16 * k * 2**g
        for i in range(n):
            cin = prev if i == 0 else w
            total += 2 * cin + cin * w * 9 + 2 * w + w * w * 9
            if cin != w:
                total += cin * w  # 1x1 shortcut, no bias
        prev = w
    return total + 2 * prev + prev * c + c


def test_closed_form_parameter_counts() -> None:
    assert _wrn_count(2, 3, 10) == BACKBONES["wrn28_2"].param_count == 1_467_610  # FixMatch's quoted figure
    assert _wrn_count(8, 3, 10) == BACKBONES["wrn28_8"].param_count
    assert _wrn_count(8, 3, 100) == 23_401_012  # the "23.4 M" of FixMatch's CIFAR-100 net
    assert _wrn_count(2, 4, 10) == BACKBONES["wrn37_2"].param_count


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
