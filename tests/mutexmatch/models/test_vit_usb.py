"""Issue 42 item 1's acceptance: each of USB-CV's four ViTs equals semilearn 0.3.2's (``semilearn/nets/vit``, built
with timm's layers) on shared random weights: the same parameter names, shapes and order (a strict load both ways),
the same drop-path rate per block, and the same features and logits in fp32, eval mode and training mode (drop
path drawn from the same seed), max |Δ| ≤ 1e-6; and timm's own ``VisionTransformer`` (unfused attention) loads into
ours strictly and computes the same logits. Skipped, with the command, where ``make usb-reference`` has not
installed the reference (semilearn and timm)."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.models import BACKBONES, build_backbone

VITS = ("vit_tiny_patch2_32", "vit_small_patch2_32", "vit_small_patch16_224", "vit_base_patch16_96")
CLASSES = 10
TOL = 1e-6


def _shared_weights(usb_model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """USB's initial weights, every tensor moved by N(0, 0.02²) noise: the tokens and position embeddings are no
    longer zero, the LayerNorms no longer the identity."""
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.02 * torch.randn(v.shape, generator=g) for k, v in usb_model.state_dict().items()}


def _pair(usb_nets, name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    ours = build_backbone(name, num_classes=CLASSES)
    usb = getattr(usb_nets.vit, name)(num_classes=CLASSES)
    weights = _shared_weights(usb, seed=len(name))
    usb.load_state_dict(weights, strict=True)
    ours.load_state_dict(weights, strict=True)
    return ours, usb


def test_the_four_usb_cv_vits_are_registered() -> None:
    assert set(VITS) <= set(BACKBONES)


@pytest.mark.parametrize("name", VITS)
def test_architecture_equals_usb(usb_nets, name: str) -> None:
    ours, usb = _pair(usb_nets, name)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, v.shape) for k, v in usb.state_dict().items()]
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in usb.named_parameters()]   # the groups' order
    ours_rates = [(b.drop_path1.p, b.drop_path2.p) for b in ours.blocks]
    usb_rates = [tuple(getattr(getattr(b, f"drop_path{i}"), "drop_prob", 0.0) for i in (1, 2)) for b in usb.blocks]
    assert ours_rates == usb_rates and max(r for r, _ in ours_rates) > 0
    assert ours.no_weight_decay() == usb.no_weight_decay()
    assert ours.group_matcher() == usb.group_matcher()
    assert ours.feat_dim == usb.num_features == BACKBONES[name].feat_dim


@pytest.mark.parametrize("name", VITS)
def test_forward_equals_usb(usb_nets, name: str) -> None:
    ours, usb = _pair(usb_nets, name)
    size = BACKBONES[name].typical_image_size
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    ours.eval(), usb.eval()
    with torch.no_grad():
        feats, logits = ours.forward_features(x), ours(x)
        ref = usb(x)
    assert (feats - ref["feat"]).abs().max() <= TOL
    assert (logits - ref["logits"]).abs().max() <= TOL
    assert logits.std() > 0.1   # not a degenerate output that agrees trivially

    ours.train(), usb.train()   # stochastic depth: the same rows dropped from the same seed
    with torch.no_grad():
        torch.manual_seed(3)
        train_logits = ours(x)
        torch.manual_seed(3)
        ref_train = usb(x)["logits"]
    assert (train_logits - ref_train).abs().max() <= TOL
    assert (train_logits - logits).abs().max() > 1e-3   # drop path did drop something


# timm's own VisionTransformer (the names USB's files and timm's share), with its unfused attention: timm's fused
# kernel is F.scaled_dot_product_attention, 2.6e-6 from USB's order of operations in fp32
TIMM_ARGS = {"vit_tiny_patch2_32": dict(patch_size=2, embed_dim=192, num_heads=3, drop_path_rate=0.1),
             "vit_small_patch16_224": dict(patch_size=16, embed_dim=384, num_heads=6, drop_path_rate=0.2)}


@pytest.mark.parametrize("name", sorted(TIMM_ARGS))
def test_timm_vision_transformer_state_dict_loads_strictly_and_computes_the_same(usb_nets, name: str) -> None:
    import timm.layers
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    size = BACKBONES[name].typical_image_size
    fused = timm.layers.use_fused_attn()
    timm.layers.set_fused_attn(False)
    try:
        theirs = TimmViT(img_size=size, depth=12, num_classes=CLASSES, **TIMM_ARGS[name]).eval()
    finally:
        timm.layers.set_fused_attn(fused)
    weights = _shared_weights(theirs, seed=5)
    theirs.load_state_dict(weights, strict=True)
    ours = build_backbone(name, num_classes=CLASSES).eval()
    ours.load_state_dict(weights, strict=True)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() <= TOL
