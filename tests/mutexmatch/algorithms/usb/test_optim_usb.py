"""USB's fine-tuning recipe (issue 42 item 3) against semilearn 0.3.2's own code: the AdamW parameter groups
(name -> lr, weight decay, and the groups' order) of ``get_optimizer`` for layer decays 0.5, 0.65, 0.95 and 1.0, and
the learning rate of ``get_cosine_schedule_with_warmup`` at the warm-up's edges and the schedule's end.

The model is a small ViT with timm's parameter names whose ``group_matcher`` and ``no_weight_decay`` are USB's
``VisionTransformer``'s own methods (USB's ViT itself needs timm to build, which the reference does not install)."""
from __future__ import annotations

import importlib
import types

import pytest
import torch
from torch import nn

from mutexmatch.config import parse_config
from mutexmatch.training.layer_decay import usb_param_groups
from mutexmatch.training.optim import lr_schedule, optimizer

DECAYS = (0.5, 0.65, 0.95, 1.0)


@pytest.fixture(scope="module")
def usb(usb_lockstep):
    """semilearn's build functions and its ViT class (imported through the harness, or skipped with the command)."""
    build = importlib.import_module("semilearn.core.utils.build")
    vit = importlib.import_module("semilearn.nets.vit.vit")
    return build, vit.VisionTransformer


class _Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)


def _tiny_vit(usb_vit: type, depth: int = 3, d: int = 8, classes: int = 5) -> nn.Module:
    """timm's ViT parameter names in timm's order (USB's ViT: cls_token, pos_embed, patch_embed.proj, blocks.N.*,
    norm, head), with USB's VisionTransformer's group_matcher and no_weight_decay."""
    class TinyViT(nn.Module):
        group_matcher = usb_vit.group_matcher
        no_weight_decay = usb_vit.no_weight_decay

        def __init__(self) -> None:
            super().__init__()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
            self.pos_embed = nn.Parameter(torch.zeros(1, 17, d))
            self.patch_embed = nn.Module()
            self.patch_embed.proj = nn.Conv2d(3, d, 2, 2)
            self.blocks = nn.Sequential(*[_Block(d) for _ in range(depth)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)
    return TinyViT()


def _names(model: nn.Module, groups: list[dict], prefix: str = "") -> list[list[tuple[str, float, float]]]:
    """Each group as [(parameter name, lr, weight decay)], names without ``prefix``."""
    name = {id(p): n.removeprefix(prefix) for n, p in model.named_parameters()}
    return [[(name[id(p)], g.get("lr"), g["weight_decay"]) for p in g["params"]] for g in groups]


@pytest.mark.parametrize("decay", DECAYS)
def test_param_groups_equal_usbs(usb, decay: float) -> None:
    build, usb_vit = usb
    vit = _tiny_vit(usb_vit)
    theirs = build.get_optimizer(vit, "AdamW", lr=5e-4, weight_decay=5e-4, layer_decay=decay)
    ours = optimizer(vit, parse_config({"optim": {"name": "adamw", "lr": 5e-4, "weight_decay": 5e-4,
                                                  "layer_decay": decay}}), torch.device("cpu"))
    assert type(ours) is type(theirs)
    assert _names(vit, ours.param_groups) == _names(vit, theirs.param_groups)
    for mine, usbs in zip(ours.param_groups, theirs.param_groups):   # AdamW's own settings
        assert {k: mine[k] for k in ("betas", "eps", "amsgrad")} == {k: usbs[k] for k in ("betas", "eps", "amsgrad")}
    table = {n: (lr, wd) for g in _names(vit, theirs.param_groups) for n, lr, wd in g}
    assert table["pos_embed"][1] == table["cls_token"][1] == table["blocks.0.attn.qkv.bias"][1] == 0.0
    assert table["blocks.0.attn.qkv.weight"][1] == 5e-4
    if decay < 1:   # the stem at d^(depth + 1), the final norm with the last block, the head at lr: not vacuous
        assert table["pos_embed"][0] == pytest.approx(5e-4 * decay ** 4)
        assert table["norm.weight"][0] == table["blocks.2.mlp.fc2.weight"][0] == pytest.approx(5e-4 * decay)
        assert table["head.weight"][0] == 5e-4


@pytest.mark.parametrize("decay", DECAYS)
def test_a_wrapped_backbone_keeps_usbs_groups_and_heads_train_at_the_top_layer(usb, decay: float) -> None:
    """In a MutexNet-like wrapper (``backbone`` + ``tnc``) the backbone's parameters keep USB's groups and the TNC
    gets the head's learning rate and decay (weight decayed, bias not)."""
    build, usb_vit = usb
    wrapper = nn.Module()
    wrapper.backbone, wrapper.tnc = _tiny_vit(usb_vit), nn.Linear(8, 5)
    theirs = {n: (lr, wd) for g in _names(wrapper.backbone, build.get_optimizer(
        wrapper.backbone, "AdamW", lr=1e-3, weight_decay=0.05, layer_decay=decay).param_groups) for n, lr, wd in g}
    ours = {n: (lr, wd) for g in _names(wrapper, usb_param_groups(wrapper, 1e-3, 0.05, decay), "backbone.")
            for n, lr, wd in g}
    # a group without "lr" (layer decay 1) trains at the optimiser's lr
    ours = {n: (1e-3 if lr is None else lr, wd) for n, (lr, wd) in ours.items()}
    theirs = {n: (1e-3 if lr is None else lr, wd) for n, (lr, wd) in theirs.items()}
    assert {n: v for n, v in ours.items() if not n.startswith("tnc.")} == theirs
    assert ours["tnc.weight"] == theirs["head.weight"] and ours["tnc.bias"] == theirs["head.bias"]


@pytest.mark.parametrize(("warmup", "schedule_end"), [(10, 60), (1, 7), (0, 40)])
def test_learning_rate_equals_usbs_at_the_warmups_edges_and_the_end(usb, warmup: int, schedule_end: int) -> None:
    build, usb_vit = usb
    cfg = parse_config({"optim": {"name": "adamw", "lr": 5e-4, "warmup": warmup, "layer_decay": 0.65},
                        "train": {"iterations": schedule_end}})
    ours_opt = optimizer(_tiny_vit(usb_vit), cfg, torch.device("cpu"))
    theirs_opt = build.get_optimizer(_tiny_vit(usb_vit), "AdamW", lr=5e-4, weight_decay=5e-4, layer_decay=0.65)
    ours, theirs = lr_schedule(ours_opt, cfg), build.get_cosine_schedule_with_warmup(
        theirs_opt, schedule_end, num_warmup_steps=warmup)
    seen = {}
    for t in range(schedule_end + 1):
        seen[t] = (ours.get_last_lr(), theirs.get_last_lr())
        ours_opt.step(), theirs_opt.step()
        ours.step(), theirs.step()
    # without warm-up our factor keeps the released code's float order (cos(c·π·t/T), every earlier run's), so
    # only its two ends are USB's bit for bit
    edges = {0, schedule_end} | ({1, warmup - 1, warmup, warmup + 1, schedule_end - 1} if warmup else set())
    for t in sorted(edges):
        assert seen[t][0] == seen[t][1], f"step {t}: ours {seen[t][0]}, USB's {seen[t][1]}"
    for t in range(schedule_end + 1):   # between the edges: equal up to the cosine's float order without warm-up
        assert seen[t][0] == pytest.approx(seen[t][1], rel=1e-12, abs=1e-18)
    if warmup > 1:   # the warm-up really ramps: 0 at step 0, lr at its end
        assert max(seen[0][0]) == 0.0 and max(seen[warmup][0]) == 5e-4


@pytest.mark.parametrize("decay", DECAYS)
def test_our_vit_in_a_run_gets_usbs_groups(usb, decay: float) -> None:
    """Our registered vit_tiny_patch2_32 (12 blocks, timm's names) inside the network a run trains (MutexNet: the
    TNC beside it): the backbone's parameters get the groups USB's get_optimizer gives the same backbone under USB's
    own VisionTransformer.group_matcher and no_weight_decay; the TNC those of the head."""
    from mutexmatch.models import build_model

    build, usb_vit = usb
    net = build_model("vit_tiny_patch2_32", num_classes=10, image_size=32)
    cfg = parse_config({"optim": {"name": "adamw", "lr": 5e-4, "weight_decay": 5e-4, "layer_decay": decay}})
    ours = optimizer(net, cfg, torch.device("cpu"))
    backbone = net.backbone
    backbone.group_matcher = types.MethodType(usb_vit.group_matcher, backbone)   # USB's, not ours
    backbone.no_weight_decay = types.MethodType(usb_vit.no_weight_decay, backbone)
    theirs = build.get_optimizer(backbone, "AdamW", lr=5e-4, weight_decay=5e-4, layer_decay=decay)
    table = {n: (lr, wd) for g in _names(net, ours.param_groups, "backbone.") for n, lr, wd in g}
    usbs = {n: (lr, wd) for g in _names(backbone, theirs.param_groups) for n, lr, wd in g}
    assert {n: v for n, v in table.items() if not n.startswith("tnc.")} == usbs
    assert table["tnc.weight"] == usbs["head.weight"] and table["tnc.bias"] == usbs["head.bias"]
    assert len({lr for lr, _ in usbs.values()}) == (1 if decay == 1 else 14)   # stem, 12 blocks (+ norm), head
