"""mini-ImageNet: 100 classes from ImageNet as a CSV split, ``<root>/miniimagenet/{train,test}.csv`` + ``images/``.

The released code's preprocessing (Resize(isize, LANCZOS) + CenterCrop(isize), isize = 80) and weak augmentation
(crop pad int(0.125 * isize) = 10, reflect, + flip). ``data.image_size`` may resize it (>= 16).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import balanced_labels, save_images
from mutexmatch.data.imagefiles import decode_files, regular_file
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import (BuiltinDataset, DatasetError, DatasetInfo, FakeSize, Splits, missing_error,
                                      register_dataset)

_FAKE_SIDE = 84  # fake files are stored larger than the 80 px they are loaded at, so the resize + crop really runs


@register_dataset
class MiniImageNet(BuiltinDataset):
    # Its statistics were computed by its authors on the train split (real values, not divided by 255 twice), so we
    # use them as released.
    info = DatasetInfo(
        name="miniimagenet", num_classes=100, image_size=80,
        mean=(0.4779, 0.4497, 0.4018), std=(0.2229, 0.2181, 0.2175),
        released_mean=(0.4779, 0.4497, 0.4018), released_std=(0.2229, 0.2181, 0.2175),
        flip=True, pad=10, pad_mode="reflect", train_per_class_min=500,
        download_hint="mini-ImageNet has no downloader (data.download does not apply): put train.csv and "
        "test.csv (columns filename,label; 500 train and 100 test images for each of 100 classes) and the "
        "images/ folder holding the listed files into <root>/miniimagenet/.",
    )
    folder = "miniimagenet"
    test_images = 10_000  # 100 of each class; the split sizes come from the CSVs, not from published numbers
    fake_size = FakeSize(10, 1)  # 1,000 labels, the most experiments/*.yaml use
    min_image_size = 16
    listing_order = 5

    def scaled_pad(self, size: int) -> int:
        return int(size * 0.125)  # the released code pads int(0.125 * isize)

    def split_images(self, ddir: Path, extra: bool) -> dict[str, int]:
        return {s: _csv_rows(ddir / f"{s}.csv") for s in self.cached_splits(extra)}

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        size = info.image_size
        required = [ddir / "train.csv", ddir / "test.csv", ddir / "images"]

        def prepare(img: Image.Image) -> Image.Image:
            return TF.center_crop(TF.resize(img, size, interpolation=InterpolationMode.LANCZOS), [size, size])

        classes: list[str] | None = None

        def decoder(split: str) -> Callable[[], ImageData]:
            def decode() -> ImageData:
                nonlocal classes
                missing = [p for p in required if not p.exists()]
                if missing:
                    raise missing_error(info, root, ddir, missing)
                if classes is None:
                    classes = _class_order(_read_csv_split(ddir / "train.csv")[1])
                    if len(classes) != info.num_classes:
                        raise ValueError(f"miniimagenet: {ddir / 'train.csv'} has {len(classes)} classes, expected "
                                         f"{info.num_classes}")
                files, labels = _read_csv_split(ddir / f"{split}.csv")
                index = {c: i for i, c in enumerate(classes)}
                unknown = sorted(set(labels) - index.keys())
                if unknown:
                    raise ValueError(f"miniimagenet: {split}.csv has labels not in train.csv: {unknown[:5]}")
                x = decode_files([ddir / "images" / f for f in files], size, prepare, info.name, DatasetError)
                return ImageData(x, torch.tensor([index[lab] for lab in labels], dtype=torch.int64))
            return decode

        return (*(cached_images(cache_path(ddir, s, size), decoder(s), self.cache_sources(ddir, s))
                  for s in ("train", "test")), None, None)

    def cache_sources(self, ddir: Path, split: str) -> list[Path]:
        return [ddir / "train.csv"] + ([] if split == "train" else [ddir / f"{split}.csv"])  # classes: train.csv

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """``train.csv``/``test.csv`` (columns filename,label; labels are wnids) and the PNG files in ``images/``."""
        folder = root / self.folder
        (folder / "images").mkdir(parents=True, exist_ok=True)
        wnids = [f"n{1_000_000 + 37 * c:08d}" for c in range(self.info.num_classes)]
        for split, per_class in (("train", size.train_per_class), ("test", size.test_per_class)):
            labels = balanced_labels(rng, len(wnids), per_class)
            files = [f"{split}_{i:06d}.png" for i in range(len(labels))]
            (folder / f"{split}.csv").write_text(
                "filename,label\n" + "".join(f"{f},{wnids[c]}\n" for f, c in zip(files, labels)))
            save_images(rng, [folder / "images" / f for f in files], _FAKE_SIDE)
        return folder


def _read_csv_split(path: Path) -> tuple[list[str], list[str]]:
    with regular_file(path, "miniimagenet", DatasetError).open(newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if "filename" not in fields or "label" not in fields:
            raise ValueError(f"{path}: needs the columns filename,label; found {','.join(fields) or 'none'}")
        rows = [(r["filename"], r["label"]) for r in reader]
    return [r[0] for r in rows], [r[1] for r in rows]


def _csv_rows(path: Path) -> int:
    """Images a split CSV lists; 0 where it is missing or unreadable: a load with a cache does not read it, and
    one without names the problem itself."""
    try:
        return len(_read_csv_split(path)[0])
    except (OSError, ValueError, csv.Error):  # a UnicodeDecodeError is a ValueError
        return 0


def _class_order(names: Sequence[str]) -> list[str]:
    """Sorted class names; numeric labels (the released code's CSVs use 0..99) sort as numbers, not strings."""
    unique = set(names)
    if all(n.strip().lstrip("-").isdigit() for n in unique):
        return sorted(unique, key=int)
    return sorted(unique)
