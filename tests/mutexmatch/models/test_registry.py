"""The backbone registry and every registered backbone, parametrised over ``BACKBONES`` (a new backbone module is
picked up with no edit here): it builds, its features and parameters are those it declares, it trains through a
MutexNet and runs at its image sizes; and the decorator refuses bad facts, naming them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.models import BACKBONES, Backbone, backbones_markdown, build_backbone, build_model, register_backbone
from mutexmatch.models.registry import PARAM_COUNT_CLASSES

ALL_BACKBONES = sorted(BACKBONES)


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _small_size(name: str) -> int:
    # The typical size, capped at 32 so the large nets (WRN-37-2 at 96, ResNet-18) stay fast in the backward test.
    return min(BACKBONES[name].typical_image_size, 32)


def test_the_builtin_backbones_are_registered_from_their_modules() -> None:
    # Not a table of the registry: a floor that fails if the automatic import of the package stops working.
    assert {"wrn28_2", "wrn28_8", "wrn37_2", "cnn13", "resnet18", "small_cnn", "resnet50", "vit_tiny_patch2_32",
            "vit_small_patch2_32", "vit_small_patch16_224", "vit_base_patch16_96"} <= set(BACKBONES)
    for name, spec in BACKBONES.items():
        assert spec.name == name
        assert spec.factory.__module__.startswith("mutexmatch.models.")
        assert spec.min_image_size <= spec.typical_image_size


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_declared_features_and_parameters(name: str) -> None:
    spec = BACKBONES[name]
    backbone = build_backbone(name, num_classes=PARAM_COUNT_CLASSES)
    assert isinstance(backbone, Backbone)
    assert backbone.feat_dim == spec.feat_dim
    assert _n_params(backbone) == spec.param_count
    assert isinstance(backbone.classifier, nn.Linear)
    assert (backbone.classifier.in_features, backbone.classifier.out_features) == (spec.feat_dim, PARAM_COUNT_CLASSES)


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_forward_at_its_typical_and_minimum_image_size(name: str) -> None:
    spec = BACKBONES[name]
    model = build_backbone(name, num_classes=3, image_size=spec.min_image_size).eval()
    for size in sorted({spec.min_image_size, spec.typical_image_size}):
        if spec.patch:   # built for one size (its position embeddings)
            model = build_backbone(name, num_classes=3, image_size=size).eval()
        with torch.no_grad():
            feats = model.forward_features(torch.randn(1, 3, size, size))
        assert feats.shape == (1, spec.feat_dim), size
        assert torch.isfinite(feats).all(), size
    if spec.min_image_size > 1:
        with pytest.raises(ValueError, match=r"image_size=.*at least"):
            build_backbone(name, num_classes=3, image_size=spec.min_image_size - 1)


@pytest.mark.parametrize("name", [n for n in ALL_BACKBONES if BACKBONES[n].patch])
def test_a_patch_backbone_is_built_for_a_multiple_of_its_patch(name: str) -> None:
    spec = BACKBONES[name]
    model = build_backbone(name, num_classes=3, image_size=2 * spec.patch)
    assert model.pos_embed.shape[1] == 4 + 1   # a 2 x 2 grid and the class token
    with pytest.raises(ValueError, match=rf"^image_size={3 * spec.patch + 1}: .*multiple of {spec.patch}$"):
        build_backbone(name, num_classes=3, image_size=3 * spec.patch + 1)


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_forward_backward_through_mutexnet(name: str) -> None:
    # Unusual C and in_channels on purpose: catches hard-coded 10 classes or RGB input.
    torch.manual_seed(0)
    num_classes, in_channels, size, feat_dim = 7, 2, _small_size(name), BACKBONES[name].feat_dim
    model = build_model(name, num_classes=num_classes, in_channels=in_channels, image_size=size)
    assert isinstance(model.backbone, Backbone)
    assert isinstance(model.tnc, nn.Linear)
    assert (model.tnc.in_features, model.tnc.out_features) == (feat_dim, num_classes)
    model.train()
    x = torch.randn(2, in_channels, size, size)
    y = torch.tensor([1, 5])
    feats = model(x)
    assert feats.shape == (2, feat_dim)
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
    size = _small_size(name)
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


@pytest.mark.parametrize("name", ALL_BACKBONES)
def test_memory_fact_is_measured_or_declared_unmeasured(name: str) -> None:
    per_pixel = BACKBONES[name].activation_bytes_per_pixel
    assert per_pixel is None or (isinstance(per_pixel, int) and per_pixel > 0)


def test_docs_table_lists_every_backbone_with_its_facts() -> None:
    lines = backbones_markdown()
    rows = {ln.split(" | ")[0].strip("| `"): ln for ln in lines[lines.index("| --- | --- | --- | --- | --- | --- |") + 1:]}
    assert sorted(rows) == ALL_BACKBONES
    for name, spec in BACKBONES.items():
        act = "—" if spec.activation_bytes_per_pixel is None else f"{spec.activation_bytes_per_pixel:,}"
        assert rows[name].endswith(f"| {spec.feat_dim} | {spec.param_count:,} | {spec.typical_image_size} "
                                   f"({spec.min_image_size}) | {act} |"), rows[name]


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
        ({"num_classes": 10, "image_size": True}, "image_size"),
    ],
)
def test_bad_build_arguments_raise(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}="):
        build_backbone("small_cnn", **kwargs)  # type: ignore[arg-type]


_GOOD = {"feat_dim": 8, "param_count": 100, "typical_image_size": 16, "min_image_size": 4,
         "activation_bytes_per_pixel": None, "description": "a test backbone"}


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("Bad-Name", {}, r"name='Bad-Name': must match"),
        ("small_cnn", {}, r"'small_cnn' is already registered"),
        ("t_feat", {"feat_dim": 0}, r"feat_dim=0: must be an integer >= 1"),
        ("t_params", {"param_count": 1.5}, r"param_count=1.5: must be an integer >= 1"),
        ("t_sizes", {"min_image_size": 32}, r"min_image_size=32: must be <= typical_image_size=16"),
        ("t_act", {"activation_bytes_per_pixel": 0}, r"activation_bytes_per_pixel=0: must be an integer >= 1 or None"),
        ("t_desc", {"description": " "}, r"description=' ': must be a non-empty line"),
        ("t_patch", {"patch": -2}, r"patch=-2: must be an integer >= 0"),
    ],
)
def test_register_backbone_refuses_bad_facts_naming_them(name: str, change: dict[str, object], message: str) -> None:
    before = dict(BACKBONES)
    with pytest.raises(ValueError, match=rf"register_backbone\({name!r}\): .*{message}"):
        register_backbone(name, **{**_GOOD, **change})(lambda num_classes, in_channels: None)  # type: ignore
    assert BACKBONES == before


def test_the_memory_fact_must_be_declared() -> None:
    facts = {k: v for k, v in _GOOD.items() if k != "activation_bytes_per_pixel"}
    with pytest.raises(TypeError, match="activation_bytes_per_pixel"):
        register_backbone("t_missing", **facts)  # type: ignore[call-arg]
