"""The random content fake-file writers fill the real on-disk formats with (``BuiltinDataset.write_fake``)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def balanced_labels(rng: np.random.Generator, num_classes: int, per_class: int) -> np.ndarray:
    """``per_class`` images of every class, in shuffled order (as in the real files)."""
    return rng.permutation(np.repeat(np.arange(num_classes), per_class))


def pixels(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def pickle_to(path: Path, obj: object) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


def save_images(rng: np.random.Generator, paths: Sequence[Path], side: int) -> None:
    """One random ``side`` x ``side`` RGB image per path, in the format its extension names."""
    from PIL import Image

    for path in paths:
        Image.fromarray(pixels(rng, (side, side, 3))).save(path)
