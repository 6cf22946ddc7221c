"""The MutexMatch network: a backbone θ with its TPC P (``backbone.classifier``) and the TNC N.

As in the released code, the TNC is a single ``nn.Linear(feat_dim, C)`` with PyTorch's default initialisation on the
same features as the TPC (not an MLP).
"""
from __future__ import annotations

import torch
from torch import nn

from mutexmatch.checks import check_int
from mutexmatch.models.base import Backbone
from mutexmatch.models.registry import build_backbone

__all__ = ["MutexNet", "build_model"]


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
        # The head evaluation and prediction use: None = the TPC; an imbalance algorithm's head by name (ABC's
        # auxiliary classifier: USB evaluates it), set by its setup_model.
        self.evaluated_head: str | None = None

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
        """Logits of images ``x`` used for evaluation and prediction: the TPC's, or the evaluated head's
        (``evaluated_head``)."""
        feats = self.forward(x)
        return self.tpc(feats) if self.evaluated_head is None else self.heads[self.evaluated_head](feats)


def build_model(
    name: str, *, num_classes: int, in_channels: int = 3, image_size: int | None = None, with_tnc: bool = True
) -> MutexNet:
    """:func:`build_backbone` wrapped in a :class:`MutexNet` (with the TNC unless ``with_tnc`` is False)."""
    backbone = build_backbone(name, num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    return MutexNet(backbone, num_classes, with_tnc=with_tnc)
