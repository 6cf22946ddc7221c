"""Decoded images: the uint8 tensors every reader returns and every cache holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ImageData:
    """Images as uint8 ``(N, C, H, W)`` and int64 labels ``(N,)``; label ``-1`` marks unlabeled-only images."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if self.x.dtype != torch.uint8 or self.x.dim() != 4:
            raise ValueError(f"ImageData.x must be uint8 (N, C, H, W), got {self.x.dtype} {tuple(self.x.shape)}")
        if self.y.dtype != torch.int64 or self.y.dim() != 1 or len(self.y) != len(self.x):
            raise ValueError(f"ImageData.y must be int64 (N,) with N = {len(self.x)}, got {self.y.dtype} "
                             f"{tuple(self.y.shape)}")
        if not self.x.is_contiguous():
            self.x = self.x.contiguous()

    def __len__(self) -> int:
        return len(self.y)


def to_nchw(hwc_or_nchw: np.ndarray, channels_last: bool) -> torch.Tensor:
    """A reader's array as a contiguous ``(N, C, H, W)`` tensor (torchvision keeps CIFAR channels-last)."""
    t = torch.from_numpy(np.asarray(hwc_or_nchw))
    if channels_last:
        t = t.permute(0, 3, 1, 2)
    return t.contiguous()
