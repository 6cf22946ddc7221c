"""Issue 42's acceptance "a FixMatch step in lockstep on a ViT": our FixMatch on our ViT (``mutexmatch/models/vit.py``)
equals semilearn 0.3.2's FixMatch on its ``VisionTransformer`` (``semilearn/nets/vit/vit.py``) step for step (loss,
terms, every gradient, masks, weights after SGD: the harness is conftest.py), on the same weights.

The ViT is USB-CV's architecture reduced so a step costs milliseconds on a loaded CPU: 8 px RGB images, patch 2 (16
patches and the class token), width 32, depth 2, 2 heads, drop path 0.1 (drawn from the same seed on both sides: the
harness seeds each side's step alike). The harness draws flat views of ``d_in`` = 3·8·8; :class:`Images` reshapes them
into images inside both models. The shared weights are USB's initialisation moved by N(0, 0.02²) noise (the
construction of tests/mutexmatch/models/test_vit_usb.py): the class token and position embeddings are not zero, the
LayerNorms not the identity. The head is scaled by ``logit_scale`` so the masks are neither all 0 nor all 1."""
from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from mutexmatch.models.net import MutexNet
from mutexmatch.models.vit import VisionTransformer

SIZE, PATCH, DIM, DEPTH, HEADS, DROP_PATH = 8, 2, 32, 2, 2, 0.1
SHAPE = (3, SIZE, SIZE)


def _usb_vit_module() -> Any:
    """semilearn's ``nets/vit/vit.py`` loaded from its file with the real timm: the harness imported the package
    with ``timm.models.layers`` stubbed, so the package's own module holds stubs for DropPath and to_2tuple."""
    if importlib.util.find_spec("timm") is None:
        pytest.skip("USB reference not installed: `make usb-reference` (semilearn and timm)")
    path = importlib.util.find_spec("semilearn.nets.vit.vit").origin
    spec = importlib.util.spec_from_file_location("_usb_lockstep_vit", path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # vit.py imports timm.models.layers (timm.layers now)
        spec.loader.exec_module(module)
    return module


class Images(nn.Module):
    """The harness's flat views (N, 3·8·8) as images (N, 3, 8, 8) into ``net``; ``tpc`` (ours) and USB's
    ``only_fc`` take features, which pass unchanged."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.num_features = DIM     # USB's model interface

    def forward(self, x: Tensor, **kwargs: Any) -> Any:
        return self.net(x if kwargs.get("only_fc") else x.reshape(-1, *SHAPE), **kwargs)

    def tpc(self, feats: Tensor) -> Tensor:
        return self.net.tpc(feats)


class FixMatchViTLockstep:
    name = usb_name = "fixmatch"
    ours_params = {"tau": 0.95, "lambda_p": 1.0}
    usb_args = {"p_cutoff": 0.95, "ulb_loss_ratio": 1.0, "hard_label": True}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    d_in = SIZE * SIZE * 3
    steps = 4
    lr = 0.01          # the scaled head learns fast: at the harness's 0.05 the masks are all 1 from step 3 on
    min_mixed = 3      # step 3's weak views are all confident at every scale tried (5 to 60); steps 1, 2, 4 mixed
    logit_scale = 8.0    # the head's weights and bias multiplied by it: confidences around tau

    def state(self, ours, usb) -> dict:
        return {}     # a fixed threshold keeps no state on either side

    def models(self, ours_tiny: nn.Module, usb_backbone: nn.Module) -> tuple[nn.Module, nn.Module, dict[str, str]]:
        classes = ours_tiny.head.out_features
        ours = MutexNet(VisionTransformer(classes, 3, SIZE, patch=PATCH, dim=DIM, depth=DEPTH, heads=HEADS,
                                          drop_path=DROP_PATH), classes, with_tnc=False)
        usb = _usb_vit_module().VisionTransformer(img_size=SIZE, patch_size=PATCH, in_chans=3, num_classes=classes,
                                                  embed_dim=DIM, depth=DEPTH, num_heads=HEADS,
                                                  drop_path_rate=DROP_PATH)
        g = torch.Generator().manual_seed(7)
        weights = {k: v + 0.02 * torch.randn(v.shape, generator=g) for k, v in usb.state_dict().items()}
        weights = {k: v * self.logit_scale if k.startswith("head.") else v for k, v in weights.items()}
        ours.backbone.load_state_dict(weights, strict=True)
        names = {f"net.backbone.{k}": f"net.{k}" for k in weights}
        return Images(ours), Images(usb), names


def test_fixmatch_on_a_vit_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(FixMatchViTLockstep())
    masks = torch.cat([r.ours.mask for r in records])
    assert 0 < masks.mean() < 1
    assert all(r.ours.terms["p"] > 0 for r in records)   # the unsupervised term is exercised, not zero
