"""USB-CV's Vision Transformers (USB, Wang et al. 2022, ``semilearn/nets/vit``): ``vit_tiny_patch2_32``,
``vit_small_patch2_32``, ``vit_small_patch16_224`` and ``vit_base_patch16_96``.

The architecture of Dosovitskiy et al. 2021 as timm and USB build it: a strided-convolution patch embedding, a class
token and learned position embeddings, pre-norm blocks (LayerNorm eps 1e-6, multi-head self-attention with a qkv
bias, a GELU MLP of ratio 4, stochastic depth rising linearly from 0 to ``drop_path`` over the blocks), a final
LayerNorm, and the class token's features as the pooled features (USB's ``global_pool="token"``). Parameter names
are timm's (``patch_embed.proj``, ``cls_token``, ``pos_embed``, ``blocks.N.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,
mlp.fc2}``, ``norm``, ``head``), so timm's and USB's weight files load by name (:mod:`mutexmatch.models.pretrained`).

Initialisation is USB's: PyTorch's default for the convolution, the linear layers and the LayerNorms, the class token
and position embeddings zero (USB's ``VisionTransformer`` never calls timm's ``init_weights``); these backbones are
meant to start from a pre-trained file (``model.pretrained``).

The position embeddings have one row per patch of the run's image size (plus the class token): a ViT is built for
one input size (``build_backbone(..., image_size=)``), a multiple of its patch.
"""
from __future__ import annotations

import torch
from torch import nn
from torchvision.ops import StochasticDepth

from mutexmatch.models.base import Backbone
from mutexmatch.models.registry import register_backbone

_LN_EPS = 1e-6
_MLP_RATIO = 4


class PatchEmbed(nn.Module):
    """Non-overlapping ``patch``×``patch`` patches projected to ``dim`` by a strided convolution: (N, L, dim)."""

    def __init__(self, in_channels: int, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dim, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention, softmax(q kᵀ / √d_head) v: one qkv projection (bias), one output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        # USB's order of operations, not F.scaled_dot_product_attention: the fused kernel's features differ from
        # USB's by up to 2.6e-6 in fp32 (tests/mutexmatch/models/test_vit_usb.py holds them to 1e-6)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(n, tokens, dim))


class Mlp(nn.Module):
    """Linear → GELU → Linear (hidden width ``ratio`` × ``dim``)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + DropPath(Attn(LN(x))), then x + DropPath(MLP(LN(x)))."""

    def __init__(self, dim: int, heads: int, drop_path: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=_LN_EPS)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=_LN_EPS)
        self.mlp = Mlp(dim, dim * _MLP_RATIO)
        # timm's DropPath: whole residual branches of a row dropped, the rest scaled by 1 / (1 - p)
        self.drop_path1 = StochasticDepth(drop_path, "row")
        self.drop_path2 = StochasticDepth(drop_path, "row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


class VisionTransformer(Backbone):
    """ViT for ``image_size``-pixel inputs: its head (``head``, timm's name) is the TPC; features are the class
    token's after the final LayerNorm, feat_dim ``dim``."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, *, patch: int, dim: int, depth: int,
                 heads: int, drop_path: float) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(in_channels, dim, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image_size // patch) ** 2 + 1, dim))
        rates = torch.linspace(0, drop_path, depth, device="cpu").tolist()   # USB's float32 rates; cpu: meta builds
        self.blocks = nn.Sequential(*(Block(dim, heads, rate) for rate in rates))
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS)
        self.feat_dim = dim
        self.head = nn.Linear(dim, num_classes)

    @property
    def classifier(self) -> nn.Linear:   # type: ignore[override]  # the TPC under timm's name
        return self.head

    def no_weight_decay(self) -> set[str]:
        """USB's (and timm's) parameters kept out of weight decay besides 1-D ones and biases."""
        return {"pos_embed", "cls_token"}

    def group_matcher(self, coarse: bool = False) -> dict[str, object]:
        """USB's layers for layer-wise learning-rate decay (its regexes; timm's ``group_matcher`` form): the stem
        (tokens, position embeddings, patch embedding), block N, the final norm merged into the last block."""
        return {"stem": r"^cls_token|pos_embed|patch_embed",
                "blocks": [(r"^blocks\.(\d+)", None), (r"^norm", (99999,))]}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        return self.norm(self.blocks(x))[:, 0]


# USB's nets/vit/vit.py: patch, width, depth, heads, drop-path rate, and the image size each is used at
_DESCRIPTION = "USB-CV ViT ({}, patch {}, width {}, depth {}, {} heads, drop-path {}), timm names, class-token features"


def _register(name: str, *, patch: int, dim: int, depth: int, heads: int, drop_path: float, size: int,
              param_count: int, label: str) -> None:
    @register_backbone(name, feat_dim=dim, param_count=param_count, typical_image_size=size, min_image_size=patch,
                       activation_bytes_per_pixel=None, patch=patch,
                       description=_DESCRIPTION.format(label, patch, dim, depth, heads, drop_path))
    def factory(num_classes: int, in_channels: int, image_size: int) -> VisionTransformer:
        return VisionTransformer(num_classes, in_channels, image_size, patch=patch, dim=dim, depth=depth,
                                 heads=heads, drop_path=drop_path)


# param_count: 10-way head, RGB, at the typical image size (position embeddings included)
_register("vit_tiny_patch2_32", patch=2, dim=192, depth=12, heads=3, drop_path=0.1, size=32,
          param_count=5_392_714, label="Ti/2")
_register("vit_small_patch2_32", patch=2, dim=384, depth=12, heads=6, drop_path=0.2, size=32,
          param_count=21_402_250, label="S/2")
_register("vit_small_patch16_224", patch=16, dim=384, depth=12, heads=6, drop_path=0.2, size=224,
          param_count=21_669_514, label="S/16")
_register("vit_base_patch16_96", patch=16, dim=768, depth=12, heads=12, drop_path=0.2, size=96,
          param_count=85_683_466, label="B/16")
