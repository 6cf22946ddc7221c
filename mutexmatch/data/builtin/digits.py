"""digits: scikit-learn's 1,797 8x8 handwritten digits, nothing on disk (only the cache goes to ``<root>/digits/``).

A fixed split of 1,300 train / 497 test images; ``data.image_size`` upscales them (>= 8, default 16).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import BuiltinDataset, DatasetInfo, Splits, register_dataset

NUM_TRAIN = 1300
NUM_TEST = 497
_SPLIT_SEED = 0


@register_dataset
class Digits(BuiltinDataset):
    # Statistics computed by us on the 1,300-image train split at 8x8 (nearest-exact upscaling by an integer factor
    # leaves them unchanged); tests/mutexmatch/data/test_datasets.py recomputes them. No flip (digits are not
    # mirror-invariant); pad 2 = 12.5 % of the 16-pixel side, like CIFAR's 4 of 32.
    info = DatasetInfo(
        name="digits", num_classes=10, channels=1, image_size=16,
        mean=(0.3053,), std=(0.3759,),
        flip=False, pad=2, pad_mode="constant",
        train_per_class_min=126,  # digit 8 of the 1,300-image train split
        download_hint="digits ships inside scikit-learn (sklearn.datasets.load_digits); nothing to download.",
    )
    folder = "digits"
    published_images = {"train": NUM_TRAIN, "test": NUM_TEST}
    needs_files = False  # ships inside scikit-learn
    min_image_size = 8
    min_size_reason = " (the images are 8x8; we only upscale)"
    listing_order = 0  # first: the CPU quickstart's dataset

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        """The split is ``train_test_split(test_size=497, stratify=y, random_state=0)``; both parts are kept in
        the original order of ``load_digits``. Pixel values 0..16 become ``round(v * 255 / 16)`` and are upscaled
        with nearest-exact interpolation, which at integer factors replicates pixels and so keeps every grey level
        and the dataset statistics exactly."""
        size = info.image_size
        decoded: tuple[ImageData, ImageData] | None = None

        def decoder(i: int) -> Callable[[], ImageData]:
            def decode() -> ImageData:
                nonlocal decoded
                if decoded is None:
                    decoded = _decode_all(size)
                return decoded[i]
            return decode

        return (cached_images(cache_path(ddir, "train", size), decoder(0)),
                cached_images(cache_path(ddir, "test", size), decoder(1)), None, None)


def _decode_all(size: int) -> tuple[ImageData, ImageData]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.from_numpy(np.rint(digits.images * (255 / 16)).astype(np.uint8)).unsqueeze(1)
    if size != x.shape[-1]:
        x = F.interpolate(x, size=(size, size), mode="nearest-exact")
    y = torch.from_numpy(digits.target.astype(np.int64))
    train_idx, test_idx = train_test_split(np.arange(len(y)), test_size=NUM_TEST, stratify=digits.target,
                                           random_state=_SPLIT_SEED)
    assert (len(train_idx), len(test_idx)) == (NUM_TRAIN, NUM_TEST)
    parts = []
    for idx in (np.sort(train_idx), np.sort(test_idx)):
        t = torch.from_numpy(idx)
        parts.append(ImageData(x[t].contiguous(), y[t]))
    return parts[0], parts[1]
