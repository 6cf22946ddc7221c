"""Loading a dataset by name: a built-in one through its registered reader, or your own image folder.

Every dataset is read through its canonical reader (:mod:`mutexmatch.data.builtin`), converted to one uint8
``(N, C, H, W)`` tensor plus int64 labels per split, and cached (:mod:`mutexmatch.data.cache`) under
``<dataset dir>/.mutexmatch_cache/<split>_<size>px.pt``. Each built-in dataset lives in its own folder below the data
root ``<root>`` (``BuiltinDataset.folder``; the layouts are in ``docs/datasets.md``); ``imagefolder`` reads
``<root>`` itself.

Weak-augmentation facts (flip, pad, pad mode) and normalisation statistics are static per dataset and follow the
released MutexMatch code, except where it is wrong (see the comments in each dataset's module, and
``docs/datasets.md``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mutexmatch.data import imagefolder
from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.cache import CACHE_DIRNAME, cache_path, cached, check_images, checksum_path
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import NORMALIZATIONS, BuiltinDataset, DatasetInfo


@dataclass
class DatasetBundle:
    """One loaded dataset.

    ``info.image_size`` (and for mini-ImageNet and digits ``info.pad``) reflect the ``image_size`` actually loaded.
    ``predefined_folds`` (STL-10 only) holds the 10 index arrays of ``fold_indices.txt``, each indexing ``train``.
    Tensors loaded from the cache are memory-mapped copy-on-write: in-place writes never reach the cache file.
    """

    info: DatasetInfo
    train: ImageData
    test: ImageData
    extra_unlabeled: ImageData | None
    predefined_folds: list[np.ndarray] | None
    val: ImageData | None = None  # imagefolder's val/ folder; otherwise validation is carved out of train
    classes: tuple[str, ...] | None = None  # class names in label order, where the dataset names them


def get_dataset(name: str) -> BuiltinDataset:
    """The registered built-in dataset ``name``; ``ValueError`` naming the allowed ones otherwise."""
    if name not in DATASETS:
        raise ValueError(f"data.dataset: unknown dataset {name!r}; allowed: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def dataset_dir(name: str, root: str | Path) -> Path:
    """The folder that holds dataset ``name``'s files (and its cache) below the data root."""
    return Path(root).expanduser() / get_dataset(name).folder


def load_dataset(name: str, root: str | Path, *, download: bool = False, svhn_extra: bool = False,
                 image_size: int | None = None, normalization: str = "correct") -> DatasetBundle:
    """Load dataset ``name`` from ``root`` (decoding and caching it on first use).

    Args:
        name: one of ``DATASETS`` or ``imagefolder`` (:mod:`mutexmatch.data.imagefolder`: ``root`` is then the
            dataset folder itself, and ``image_size`` may be any side, null = inferred).
        root: the data root (``data.root``); each dataset lives in its own folder below it.
        normalization: ``correct`` normalises with the dataset's real statistics, ``released`` with the released
            code's constants (``DatasetInfo.released_mean``/``released_std``; SVHN, STL-10 and Tiny-ImageNet differ).
        download: pass ``download=True`` to torchvision's downloader (the datasets it can download only).
        svhn_extra: append the dataset's ``extra_split`` (SVHN's 531,131 ``extra`` images) to its training set.
        image_size: side length; only datasets with a ``min_image_size`` (mini-ImageNet: resize, default 80;
            digits: upscale, default 16) can change it. Other datasets accept ``None`` or their native size.

    Raises:
        ValueError: unknown name, an image size the dataset cannot produce, ``svhn_extra`` for another dataset,
            or files whose content does not match the dataset (e.g. a wrong class count).
        FileNotFoundError: the dataset's files are missing; the message names the dataset, the folder searched
            and how to get the files.
    """
    if svhn_extra and (name not in DATASETS or DATASETS[name].extra_split is None):
        with_extra = [n for n, d in DATASETS.items() if d.extra_split is not None]
        raise ValueError(f"svhn_extra=True only applies to dataset {' or '.join(map(repr, with_extra))}, not "
                         f"{name!r}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"data.normalization={normalization!r}: must be one of {', '.join(NORMALIZATIONS)}")
    if name == imagefolder.NAME:
        if normalization != "correct":
            raise ValueError(f"data.normalization={normalization!r}: imagefolder has no released constants; "
                             f"use `correct` (statistics of its train images)")
        return _load_imagefolder(Path(root).expanduser(), image_size)
    dataset = get_dataset(name)
    info = _with_normalization(dataset.info, normalization)
    info = dataset.with_size(info, _resolve_image_size(dataset, image_size))
    root = Path(root).expanduser()
    train, test, extra, folds = dataset.read(info, root, dataset_dir(name, root), download=download,
                                             extra=svhn_extra)
    for split, data in (("train", train), ("test", test)):
        _check_decoded(info, split, data)
    if extra is not None and tuple(extra.x.shape[1:]) != tuple(train.x.shape[1:]):
        raise ValueError(f"{name} unlabeled: images are {tuple(extra.x.shape[1:])}, train images are "
                         f"{tuple(train.x.shape[1:])}")
    return DatasetBundle(info=info, train=train, test=test, extra_unlabeled=extra, predefined_folds=folds)


def cache_paths(name: str, root: str | Path, *, image_size: int | None = None, svhn_extra: bool = False
                ) -> dict[str, Path]:
    """Split name -> the cache file a load of ``name`` would read now (it may not exist yet).

    For ``imagefolder`` the file name carries the digest of the folder's content, so a missing file means the
    folder was never decoded at this size or has changed since.
    """
    if name == imagefolder.NAME:
        index = imagefolder.scan_folder(root)
        size = image_size or imagefolder.infer_image_size(index)
        ddir = Path(root).expanduser()
        return {s: _imagefolder_cache_path(ddir, index, s, size) for s in index.files}
    dataset = get_dataset(name)
    size = _resolve_image_size(dataset, image_size)
    ddir = dataset_dir(name, root)
    return {s: cache_path(ddir, s, size) for s in dataset.cached_splits(svhn_extra)}


@dataclass(frozen=True)
class Footprint:
    """What a load holds in memory, known before any image is decoded (images are uint8 ``channels x size^2``)."""

    channels: int
    size: int
    splits: dict[str, int]  # split -> images, as cached
    train: int              # the training set the trainer indexes (SVHN's extra appended)
    unlabeled: int          # unlabeled-only images beside it (STL-10's unlabeled split, an image folder's unlabeled/)
    appended: bool = False  # whether the train split is a copy with an extra split appended

    def nbytes(self, images: int) -> int:
        return images * self.channels * self.size * self.size

    @property
    def loaded_images(self) -> int:
        """Images in host memory once loaded: every split, plus SVHN's train and extra concatenated (a copy)."""
        return sum(self.splits.values()) + (self.train if self.appended else 0)


def footprint(name: str, root: str | Path, *, svhn_extra: bool = False, image_size: int | None = None
              ) -> Footprint:
    """The images a :func:`load_dataset` with these arguments would hold, counted without decoding any: the
    published split sizes, mini-ImageNet's CSV rows, an image folder's files. Raises what the load would for a bad
    name, size or folder layout."""
    if name == imagefolder.NAME:
        index = imagefolder.scan_folder(root)
        splits = {s: len(files) for s, files in index.files.items()}
        size = image_size or imagefolder.infer_image_size(index)
        return Footprint(3, size, splits, splits["train"], splits.get(imagefolder.UNLABELED_SPLIT, 0))
    dataset = get_dataset(name)
    size = _resolve_image_size(dataset, image_size)
    splits = dataset.split_images(dataset_dir(name, root), svhn_extra)
    extra = splits.get(dataset.extra_split, 0) if dataset.extra_split else 0
    return Footprint(dataset.info.channels, size, splits, splits["train"] + extra, splits.get("unlabeled", 0),
                     appended=dataset.extra_split in splits)


def _with_normalization(info: DatasetInfo, normalization: str) -> DatasetInfo:
    if normalization == "correct":
        return info
    if info.released_mean is None or info.released_std is None:
        raise ValueError(f"data.normalization={normalization!r}: the released code has no {info.name} dataset; "
                         f"use `correct`")
    return dataclasses.replace(info, mean=info.released_mean, std=info.released_std)


def _resolve_image_size(dataset: BuiltinDataset, image_size: int | None) -> int:
    info = dataset.info
    if image_size is None:
        return info.image_size
    if isinstance(image_size, bool) or not isinstance(image_size, int):
        raise ValueError(f"data.image_size must be an integer, got {image_size!r}")
    if dataset.min_image_size is not None:
        if image_size < dataset.min_image_size:
            raise ValueError(f"data.image_size for {info.name} must be >= {dataset.min_image_size}"
                             f"{dataset.min_size_reason}, got {image_size}")
    elif image_size != info.image_size:
        resizable = " and ".join(n for n, d in DATASETS.items() if d.min_image_size is not None)
        raise ValueError(f"data.image_size for {info.name} must be its native {info.image_size} (or unset), "
                         f"got {image_size}; only {resizable} are resized")
    return image_size


def _check_decoded(info: DatasetInfo, split: str, data: ImageData) -> None:
    """Catch files that decode but do not belong to this dataset (wrong channels, size or label range)."""
    _, c, h, w = data.x.shape
    if (c, h, w) != (info.channels, info.image_size, info.image_size):
        raise ValueError(f"{info.name} {split}: decoded images are {c}x{h}x{w}, expected "
                         f"{info.channels}x{info.image_size}x{info.image_size}")
    if len(data) and (int(data.y.min()) < 0 or int(data.y.max()) >= info.num_classes):
        raise ValueError(f"{info.name} {split}: labels must lie in [0, {info.num_classes}), found "
                         f"[{int(data.y.min())}, {int(data.y.max())}]")


# ----------------------------------------------------------------------------------------------------------------
# Your own image folders (rules in mutexmatch/data/imagefolder.py)


def _imagefolder_cache_path(ddir: Path, index: imagefolder.FolderIndex, split: str, size: int) -> Path:
    return ddir / CACHE_DIRNAME / f"{split}_{size}px_{index.content_key(split, size)}.pt"


def _load_imagefolder(root: Path, image_size: int | None) -> DatasetBundle:
    index = imagefolder.scan_folder(root)
    size = image_size or imagefolder.infer_image_size(index)
    paths = {s: _imagefolder_cache_path(root, index, s, size) for s in index.files}
    todo = {s: len(index.files[s]) for s, p in paths.items() if not p.is_file()}
    if todo:
        imagefolder.check_disk(root / CACHE_DIRNAME, todo, size)
    data = {split: _imagefolder_split(root, index, split, size, path) for split, path in paths.items()}
    train = data["train"]
    info = DatasetInfo(
        name=imagefolder.NAME, num_classes=len(index.classes), channels=3, image_size=size,
        mean=tuple(train["mean"].tolist()), std=tuple(train["std"].tolist()), flip=True,
        pad=max(1, round(size / 8)), pad_mode="constant", has_unlabeled_split=imagefolder.UNLABELED_SPLIT in data,
        download_hint="imagefolder reads your own folder: docs/datasets.md (\"Your own images\") gives its layout.")
    images = {s: ImageData(p["x"], p["y"]) for s, p in data.items()}
    for split in ("train", "test", "val"):
        if split in images:
            _check_decoded(info, split, images[split])
    return DatasetBundle(info=info, train=images["train"], test=images["test"],
                         extra_unlabeled=images.get(imagefolder.UNLABELED_SPLIT), predefined_folds=None,
                         val=images.get("val"), classes=index.classes)


def _imagefolder_split(root: Path, index: imagefolder.FolderIndex, split: str, size: int, path: Path) -> dict:
    """One split's cached payload (images, labels and, for train, the channel statistics); older caches of the
    split at this size, superseded by an edit of the folder, are deleted."""
    def decode() -> dict:
        x = imagefolder.decode_images([root / split / rel for rel, _ in index.files[split]], size)
        y = torch.tensor([label for _, label in index.files[split]], dtype=torch.int64)
        stats = imagefolder.channel_stats(x) if split == "train" else ((), ())
        return {"x": x, "y": y, "mean": torch.tensor(stats[0], dtype=torch.float64),
                "std": torch.tensor(stats[1], dtype=torch.float64)}

    payload = cached(path, decode, check_images)
    for stale in path.parent.glob(f"{split}_{size}px_*.pt"):
        if stale != path:
            stale.unlink(missing_ok=True)
            checksum_path(stale).unlink(missing_ok=True)
    return payload
