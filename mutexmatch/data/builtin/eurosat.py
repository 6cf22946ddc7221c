"""EuroSAT (RGB): 27,000 64x64 Sentinel-2 images of 10 land-use classes, in torchvision's layout
``<root>/eurosat/2750/<Class>/<Class>_<i>.jpg`` (the extracted EuroSAT.zip).

USB-CV's split (semilearn 0.3.2, ``datasets/cv_datasets/eurosat.py``): the classes and files in ``ImageFolder``
order, the first ``int((0.6 + 0.2) * n)`` images of each class (n images) train, the rest are the test set
(21,600 / 5,400). USB normalises with mean = std = 0.5 and resizes to ``img_size`` (USB-CV: 32): ``data.image_size``
resizes here too, once at load time, with USB's transform (torchvision's ``Resize`` of the PIL image, bilinear).
USB also flips vertically, which this project's weak augmentation does not (horizontal only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.transforms import functional as TF

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import save_images
from mutexmatch.data.imagefiles import decode_files
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import (BuiltinDataset, DatasetError, DatasetInfo, FakeSize, Splits, missing_error,
                                      register_dataset)

CLASSES = ("AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture", "PermanentCrop",
           "Residential", "River", "SeaLake")
IMAGES = "2750"   # torchvision's (and the zip's) image folder
# USB's TRAIN_SPLIT_PERCENT + VALIDATION_SPLIT_PERCENT: the share of each class it trains on
TRAIN_SHARE = 0.60 + 0.20


def train_count(n: int) -> int:
    """Train images of a class of ``n`` (USB's expression)."""
    return int(TRAIN_SHARE * n)


@register_dataset
class EuroSat(BuiltinDataset):
    info = DatasetInfo(
        name="eurosat", num_classes=10, image_size=64, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), flip=True,
        pad=8, pad_mode="reflect", train_per_class_min=train_count(2000),   # Pasture, the smallest class: 2,000
        download_hint="EuroSAT has no downloader here (data.download does not apply): extract EuroSAT.zip (RGB, "
        "https://zenodo.org/records/7711810, or torchvision.datasets.EuroSAT(<root>, download=True)) so that "
        "<root>/eurosat/2750/<Class>/*.jpg exist.",
    )
    folder = "eurosat"
    published_images = {"train": 21_600, "test": 5_400}
    fake_size = FakeSize(8, 2)   # 10 files a class: 8 train, 2 test; USB-CV's most labels: 40 (4 a class)
    min_image_size = 16
    min_size_reason = " (USB-CV resizes it to 32)"
    listing_order = 7

    def scaled_pad(self, size: int) -> int:
        return size // 8

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        size = info.image_size

        def prepare(img: Image.Image) -> Image.Image:
            return img if img.size == (size, size) else TF.resize(img, [size, size])

        def decoder(split: str):
            def decode() -> ImageData:
                files, labels = self._split(info, root, ddir, split)
                return ImageData(decode_files(files, size, prepare, info.name, DatasetError),
                                 torch.tensor(labels, dtype=torch.int64))
            return decode

        return (cached_images(cache_path(ddir, "train", size), decoder("train")),
                cached_images(cache_path(ddir, "test", size), decoder("test")), None, None)

    def _split(self, info: DatasetInfo, root: Path, ddir: Path, split: str) -> tuple[list[Path], list[int]]:
        """The files and labels of ``split``: per class in ImageFolder order, the first :func:`train_count` train."""
        if not (ddir / IMAGES).is_dir():
            raise missing_error(info, root, ddir, [ddir / IMAGES])
        folder = ImageFolder(str(ddir / IMAGES))
        if len(folder.classes) != info.num_classes:
            raise DatasetError(f"eurosat: {ddir / IMAGES} has {len(folder.classes)} class folders "
                               f"({', '.join(folder.classes[:4])}...), expected the {info.num_classes} of EuroSAT "
                               f"({', '.join(CLASSES)})")
        targets = np.asarray(folder.targets)
        chosen = []
        for c in range(info.num_classes):
            idx = np.flatnonzero(targets == c)   # ImageFolder lists a class's files together, sorted
            cut = train_count(len(idx))
            chosen.extend(idx[:cut] if split == "train" else idx[cut:])
        return [Path(folder.samples[i][0]) for i in chosen], [int(targets[i]) for i in chosen]

    def class_names(self, ddir: Path) -> list[str] | None:
        folder = ddir / IMAGES
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else None

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """``2750/<Class>/<Class>_<i>.jpg``, 64x64 JPEGs, ``train_per_class + test_per_class`` a class (numbered
        from 1, as the zip's); the split must give back ``train_per_class``."""
        per_class = size.train_per_class + size.test_per_class
        if train_count(per_class) != size.train_per_class:
            raise ValueError(f"eurosat: a fake size of {size.train_per_class} train + {size.test_per_class} test a "
                             f"class is not USB's split (int(0.8 * {per_class}) = {train_count(per_class)} train)")
        folder = root / self.folder
        for name in CLASSES:
            (folder / IMAGES / name).mkdir(parents=True, exist_ok=True)
            save_images(rng, [folder / IMAGES / name / f"{name}_{i}.jpg" for i in range(1, per_class + 1)], 64)
        return folder
