"""``model.pretrained`` (issue 42 item 2): weight files read in USB's, timm's and safetensors' forms, loaded by USB's
rules, refused in one line naming the field and the tensor (by the loader, and by the config's check before any
work); the file's digest in the config and its hash.
(The loaded state dicts against semilearn's own ``load_checkpoint``: test_pretrained_usb.py.)"""
from __future__ import annotations

import hashlib
import importlib.util
import sys

import pytest
import torch

from mutexmatch.config import ConfigError, config_hash, parse_config
from mutexmatch.models import build_backbone
from mutexmatch.models.pretrained import PretrainedError, load_pretrained, read_weights, resize_pos_embed

TINY = "vit_tiny_patch2_32"


def _random(name: str, classes: int = 1000, size: int | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: v + 0.02 * torch.randn_like(v) if v.is_floating_point() else v
            for k, v in build_backbone(name, num_classes=classes, image_size=size).state_dict().items()}


def _one_line(e: pytest.ExceptionInfo, *parts: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, msg


def test_usb_form_with_module_prefix_loads_all_but_the_head(tmp_path) -> None:
    state = _random(TINY, classes=1000)
    path = tmp_path / "usb.pth"
    torch.save({"model": {f"module.{k}": v for k, v in state.items()}, "epoch": 3}, path)
    model = build_backbone(TINY, num_classes=10)
    head = model.head.weight.detach().clone()
    report = load_pretrained(model, path, None, TINY)
    loaded = model.state_dict()
    for k, v in state.items():
        if not k.startswith("head"):
            assert torch.equal(loaded[k], v), k
    assert torch.equal(model.head.weight, head)   # the old 1000-way head is dropped, the new one kept
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert report == [f"model.pretrained: {len(state) - 2} tensors loaded into {TINY} from {path} (sha256 {digest})",
                      "model.pretrained: missing (kept at their initial values): head.weight, head.bias"]


def test_plain_state_dict_reports_unexpected_tensors_in_one_line(tmp_path) -> None:
    state = {**_random(TINY), **{f"extra.{i}": torch.zeros(1) for i in range(6)}}
    torch.save(state, tmp_path / "timm.pth")
    report = load_pretrained(build_backbone(TINY, num_classes=10), tmp_path / "timm.pth", None, TINY)
    assert report[2] == "model.pretrained: unexpected (ignored): extra.0, extra.1, extra.2, extra.3, … (2 more)"


def test_safetensors_file(tmp_path) -> None:
    if importlib.util.find_spec("safetensors") is None:
        pytest.skip("safetensors not installed: `make usb-reference` installs it")
    from safetensors.torch import save_file

    state = _random(TINY)
    save_file(state, tmp_path / "w.safetensors")
    model = build_backbone(TINY, num_classes=10)
    load_pretrained(model, tmp_path / "w.safetensors", None, TINY)
    assert torch.equal(model.blocks[11].mlp.fc2.weight, state["blocks.11.mlp.fc2.weight"])


def test_safetensors_without_the_package_is_one_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "w.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    monkeypatch.setitem(sys.modules, "safetensors", None)   # import fails as if not installed
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(PretrainedError) as e:
        read_weights(tmp_path / "w.safetensors")
    _one_line(e, "model.pretrained=", "pip install safetensors")


def test_pos_embed_resized_bicubically_class_token_kept() -> None:
    posemb = torch.randn(1, 1 + 16 * 16, 8)
    same = resize_pos_embed(posemb, 1 + 16 * 16, "w")
    assert torch.allclose(same, posemb, atol=1e-6)
    small = resize_pos_embed(posemb, 1 + 8 * 8, "w")
    assert small.shape == (1, 65, 8) and torch.equal(small[:, 0], posemb[:, 0])
    grid = posemb[0, 1:].reshape(1, 16, 16, 8).permute(0, 3, 1, 2)
    expected = torch.nn.functional.interpolate(grid, size=(8, 8), mode="bicubic", align_corners=False)
    assert torch.equal(small[0, 1:], expected.permute(0, 2, 3, 1).reshape(64, 8))


def test_file_for_a_larger_image_size_loads_resized(tmp_path) -> None:
    torch.save({"model": _random(TINY, size=32)}, tmp_path / "w.pth")   # a 16 x 16 grid
    model = build_backbone(TINY, num_classes=10, image_size=16)        # an 8 x 8 grid
    load_pretrained(model, tmp_path / "w.pth", None, TINY)
    assert model.pos_embed.shape == (1, 65, 192)


@pytest.mark.parametrize(("source", "expected"), [
    ("vit_small_patch2_32", "tensor 'cls_token' has shape [1, 1, 384] in the file, [1, 1, 192] in "
                            "model.backbone=vit_tiny_patch2_32: a file of another architecture or size"),
    ("small_cnn", "none of its 18 tensors (features.0.weight, features.1.bias, features.1.num_batches_tracked, "
                  "features.1.running_mean, … (14 more)) is one of model.backbone=vit_tiny_patch2_32's"),
])
def test_another_architecture_is_refused_naming_the_tensor(tmp_path, source, expected) -> None:
    torch.save(build_backbone(source, num_classes=10).state_dict(), tmp_path / "w.pth")
    model = build_backbone(TINY, num_classes=10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(PretrainedError) as e:
        load_pretrained(model, tmp_path / "w.pth", None, TINY)
    _one_line(e, f"model.pretrained={tmp_path / 'w.pth'}: ", expected)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())   # nothing half-loaded


def test_a_pos_embed_without_a_square_grid_is_refused(tmp_path) -> None:
    torch.save({**_random(TINY), "pos_embed": torch.zeros(1, 51, 192)}, tmp_path / "w.pth")
    with pytest.raises(PretrainedError) as e:
        load_pretrained(build_backbone(TINY, num_classes=10), tmp_path / "w.pth", None, TINY)
    _one_line(e, "tensor 'pos_embed' has shape [1, 51, 192]: not a class token and a square grid")


@pytest.mark.parametrize(("content", "expected"), [
    ({"model": [1, 2]}, "holds no state dict"),
    ({"optimizer": {"lr": 0.1}}, "holds no state dict (name -> tensor) at its top level or under 'model' (found: "
                                 "optimizer)"),
    (torch.nn.Linear(2, 2), "not a weight file torch.load(weights_only=True) reads"),   # a pickled module
])
def test_not_a_state_dict_is_one_line(tmp_path, content, expected) -> None:
    torch.save(content, tmp_path / "w.pth")
    with pytest.raises(PretrainedError) as e:
        read_weights(tmp_path / "w.pth")
    _one_line(e, expected)


def test_digest_mismatch_at_load(tmp_path) -> None:
    torch.save(_random(TINY), tmp_path / "w.pth")
    with pytest.raises(PretrainedError) as e:
        read_weights(tmp_path / "w.pth", "0" * 64)
    _one_line(e, "its sha256 is ", f"model.pretrained_sha256 says {'0' * 64}")


# ------------------------------------------------------------------------------------------- the config's fields
def _config(model: dict) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 20}, "model": {"backbone": "small_cnn", **model}}


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "w.pth"
    torch.save(build_backbone("small_cnn", num_classes=10, in_channels=1).state_dict(), path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_config_holds_the_digest_and_the_hash_follows_it(tmp_path, weights) -> None:
    path, digest = weights
    plain = parse_config(_config({}))
    assert "pretrained" not in plain.to_dict()["model"] and "pretrained_sha256" not in plain.to_dict()["model"]
    cfg = parse_config(_config({"pretrained": str(path)}))
    assert cfg.model.pretrained_sha256 == digest
    assert parse_config(cfg.to_dict()).model.pretrained_sha256 == digest   # the resolved config reloads
    moved = tmp_path / "elsewhere.pth"
    moved.write_bytes(path.read_bytes())
    assert config_hash(parse_config(_config({"pretrained": str(moved)}))) == config_hash(cfg)   # path: no result
    assert config_hash(cfg) != config_hash(plain)
    other = tmp_path / "other.pth"
    torch.save(build_backbone("small_cnn", num_classes=10, in_channels=1).state_dict(), other)
    assert config_hash(parse_config(_config({"pretrained": str(other)}))) != config_hash(cfg)   # other weights


def test_a_stored_config_reads_where_its_file_is_not(tmp_path, weights) -> None:
    path, digest = weights
    stored = parse_config(_config({"pretrained": str(path)})).to_dict()
    path.unlink()
    assert parse_config(stored).model.pretrained_sha256 == digest


@pytest.mark.parametrize(("model", "expected"), [
    ({"pretrained": "{missing}"}, "model.pretrained={missing}: no such file"),
    ({"pretrained": "{path}", "pretrained_sha256": "0" * 64}, "model.pretrained={path}: its sha256 is {digest}, "
                                                              "model.pretrained_sha256 says " + "0" * 64),
    ({"pretrained": "{path}", "pretrained_sha256": "abc"}, "model.pretrained_sha256='abc': must be 64 hexadecimal"),
    ({"pretrained_sha256": "{digest}"}, "model.pretrained_sha256={digest}: is the digest of model.pretrained, "
                                        "which is null"),
    ({"pretrained": "{folder}"}, "model.pretrained={folder}: not a file"),
])
def test_bad_pretrained_fields_are_one_line(tmp_path, weights, model, expected) -> None:
    path, digest = weights
    names = {"missing": tmp_path / "none.pth", "path": path, "digest": digest, "folder": tmp_path}
    model = {k: v.format(**names) for k, v in model.items()}
    with pytest.raises(ConfigError) as e:
        parse_config(_config(model))
    assert str(e.value) == expected.format(**names) or str(e.value).startswith(expected.format(**names)), e.value
    assert "\n" not in str(e.value)


def test_a_file_that_does_not_fit_is_refused_when_the_config_is_loaded(tmp_path) -> None:
    torch.save({"model": _random("vit_small_patch2_32")}, tmp_path / "s.pth")
    raw = {"data": {"dataset": "cifar10", "num_labels": 40, "root": str(tmp_path)},
           "model": {"backbone": TINY, "pretrained": str(tmp_path / "s.pth")}}
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert str(e.value) == (f"model.pretrained={tmp_path / 's.pth'}: tensor 'cls_token' has shape [1, 1, 384] in "
                            f"the file, [1, 1, 192] in model.backbone={TINY}: a file of another architecture or size")
    torch.save({"model": _random(TINY, size=64)}, tmp_path / "t.pth")   # the same ViT at another size: resized
    assert parse_config({**raw, "model": {"backbone": TINY, "pretrained": str(tmp_path / "t.pth")}})


def test_torchvision_resnet50_file_loads_all_but_its_fc(tmp_path) -> None:
    import torchvision

    torch.manual_seed(3)
    state = torchvision.models.resnet50(weights=None).state_dict()   # torchvision's names, a 1000-way fc
    torch.save(state, tmp_path / "r50.pth")
    model = build_backbone("resnet50", num_classes=10)
    report = load_pretrained(model, tmp_path / "r50.pth", None, "resnet50")
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items() if not k.startswith("fc."))
    assert report[1:] == ["model.pretrained: missing (kept at their initial values): fc.weight, fc.bias"]
