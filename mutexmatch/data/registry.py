"""The dataset registry: what a built-in dataset declares, and ``@register_dataset``, which records it.

A built-in dataset is one module in :mod:`mutexmatch.data.builtin` holding one :class:`BuiltinDataset` subclass
decorated with ``@register_dataset``: its facts (:class:`DatasetInfo`: classes, image size, normalisation, weak
augmentation; its folder below the data root, published split sizes, the fake-data shape, the size of its real test
set) beside its reader (:meth:`BuiltinDataset.read`) and its fake-file writer (:meth:`BuiltinDataset.write_fake`).
Importing :mod:`mutexmatch.data.builtin` imports every module there, which fills :data:`DATASETS`; config
validation, loading, fake data, the dataset command line and orchestration's dry run all read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import numpy as np

from mutexmatch.data.images import ImageData

NORMALIZATIONS = ("correct", "released")


class DatasetError(ValueError):
    """Dataset files that exist but cannot be used (corrupted, not the dataset) or cannot be fetched; one line
    naming the file or folder and what to do."""


def twice_divided(stats: tuple[float, ...]) -> tuple[float, ...]:
    """The released code's SVHN/STL-10/Tiny-ImageNet statistics: already in [0, 1], divided by 255 once more."""
    return tuple(v / 255 for v in stats)


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about one dataset.

    ``mean``/``std`` are per-channel statistics of ``pixel / 255``; ``flip``, ``pad`` and ``pad_mode`` describe the
    weak augmentation alpha_w of Sec. 3 (random horizontal flip, then a random crop of ``image_size`` from the image
    padded by ``pad`` pixels).
    """

    name: str
    num_classes: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    flip: bool
    download_hint: str
    channels: int = 3
    pad: int = 4
    pad_mode: str = "constant"
    has_unlabeled_split: bool = False
    # The statistics the released MutexMatch code normalises with (``data.normalization: released``); None where
    # the released code has no such dataset. For SVHN, STL-10 and Tiny-ImageNet they are its constants divided by
    # 255 a second time, as it does: the published numbers for those datasets were produced that way.
    released_mean: tuple[float, ...] | None = None
    released_std: tuple[float, ...] | None = None
    # The fewest train images of any class in the real dataset (SVHN: without `extra`), so that a config asking for
    # more labeled + validation images per class is refused before any data is loaded; None: unknown.
    train_per_class_min: int | None = None

    def __post_init__(self) -> None:
        stats = [self.mean, self.std] + [v for v in (self.released_mean, self.released_std) if v is not None]
        if any(len(v) != self.channels for v in stats):
            raise ValueError(f"DatasetInfo {self.name!r}: mean/std need {self.channels} values (one per channel)")
        if self.pad_mode not in ("constant", "reflect"):
            raise ValueError(f"DatasetInfo {self.name!r}: pad_mode must be 'constant' or 'reflect', "
                             f"got {self.pad_mode!r}")


@dataclass(frozen=True)
class FakeSize:
    """Images per class in the train and test splits, and the images of the dataset's further split where it has
    one (STL-10's unlabeled split, SVHN's extra split)."""

    train_per_class: int
    test_per_class: int
    unlabeled: int = 0


# What a reader returns: train, test, extra unlabeled images (or None) and predefined labeled folds (or None).
Splits = tuple[ImageData, ImageData, "ImageData | None", "list[np.ndarray] | None"]


class BuiltinDataset:
    """Everything about one built-in dataset; subclass it in a module of :mod:`mutexmatch.data.builtin`.

    Class attributes (the facts): ``info``; ``folder`` (below the data root); ``published_images`` (split -> images
    as the reader decodes the published files, in cache order: the memory a load takes is estimated from it before
    anything is decoded); ``test_images`` (the real test set, which a dry run's evaluation is scaled to; defaults to
    ``published_images["test"]``); ``fake_size`` (the generated files' shape, None when nothing is on disk);
    ``extra_split`` (the split ``data.svhn_extra`` appends to train); ``min_image_size`` (None: only the native
    size; otherwise the smallest side a load may resize to, ``min_size_reason`` saying why);
    ``allowed_num_labels`` (None: any ``data.num_labels`` the classes divide; otherwise the only ones,
    ``allowed_num_labels_reason`` saying why); ``needs_files`` (False: nothing on disk below the data root but the
    cache); ``listing_order`` (where the name stands in listings: ``--help``, errors).
    """

    info: ClassVar[DatasetInfo]
    folder: ClassVar[str]
    published_images: ClassVar[Mapping[str, int]] = {}
    test_images: ClassVar[int | None] = None
    fake_size: ClassVar[FakeSize | None] = None
    extra_split: ClassVar[str | None] = None
    min_image_size: ClassVar[int | None] = None
    min_size_reason: ClassVar[str] = ""
    allowed_num_labels: ClassVar[tuple[int, ...] | None] = None
    allowed_num_labels_reason: ClassVar[str] = ""
    needs_files: ClassVar[bool] = True
    listing_order: ClassVar[int] = 100

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def real_test_images(self) -> int:
        return self.test_images if self.test_images is not None else self.published_images["test"]

    @property
    def downloadable(self) -> bool:
        """Whether ``python -m mutexmatch.datasets download`` (and ``data.download``) can fetch it."""
        return False

    def cached_splits(self, extra: bool) -> list[str]:
        """The splits a load caches (``extra``: ``data.svhn_extra``)."""
        return [s for s in (self.published_images or ("train", "test")) if extra or s != self.extra_split]

    def split_images(self, ddir: Path, extra: bool) -> dict[str, int]:
        """Images per cached split, counted without decoding any (default: the published sizes)."""
        return {s: self.published_images[s] for s in self.cached_splits(extra)}

    def scaled_pad(self, size: int) -> int:
        """Crop padding at a non-default size: 12.5 % of the side, as CIFAR's 4 of 32."""
        return max(1, size // 8)

    def cache_sources(self, ddir: Path, split: str) -> list[Path]:
        """The side files besides the images that the cache of ``split`` is decoded from (a split CSV, an
        annotation file): an edit of one makes the cache stale (:mod:`mutexmatch.data.cache`); [] for none."""
        return []

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        """Decode (or load from the cache) the dataset in ``ddir``; ``info`` carries the size being loaded."""
        raise NotImplementedError

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """Write random files in the real on-disk format below the data root; return the dataset's folder."""
        raise NotImplementedError(f"{self.name}: nothing on disk to generate")

    def files(self, extra: bool = False) -> list[tuple[str, str | None]]:
        """(path relative to the folder, published md5 or None) of every file the reader needs; [] if unknown."""
        return []

    def fetch(self, ddir: Path, extra: bool) -> None:
        """Download (or find present and verified) the files into ``ddir``."""
        raise NotImplementedError(f"{self.name}: no downloader")

    def class_names(self, ddir: Path) -> list[str] | None:
        """The class names the dataset's files hold, in label order; None when it names none."""
        return None

    def with_size(self, info: DatasetInfo, size: int) -> DatasetInfo:
        return info if size == info.image_size else dataclasses.replace(info, image_size=size,
                                                                        pad=self.scaled_pad(size))


DATASETS: dict[str, BuiltinDataset] = {}
_D = TypeVar("_D", bound=type[BuiltinDataset])


def register_dataset(cls: _D) -> _D:
    """Record ``cls`` (a :class:`BuiltinDataset` subclass) under ``cls.info.name``; a name taken twice is refused."""
    name = cls.info.name
    if name in DATASETS:
        raise ValueError(f"dataset {name!r} registered twice ({type(DATASETS[name]).__module__} and "
                         f"{cls.__module__})")
    DATASETS[name] = cls()
    return cls


def listed(datasets: Sequence[BuiltinDataset]) -> list[BuiltinDataset]:
    """``datasets`` in listing order (``listing_order``, then name)."""
    return sorted(datasets, key=lambda d: (d.listing_order, d.name))


def missing_error(info: DatasetInfo, root: Path, ddir: Path, missing: Sequence[Path]) -> FileNotFoundError:
    """The error of a reader that finds files missing: the dataset, the folder searched and how to get them."""
    shown = ", ".join(str(p) for p in missing[:4]) + (f" (+{len(missing) - 4} more)" if len(missing) > 4 else "")
    return FileNotFoundError(f"{info.name}: dataset files not found under {ddir} (data root {root}); missing: "
                             f"{shown}. {info.download_hint}")
