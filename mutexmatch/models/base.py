"""The backbone contract: :class:`Backbone` (pooled features plus its own linear head, the TPC) and
:class:`PooledBackbone` (a convolution stack followed by global average pooling).

BatchNorm layers are standard ``nn.BatchNorm*`` modules so that the optimiser can select them by module type (to
exempt them from weight decay).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Backbone", "PooledBackbone"]


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
