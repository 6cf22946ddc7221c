"""Tiny-ImageNet: 64x64 images of 200 classes, the extracted official zip at ``<root>/tiny-imagenet-200/``.

Train through ``ImageFolder`` (class index = position among the sorted wnids, images sorted by file name, as in the
released code); its labeled ``val`` split is the test set, read from ``val_annotations.txt`` in sorted file order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import ImageFolder

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import balanced_labels, save_images
from mutexmatch.data.imagefiles import decode_files, regular_file
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import (BuiltinDataset, DatasetError, DatasetInfo, FakeSize, Splits, missing_error,
                                      register_dataset, twice_divided)

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


@register_dataset
class TinyImageNet(BuiltinDataset):
    # Released code: crop 64 pad 4, no flip; ImageNet statistics (the released code divides them by 255 twice, we
    # do not).
    info = DatasetInfo(
        name="tinyimagenet", num_classes=200, image_size=64,
        mean=_IMAGENET_MEAN, std=_IMAGENET_STD,
        released_mean=twice_divided(_IMAGENET_MEAN), released_std=twice_divided(_IMAGENET_STD),
        flip=False, train_per_class_min=500,
        download_hint="Tiny-ImageNet has no downloader here (data.download does not apply): extract "
        "tiny-imagenet-200.zip (http://cs231n.stanford.edu/tiny-imagenet-200.zip) into <root>/ so that "
        "<root>/tiny-imagenet-200/train/<wnid>/images/*.JPEG, val/images/*.JPEG and val/val_annotations.txt "
        "exist.",
    )
    folder = "tiny-imagenet-200"
    published_images = {"train": 100_000, "test": 10_000}
    fake_size = FakeSize(25, 1)  # 5,000 labels, the most experiments/*.yaml use
    listing_order = 6

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        size = info.image_size
        annotations = ddir / "val" / "val_annotations.txt"

        def decode_train() -> ImageData:
            folder = self._train_folder(info, root, ddir)
            x = decode_files([Path(p) for p, _ in folder.samples], size, lambda im: im, info.name, DatasetError)
            return ImageData(x, torch.tensor(folder.targets, dtype=torch.int64))

        def decode_val() -> ImageData:
            class_to_idx = self._train_folder(info, root, ddir).class_to_idx
            entries = _annotations(annotations)
            unknown = sorted(set(entries.values()) - class_to_idx.keys())
            if unknown:
                raise ValueError(f"tinyimagenet: {annotations} names wnids without a train folder: {unknown[:5]}")
            files = sorted(entries)
            x = decode_files([ddir / "val" / "images" / f for f in files], size, lambda im: im, info.name,
                             DatasetError)
            return ImageData(x, torch.tensor([class_to_idx[entries[f]] for f in files], dtype=torch.int64))

        return (cached_images(cache_path(ddir, "train", size), decode_train),
                cached_images(cache_path(ddir, "test", size), decode_val, self.cache_sources(ddir, "test")), None,
                None)

    def cache_sources(self, ddir: Path, split: str) -> list[Path]:
        return [ddir / "val" / "val_annotations.txt"] if split == "test" else []

    def _train_folder(self, info: DatasetInfo, root: Path, ddir: Path) -> ImageFolder:
        required = [ddir / "train", ddir / "val" / "images", ddir / "val" / "val_annotations.txt"]
        missing = [p for p in required if not p.exists()]
        if missing:
            raise missing_error(info, root, ddir, missing)
        folder = ImageFolder(str(ddir / "train"))
        if len(folder.classes) != info.num_classes:
            raise ValueError(f"tinyimagenet: {ddir / 'train'} has {len(folder.classes)} class folders, expected "
                             f"{info.num_classes}")
        wnids_file = ddir / "wnids.txt"
        if wnids_file.is_file():
            wnids = {w.strip() for w in wnids_file.read_text().splitlines() if w.strip()}
            if wnids != set(folder.classes):
                raise ValueError(f"tinyimagenet: {wnids_file} does not list the class folders of {ddir / 'train'}")
        return folder

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """``wnids.txt``, ``train/<wnid>/images/<wnid>_<i>.JPEG`` and ``val/images`` with
        ``val/val_annotations.txt`` (file, wnid, box)."""
        folder = root / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        wnids = [f"n{2_000_000 + 53 * c:08d}" for c in range(self.info.num_classes)]
        (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
        for w in wnids:
            images = folder / "train" / w / "images"
            images.mkdir(parents=True, exist_ok=True)
            files = [f"{w}_{i}.JPEG" for i in range(size.train_per_class)]
            (folder / "train" / w / f"{w}_boxes.txt").write_text("".join(f"{f}\t0\t0\t63\t63\n" for f in files))
            save_images(rng, [images / f for f in files], 64)
        (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
        labels = balanced_labels(rng, len(wnids), size.test_per_class)
        files = [f"val_{i}.JPEG" for i in range(len(labels))]
        save_images(rng, [folder / "val" / "images" / f for f in files], 64)
        (folder / "val" / "val_annotations.txt").write_text(
            "".join(f"{f}\t{wnids[c]}\t0\t0\t63\t63\n" for f, c in zip(files, labels)))
        return folder


def _annotations(path: Path) -> dict[str, str]:
    """Image file -> wnid, from the official ``val_annotations.txt`` (tab-separated: file, wnid, box); a line in
    another format is refused naming the file and the line (finding #10: spaces ended in an IndexError)."""
    entries: dict[str, str] = {}
    for number, line in enumerate(regular_file(path, "tinyimagenet", DatasetError).read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
            raise DatasetError(f"tinyimagenet: {path} line {number}: {line[:80]!r} is not "
                               "<file><TAB><wnid><TAB><x0><TAB><y0><TAB><x1><TAB><y1> (tab-separated, as in "
                               "tiny-imagenet-200.zip); restore the file from the zip")
        entries[fields[0].strip()] = fields[1].strip()
    return entries
