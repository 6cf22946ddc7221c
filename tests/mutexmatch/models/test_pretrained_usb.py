"""Issue 42 item 2's acceptance: ``model.pretrained`` loads exactly what semilearn 0.3.2's ``load_checkpoint``
(``semilearn/nets/utils.py``) loads into its ViT, tensor for tensor (``torch.equal``): a USB-form file
(``{'model': state_dict}``, saved from a DistributedDataParallel model with another head) and a timm-form file (timm's
own ``VisionTransformer``'s plain state dict, as .pth and as .safetensors), each into a model built for another image
size than the file's (``pos_embed`` resized). Both models start from the same weights, so the tensors the file leaves
alone are compared too. semilearn reads only ``{'model': ...}``: it is given the timm state dict wrapped so.
Skipped, with the command, where ``make usb-reference`` has not installed the reference."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from mutexmatch.models import build_backbone
from mutexmatch.models.pretrained import load_pretrained


def _usb_model(usb_nets, *, size: int, patch: int, dim: int, heads: int, drop_path: float) -> torch.nn.Module:
    return usb_nets.vit.VisionTransformer(img_size=size, patch_size=patch, embed_dim=dim, depth=12, num_heads=heads,
                                          drop_path_rate=drop_path, num_classes=10)


def _both_loaded(usb_nets, name: str, usb_kwargs: dict, size: int, ours_file, usb_file) -> tuple[dict, dict]:
    ours = build_backbone(name, num_classes=10, image_size=size)
    usb = _usb_model(usb_nets, size=size, **usb_kwargs)
    usb.load_state_dict(ours.state_dict(), strict=True)   # the same starting weights, head included
    load_pretrained(ours, ours_file, None, name)
    usb_nets.utils.load_checkpoint(usb, str(usb_file))
    return ours.state_dict(), usb.state_dict()


def _equal(ours: dict, usb: dict) -> None:
    assert list(ours) == list(usb)
    different = [k for k in ours if not torch.equal(ours[k], usb[k])]
    assert different == []


@pytest.mark.parametrize("size", [32, 16, 64])   # the file's grid (16 x 16), smaller, larger
def test_usb_form_file_loads_as_semilearn_loads_it(usb_nets, tmp_path, size) -> None:
    torch.manual_seed(0)
    source = usb_nets.vit.vit_tiny_patch2_32(num_classes=100)   # USB's ViT-Ti/2, trained for another task
    state = {f"module.{k}": v + 0.02 * torch.randn_like(v) for k, v in source.state_dict().items()}
    path = tmp_path / "usb.pth"
    torch.save({"model": state, "optimizer": {}, "it": 5}, path)
    ours, usb = _both_loaded(usb_nets, "vit_tiny_patch2_32", dict(patch=2, dim=192, heads=3, drop_path=0.1), size,
                             path, path)
    _equal(ours, usb)
    assert torch.equal(ours["blocks.0.attn.qkv.weight"], state["module.blocks.0.attn.qkv.weight"])
    assert ours["pos_embed"].shape[1] == (size // 2) ** 2 + 1


@pytest.mark.parametrize("form", ["pth", "safetensors"])
def test_timm_form_file_loads_as_semilearn_loads_it(usb_nets, tmp_path, form) -> None:
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    torch.manual_seed(1)
    timm_model = TimmViT(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, num_classes=1000)
    state = {k: v + 0.02 * torch.randn_like(v) for k, v in timm_model.state_dict().items()}   # timm's S/16 at 224
    usb_file = tmp_path / "usb_wrapped.pth"
    torch.save({"model": state}, usb_file)
    ours_file = tmp_path / f"timm.{form}"
    if form == "safetensors":
        if importlib.util.find_spec("safetensors") is None:
            pytest.skip("safetensors not installed: `make usb-reference` installs it")
        from safetensors.torch import save_file
        save_file(state, ours_file)
    else:
        torch.save(state, ours_file)
    ours, usb = _both_loaded(usb_nets, "vit_small_patch16_224", dict(patch=16, dim=384, heads=6, drop_path=0.2), 96,
                             ours_file, usb_file)
    _equal(ours, usb)
    assert ours["pos_embed"].shape == (1, 37, 384) and state["pos_embed"].shape == (1, 197, 384)   # resized
    assert torch.equal(ours["cls_token"], state["cls_token"])
