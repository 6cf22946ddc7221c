"""Decoding a list of image files into one uint8 tensor: the readers of datasets shipped as JPEG/PNG files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def decode_files(paths: Sequence[Path], size: int, prepare: Callable[[Image.Image], Image.Image]) -> torch.Tensor:
    """``(N, 3, size, size)`` uint8 from RGB-converted files, each passed through ``prepare`` (e.g. a resize)."""
    out = torch.empty((len(paths), 3, size, size), dtype=torch.uint8)
    for i, path in enumerate(paths):
        with Image.open(path) as img:
            arr = np.array(prepare(img.convert("RGB")))  # a writable copy: torch warns on read-only arrays
        if arr.shape != (size, size, 3):
            raise ValueError(f"{path}: image is {arr.shape[1]}x{arr.shape[0]} after preprocessing, expected "
                             f"{size}x{size}")
        out[i] = torch.from_numpy(arr).permute(2, 0, 1)
    return out
