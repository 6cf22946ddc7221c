"""Backbones θ and the MutexMatch network (θ + true-positive classifier P + true-negative classifier N).

Every backbone is registered in :data:`BACKBONES` with :func:`register_backbone` and built by name with
:func:`build_backbone` (the config field ``model.backbone``). A backbone returns pooled features from
:meth:`Backbone.forward_features` and owns its final linear layer :attr:`Backbone.classifier`, which *is* the TPC P
of the paper. :class:`MutexNet` adds the TNC N: as in the released code, a single ``nn.Linear(feat_dim, C)`` with
PyTorch's default initialisation on the same features (not an MLP).

BatchNorm layers are standard ``nn.BatchNorm*`` modules so that the optimiser can select them by module type (to
exempt them from weight decay).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.checks import check_int

__all__ = [
    "PooledBackbone",
    "BACKBONES",
    "Backbone",
    "BackboneSpec",
    "MutexNet",
    "build_backbone",
    "build_model",
    "register_backbone",
]


class Backbone(nn.Module):
    """Base class of every backbone: a feature extractor plus its own linear head (the TPC).

    Subclasses set :attr:`feat_dim` and :attr:`classifier` (``nn.Linear(feat_dim, num_classes)``) and implement
    :meth:`forward_features`.
    """

    feat_dim: int
    classifier: nn.Linear

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Globally pooled features of ``x`` (N, C_in, H, W), shape (N, feat_dim)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the backbone's own head (the TPC): ``classifier(forward_features(x))``, shape (N, C)."""
        return self.classifier(self.forward_features(x))

    def tie_bn_momentum_to_ema(self, ema: float) -> None:
        """Under ``algorithm.form: official``: set BatchNorm momenta from the EMA decay ``ema`` where the released
        code derives them so (its WRN: ``1 - ema``); a no-op for backbones whose momentum does not depend on it."""


class PooledBackbone(Backbone):
    """A backbone whose features are ``self.features`` (an ``nn.Sequential`` of convolutions) followed by global
    average pooling: subclasses build ``features``, ``feat_dim`` and ``classifier`` only."""

    features: nn.Module

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1)


BackboneFactory = Callable[[int, int], Backbone]
"""``factory(num_classes, in_channels) -> Backbone``."""


@dataclass(frozen=True)
class BackboneSpec:
    """A registered backbone.

    Attributes:
        name: registry key (the value of ``model.backbone``).
        factory: ``factory(num_classes, in_channels)`` building a fresh, randomly initialised backbone.
        typical_image_size: the input size the architecture is used with (documentation and smoke tests only:
            every backbone ends in global average pooling and accepts any size >= ``min_image_size``).
        min_image_size: the smallest square input the architecture can process.
        description: one line naming the architecture and its source.
    """

    name: str
    factory: BackboneFactory
    typical_image_size: int
    min_image_size: int
    description: str


BACKBONES: dict[str, BackboneSpec] = {}


def register_backbone(
    name: str, *, typical_image_size: int, min_image_size: int = 1, description: str
) -> Callable[[BackboneFactory], BackboneFactory]:
    """Decorator registering ``factory(num_classes, in_channels) -> Backbone`` under ``name`` in BACKBONES."""

    def decorator(factory: BackboneFactory) -> BackboneFactory:
        if name in BACKBONES:
            raise ValueError(f"backbone name {name!r} is already registered (by {BACKBONES[name].factory!r})")
        BACKBONES[name] = BackboneSpec(name, factory, typical_image_size, min_image_size, description)
        return factory

    return decorator


def build_backbone(name: str, *, num_classes: int, in_channels: int = 3, image_size: int = 32) -> Backbone:
    """Build the registered backbone ``name`` with a ``num_classes``-way head.

    ``image_size`` is only validated against the backbone's minimum input size; the architectures do not depend on
    it (global average pooling).

    Raises:
        ValueError: unknown ``name`` (the message lists the registered names for ``model.backbone``), fewer than 2
            classes, ``in_channels`` < 1, or an ``image_size`` below the backbone's minimum.
    """
    if name not in BACKBONES:
        raise ValueError(f"model.backbone={name!r}: unknown backbone; registered: {', '.join(sorted(BACKBONES))}")
    spec = BACKBONES[name]
    check_int("num_classes", num_classes, low=2)
    check_int("in_channels", in_channels, low=1)
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < spec.min_image_size:
        raise ValueError(
            f"image_size={image_size!r}: backbone {name!r} needs square inputs of at least "
            f"{spec.min_image_size} pixels"
        )
    return spec.factory(num_classes, in_channels)


class MutexNet(nn.Module):
    """Backbone θ with its TPC P (``backbone.classifier``) and the TNC N (``tnc``), both linear on shared features.

    ``forward`` returns the features only, because the MutexMatch step applies P and N to the same features (N
    also to their detached copy, for L_sep): callers use :meth:`tpc` and ``tnc``. Evaluation uses
    :meth:`forward_tpc`, the TPC prediction (the TNC is never used at test time).
    """

    def __init__(self, backbone: Backbone, num_classes: int, with_tnc: bool = True) -> None:
        super().__init__()
        check_int("num_classes", num_classes, low=2)
        if backbone.classifier.out_features != num_classes:
            raise ValueError(
                f"num_classes={num_classes}: the backbone's classifier has "
                f"{backbone.classifier.out_features} outputs; they must match"
            )
        self.backbone = backbone
        self.num_classes = num_classes
        # Default PyTorch init, as the released code's TNC (a bare Linear created outside the backbone's init loop).
        self.tnc: nn.Linear | None = nn.Linear(backbone.feat_dim, num_classes) if with_tnc else None
        # An algorithm's extra heads (Algorithm.heads: projection MLPs, a rotation head); empty by default, which
        # adds no parameter and no state entry.
        self.heads = nn.ModuleDict()

    def add_heads(self, heads: dict[str, nn.Module]) -> None:
        """Attach an algorithm's extra heads as ``heads[name]`` (before the optimiser, the EMA and compiling)."""
        for name, head in heads.items():
            if name in self.heads:
                raise ValueError(f"model.heads: a head {name!r} is attached already")
            self.heads[name] = head

    @property
    def feat_dim(self) -> int:
        return self.backbone.feat_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features, shape (N, feat_dim)."""
        return self.backbone.forward_features(x)

    def tpc(self, feats: torch.Tensor) -> torch.Tensor:
        """TPC logits of features ``feats`` (N, feat_dim), shape (N, C)."""
        return self.backbone.classifier(feats)

    def forward_tpc(self, x: torch.Tensor) -> torch.Tensor:
        """TPC logits of images ``x``: the prediction used for evaluation."""
        return self.tpc(self.forward(x))


def build_model(
    name: str, *, num_classes: int, in_channels: int = 3, image_size: int = 32, with_tnc: bool = True
) -> MutexNet:
    """:func:`build_backbone` wrapped in a :class:`MutexNet` (with the TNC unless ``with_tnc`` is False)."""
    backbone = build_backbone(name, num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    return MutexNet(backbone, num_classes, with_tnc=with_tnc)


# Imported last, for their registration side effect: they import Backbone and register_backbone from here.
from mutexmatch.models import cnn13, resnet, small_cnn, wrn  # noqa: E402,F401
