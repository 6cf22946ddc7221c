"""SVHN: 32x32 house-number digits, ``<root>/svhn/{train,test,extra}_32x32.mat`` (torchvision's layout).

``data.svhn_extra`` appends the 531,131-image ``extra`` split to the training set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import SVHN

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import balanced_labels, pixels
from mutexmatch.data.images import ImageData, to_nchw
from mutexmatch.data.registry import DatasetInfo, FakeSize, Splits, register_dataset, twice_divided
from mutexmatch.data.torchvision_reader import TorchvisionDataset


@register_dataset
class Svhn(TorchvisionDataset):
    # The commonly published train-set statistics (we cannot recompute them offline). The released code has mean
    # (0.4380, 0.4440, 0.4730), std (0.1751, 0.1771, 0.1744) but divides them by 255 a second time, which makes its
    # normalisation almost the identity scaled by 255 (kept as `released`). No flip: digits are not
    # mirror-invariant (released code: crop 32 pad 4 only).
    info = DatasetInfo(
        name="svhn", num_classes=10, image_size=32,
        mean=(0.4377, 0.4438, 0.4728), std=(0.1980, 0.2010, 0.1970),
        released_mean=twice_divided((0.4380, 0.4440, 0.4730)),
        released_std=twice_divided((0.1751, 0.1771, 0.1744)),
        flip=False, train_per_class_min=4659,  # digit 9 of the 73,257 train images
        download_hint="Set `data.download: true` to let torchvision download SVHN into <root>/svhn/, or put "
        "train_32x32.mat and test_32x32.mat (plus extra_32x32.mat when svhn_extra is on) there.",
    )
    tv_class = SVHN
    folder = "svhn"
    published_images = {"train": 73_257, "test": 26_032, "extra": 531_131}
    fake_size = FakeSize(100, 2, 20)  # 1,000 labels (usb_classic_cv.yaml), the most experiments/*.yaml use
    extra_split = "extra"
    listing_order = 3

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        splits = self.cached_splits(extra)
        train, test, *more = (self._read_split(info, root, ddir, s, splits, download) for s in splits)
        if more:
            train = ImageData(torch.cat([train.x, more[0].x]), torch.cat([train.y, more[0].y]))
        return train, test, None, None

    def _read_split(self, info: DatasetInfo, root: Path, ddir: Path, split: str, needed: list[str],
                    download: bool) -> ImageData:
        def decode() -> ImageData:
            required = [SVHN.split_list[s][1] for s in needed]  # so a missing-files error lists all of them at once
            ds = self.open(info, root, ddir, required, lambda: SVHN(str(ddir), split=split, download=download),
                           download=download, extra="extra" in needed)
            # torchvision already maps SVHN's label 10 to digit 0 and transposes X (32, 32, 3, N) to (N, 3, 32, 32).
            return ImageData(to_nchw(ds.data, channels_last=False), torch.from_numpy(ds.labels.astype(np.int64)))

        return cached_images(cache_path(ddir, split, info.image_size), decode)

    def files(self, extra: bool = False) -> list[tuple[str, str | None]]:
        return [(SVHN.split_list[s][1], SVHN.split_list[s][2]) for s in self.cached_splits(extra)]

    def fetch(self, ddir: Path, extra: bool) -> None:
        for split in self.cached_splits(extra):  # one .mat file per split
            SVHN(str(ddir), split=split, download=True)

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """``{split}_32x32.mat``: X (32, 32, 3, N) = (H, W, C, N), y (N, 1) in 1..10, where 10 means digit 0; the
        ``extra`` split (``size.unlabeled`` images, labeled like the others) only when asked for."""
        import scipy.io

        folder = root / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        extra_per_class = -(-size.unlabeled // 10)
        for split, per_class in (("train", size.train_per_class), ("test", size.test_per_class),
                                 ("extra", extra_per_class)):
            if not per_class:
                continue
            digits = balanced_labels(rng, 10, per_class)[:size.unlabeled if split == "extra" else None]
            y = np.where(digits == 0, 10, digits).astype(np.uint8)[:, None]
            scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": pixels(rng, (32, 32, 3, len(y))), "y": y})
        return folder
