"""The six benchmark datasets of the paper (Sec. 5) plus scikit-learn's digits, decoded once into uint8 tensors.

Every dataset is read through its canonical reader (torchvision's ``CIFAR10``/``CIFAR100``/``SVHN``/``STL10`` and
``ImageFolder``, PIL for the CSV-listed mini-ImageNet images, scikit-learn for digits), converted to one uint8
``(N, C, H, W)`` tensor plus int64 labels per split, and cached with ``torch.save`` under
``<dataset dir>/.mutexmatch_cache/<split>_<size>px.pt``, with the sha256 of its bytes beside it (``.pt.sha256``).
Later loads check that sha256 (about 0.5 s per GB on one core: a flipped bit in a cached image is decoded again with
a warning, never trained on) and memory-map the file (``torch.load(..., weights_only=True, mmap=True)``), so several
processes on one machine share one copy in the page cache. The cache is written to a temporary file and moved into
place with ``os.replace``, so concurrent trials that decode at the same time never see a half-written file. Delete
the ``.mutexmatch_cache`` folder to force a re-decode.

Dataset directories under the data root ``<root>``:

==============  ======================================================================================
cifar10         ``<root>/cifar10/cifar-10-batches-py/`` (torchvision's layout; torchvision root = ``<root>/cifar10``)
cifar100        ``<root>/cifar100/cifar-100-python/``
svhn            ``<root>/svhn/{train,test,extra}_32x32.mat``
stl10           ``<root>/stl10/stl10_binary/``
miniimagenet    ``<root>/miniimagenet/{train,test}.csv`` + ``images/``
tinyimagenet    ``<root>/tiny-imagenet-200/`` (the extracted official zip)
digits          nothing on disk (ships with scikit-learn); only the cache goes to ``<root>/digits/``
==============  ======================================================================================

Weak-augmentation facts (flip, pad, pad mode) and normalisation statistics are static per dataset and follow the
released MutexMatch code, except where it is wrong (see the comments on each registry entry, and
``docs/datasets.md``).
"""

from __future__ import annotations

import csv
import dataclasses
import pickle
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.datasets import CIFAR10, CIFAR100, STL10, SVHN, ImageFolder
from torchvision.datasets.utils import check_integrity
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from mutexmatch import imagefolder
from mutexmatch.atomic import atomic_write
from mutexmatch.checkpoint import sha256_file

CACHE_DIRNAME = ".mutexmatch_cache"
# Bump when the meaning of cached tensors changes (e.g. a different resize), so stale caches are re-decoded.
_CACHE_FORMAT = 1

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_CIFAR10_MEAN = tuple(v / 255 for v in (125.3, 123.0, 113.9))
_CIFAR10_STD = tuple(v / 255 for v in (63.0, 62.1, 66.7))
_CIFAR100_MEAN = tuple(v / 255 for v in (129.3, 124.1, 112.4))
_CIFAR100_STD = tuple(v / 255 for v in (68.2, 65.4, 70.4))
NORMALIZATIONS = ("correct", "released")
# Beside every cache file: the sha256 of its bytes, checked on load (torch.load does not notice a flipped pixel).
CHECKSUM_SUFFIX = ".sha256"


class DatasetError(ValueError):
    """Dataset files that exist but cannot be used (corrupted, not the dataset) or cannot be fetched; one line
    naming the file or folder and what to do."""


def _twice_divided(stats: tuple[float, ...]) -> tuple[float, ...]:
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


def _cifar(n: int, mean: tuple[float, ...], std: tuple[float, ...], *, per_class: int, archive: str,
           folder: str) -> DatasetInfo:
    """CIFAR-10/100: the released code's statistics (themselves the usual CIFAR train-set statistics) for both
    normalisations, flip + crop 32 pad 4."""
    return DatasetInfo(
        name=f"cifar{n}", num_classes=n, image_size=32, mean=mean, std=std, released_mean=mean, released_std=std,
        flip=True, train_per_class_min=per_class,
        download_hint=f"Set `data.download: true` to let torchvision download CIFAR-{n} (about 170 MB) into "
        f"<root>/cifar{n}/, or extract {archive} there so that <root>/cifar{n}/{folder}/ exists.")


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        _cifar(10, _CIFAR10_MEAN, _CIFAR10_STD, per_class=5000, archive="cifar-10-python.tar.gz",
               folder="cifar-10-batches-py"),
        _cifar(100, _CIFAR100_MEAN, _CIFAR100_STD, per_class=500, archive="cifar-100-python.tar.gz",
               folder="cifar-100-python"),
        # SVHN: the commonly published train-set statistics (we cannot recompute them offline). The released code
        # has mean (0.4380, 0.4440, 0.4730), std (0.1751, 0.1771, 0.1744) but divides them by 255 a second time,
        # which makes its normalisation almost the identity scaled by 255 (kept as `released`).
        # No flip: digits are not mirror-invariant (released code: crop 32 pad 4 only).
        DatasetInfo(
            name="svhn", num_classes=10, image_size=32,
            mean=(0.4377, 0.4438, 0.4728), std=(0.1980, 0.2010, 0.1970),
            released_mean=_twice_divided((0.4380, 0.4440, 0.4730)),
            released_std=_twice_divided((0.1751, 0.1771, 0.1744)),
            flip=False, train_per_class_min=4659,  # digit 9 of the 73,257 train images
            download_hint="Set `data.download: true` to let torchvision download SVHN into <root>/svhn/, or put "
            "train_32x32.mat and test_32x32.mat (plus extra_32x32.mat when svhn_extra is on) there.",
        ),
        # STL-10: commonly published statistics; the released code's (0.4409, 0.4279, 0.3868) /
        # (0.2309, 0.2262, 0.2237) are divided by 255 twice (a bug, kept as `released`). Weak augmentation as in
        # the released code: flip + crop 96 pad 4 (FixMatch's paper used pad 12; we follow MutexMatch's code).
        DatasetInfo(
            name="stl10", num_classes=10, image_size=96, flip=True, has_unlabeled_split=True, train_per_class_min=500,
            mean=(0.4467, 0.4398, 0.4066), std=(0.2603, 0.2566, 0.2713),
            released_mean=_twice_divided((0.4409, 0.4279, 0.3868)),
            released_std=_twice_divided((0.2309, 0.2262, 0.2237)),
            download_hint="Set `data.download: true` to let torchvision download STL-10 (about 2.6 GB) into "
            "<root>/stl10/, or extract stl10_binary.tar.gz there so that <root>/stl10/stl10_binary/ exists.",
        ),
        # mini-ImageNet: the released code's preprocessing (Resize(isize, LANCZOS) + CenterCrop(isize), isize = 80)
        # and weak augmentation (crop pad int(0.125 * isize) = 10, reflect, + flip). Its statistics were computed by
        # its authors on the train split (real values, not divided by 255 twice), so we use them as released.
        DatasetInfo(
            name="miniimagenet", num_classes=100, image_size=80,
            mean=(0.4779, 0.4497, 0.4018), std=(0.2229, 0.2181, 0.2175),
            released_mean=(0.4779, 0.4497, 0.4018), released_std=(0.2229, 0.2181, 0.2175),
            flip=True, pad=10, pad_mode="reflect", train_per_class_min=500,
            download_hint="mini-ImageNet has no downloader (data.download does not apply): put train.csv and "
            "test.csv (columns filename,label; 500 train and 100 test images for each of 100 classes) and the "
            "images/ folder holding the listed files into <root>/miniimagenet/.",
        ),
        # Tiny-ImageNet: released code: crop 64 pad 4, no flip; ImageNet statistics (the released code divides
        # them by 255 twice, we do not).
        DatasetInfo(
            name="tinyimagenet", num_classes=200, image_size=64,
            mean=_IMAGENET_MEAN, std=_IMAGENET_STD,
            released_mean=_twice_divided(_IMAGENET_MEAN), released_std=_twice_divided(_IMAGENET_STD),
            flip=False, train_per_class_min=500,
            download_hint="Tiny-ImageNet has no downloader here (data.download does not apply): extract "
            "tiny-imagenet-200.zip (http://cs231n.stanford.edu/tiny-imagenet-200.zip) into <root>/ so that "
            "<root>/tiny-imagenet-200/train/<wnid>/images/*.JPEG, val/images/*.JPEG and val/val_annotations.txt "
            "exist.",
        ),
        # digits: statistics computed by us on the 1,300-image train split at 8x8 (nearest-exact upscaling by an
        # integer factor leaves them unchanged); tests/mutexmatch/test_datasets.py recomputes them. No flip
        # (digits are not mirror-invariant); pad 2 = 12.5 % of the 16-pixel side, like CIFAR's 4 of 32.
        DatasetInfo(
            name="digits", num_classes=10, channels=1, image_size=16,
            mean=(0.3053,), std=(0.3759,),
            flip=False, pad=2, pad_mode="constant",
            train_per_class_min=126,  # digit 8 of the 1,300-image train split
            download_hint="digits ships inside scikit-learn (sklearn.datasets.load_digits); nothing to download.",
        ),
    ]
}

# Where each dataset lives below the data root (see the module docstring).
_DATASET_DIRS = {
    "cifar10": "cifar10", "cifar100": "cifar100", "svhn": "svhn", "stl10": "stl10",
    "miniimagenet": "miniimagenet", "tinyimagenet": "tiny-imagenet-200", "digits": "digits",
}

DIGITS_NUM_TRAIN = 1300
DIGITS_NUM_TEST = 497
# Images per split as the readers decode the published files (mini-ImageNet's come from its CSVs instead): what the
# memory a load takes is estimated from before anything is decoded (footprint).
PUBLISHED_IMAGES: dict[str, dict[str, int]] = {
    "cifar10": {"train": 50_000, "test": 10_000}, "cifar100": {"train": 50_000, "test": 10_000},
    "svhn": {"train": 73_257, "test": 26_032, "extra": 531_131},
    "stl10": {"train": 5_000, "test": 8_000, "unlabeled": 100_000},
    "tinyimagenet": {"train": 100_000, "test": 10_000},
    "digits": {"train": DIGITS_NUM_TRAIN, "test": DIGITS_NUM_TEST},
}
_DIGITS_SPLIT_SEED = 0


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


def dataset_dir(name: str, root: str | Path) -> Path:
    """The folder that holds dataset ``name``'s files (and its cache) below the data root."""
    _get_info(name)
    return Path(root).expanduser() / _DATASET_DIRS[name]


def load_dataset(name: str, root: str | Path, *, download: bool = False, svhn_extra: bool = False,
                 image_size: int | None = None, normalization: str = "correct") -> DatasetBundle:
    """Load dataset ``name`` from ``root`` (decoding and caching it on first use).

    Args:
        name: one of ``DATASETS`` or ``imagefolder`` (``mutexmatch.imagefolder``: ``root`` is then the dataset
            folder itself, and ``image_size`` may be any side, null = inferred).
        root: the data root (``data.root``); each dataset lives in its own folder below it (module docstring).
        normalization: ``correct`` normalises with the dataset's real statistics, ``released`` with the released
            code's constants (``DatasetInfo.released_mean``/``released_std``; SVHN, STL-10 and Tiny-ImageNet differ).
        download: pass ``download=True`` to torchvision's downloader (CIFAR, SVHN, STL-10 only).
        svhn_extra: append SVHN's 531,131-image ``extra`` split to its training set.
        image_size: side length; only mini-ImageNet (resize, default 80) and digits (upscale, default 16) can
            change it. Other datasets accept ``None`` or their native size.

    Raises:
        ValueError: unknown name, an image size the dataset cannot produce, ``svhn_extra`` for another dataset,
            or files whose content does not match the dataset (e.g. a wrong class count).
        FileNotFoundError: the dataset's files are missing; the message names the dataset, the folder searched
            and how to get the files.
    """
    if svhn_extra and name != "svhn":
        raise ValueError(f"svhn_extra=True only applies to dataset 'svhn', not {name!r}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"data.normalization={normalization!r}: must be one of {', '.join(NORMALIZATIONS)}")
    if name == imagefolder.NAME:
        if normalization != "correct":
            raise ValueError(f"data.normalization={normalization!r}: imagefolder has no released constants; "
                             f"use `correct` (statistics of its train images)")
        return _load_imagefolder(Path(root).expanduser(), image_size)
    info = _with_normalization(_get_info(name), normalization)
    size = _resolve_image_size(info, image_size)
    root = Path(root).expanduser()
    ddir = dataset_dir(name, root)
    if size != info.image_size:
        info = dataclasses.replace(info, image_size=size, pad=_scaled_pad(name, size))

    train, test, extra, folds = _read_builtin(info, root, ddir, download=download, svhn_extra=svhn_extra)
    for split, data in (("train", train), ("test", test)):
        _check_decoded(info, split, data)
    if extra is not None and tuple(extra.x.shape[1:]) != tuple(train.x.shape[1:]):
        raise ValueError(f"{name} unlabeled: images are {tuple(extra.x.shape[1:])}, train images are "
                         f"{tuple(train.x.shape[1:])}")
    return DatasetBundle(info=info, train=train, test=test, extra_unlabeled=extra, predefined_folds=folds)


def _read_builtin(info: DatasetInfo, root: Path, ddir: Path, *, download: bool, svhn_extra: bool
                  ) -> tuple[ImageData, ImageData, ImageData | None, list[np.ndarray] | None]:
    """Train, test, extra unlabeled images and predefined folds of a built-in dataset, through its reader."""
    name, size = info.name, info.image_size
    if name in ("cifar10", "cifar100"):
        train, test = (_load_cifar(info, root, ddir, train=t, download=download) for t in (True, False))
    elif name == "svhn":
        splits = ["train", "test"] + (["extra"] if svhn_extra else [])
        train, test, *more = (_load_svhn(info, root, ddir, s, splits, download) for s in splits)
        if more:
            train = ImageData(torch.cat([train.x, more[0].x]), torch.cat([train.y, more[0].y]))
    elif name == "stl10":
        return _load_stl10(info, root, ddir, download)
    elif name == "miniimagenet":
        train, test = _load_miniimagenet(info, root, ddir, size)
    elif name == "tinyimagenet":
        train, test = _load_tinyimagenet(info, root, ddir)
    else:
        train, test = _load_digits(info, ddir, size)
    return train, test, None, None


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
    info = _get_info(name)
    size = _resolve_image_size(info, image_size)
    ddir = dataset_dir(name, root)
    return {s: _cache_path(ddir, s, size) for s in _split_names(name, svhn_extra)}


def _split_names(name: str, svhn_extra: bool) -> list[str]:
    """The cached splits of a built-in dataset."""
    return [s for s in PUBLISHED_IMAGES.get(name, ("train", "test")) if svhn_extra or s != "extra"]


@dataclass(frozen=True)
class Footprint:
    """What a load holds in memory, known before any image is decoded (images are uint8 ``channels x size^2``)."""

    channels: int
    size: int
    splits: dict[str, int]  # split -> images, as cached
    train: int              # the training set the trainer indexes (SVHN's extra appended)
    unlabeled: int          # unlabeled-only images beside it (STL-10's unlabeled split, an image folder's unlabeled/)

    def nbytes(self, images: int) -> int:
        return images * self.channels * self.size * self.size

    @property
    def loaded_images(self) -> int:
        """Images in host memory once loaded: every split, plus SVHN's train and extra concatenated (a copy)."""
        return sum(self.splits.values()) + (self.train if "extra" in self.splits else 0)


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
    info = _get_info(name)
    size = _resolve_image_size(info, image_size)
    if name == "miniimagenet":
        splits = {s: _csv_rows(dataset_dir(name, root) / f"{s}.csv") for s in _split_names(name, svhn_extra)}
    else:
        splits = {s: PUBLISHED_IMAGES[name][s] for s in _split_names(name, svhn_extra)}
    return Footprint(info.channels, size, splits, splits["train"] + splits.get("extra", 0),
                     splits.get("unlabeled", 0))


def _csv_rows(path: Path) -> int:
    """Images a split CSV lists; 0 where it is missing or unreadable: a load with a cache does not read it, and
    one without names the problem itself."""
    try:
        return len(_read_csv_split(path)[0])
    except (OSError, ValueError, csv.Error):  # a UnicodeDecodeError is a ValueError
        return 0


def _with_normalization(info: DatasetInfo, normalization: str) -> DatasetInfo:
    if normalization == "correct":
        return info
    if info.released_mean is None or info.released_std is None:
        raise ValueError(f"data.normalization={normalization!r}: the released code has no {info.name} dataset; "
                         f"use `correct`")
    return dataclasses.replace(info, mean=info.released_mean, std=info.released_std)


# ----------------------------------------------------------------------------------------------------------------
# Argument checks


def _get_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise ValueError(f"data.dataset: unknown dataset {name!r}; allowed: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def _resolve_image_size(info: DatasetInfo, image_size: int | None) -> int:
    if image_size is None:
        return info.image_size
    if isinstance(image_size, bool) or not isinstance(image_size, int):
        raise ValueError(f"data.image_size must be an integer, got {image_size!r}")
    if info.name == "miniimagenet":
        if image_size < 16:
            raise ValueError(f"data.image_size for miniimagenet must be >= 16, got {image_size}")
    elif info.name == "digits":
        if image_size < 8:
            raise ValueError(f"data.image_size for digits must be >= 8 (the images are 8x8; we only upscale), "
                             f"got {image_size}")
    elif image_size != info.image_size:
        raise ValueError(f"data.image_size for {info.name} must be its native {info.image_size} (or unset), "
                         f"got {image_size}; only miniimagenet and digits are resized")
    return image_size


def _scaled_pad(name: str, size: int) -> int:
    """Crop padding for a non-default size: the released mini-ImageNet code pads int(0.125 * size)."""
    if name == "miniimagenet":
        return int(size * 0.125)
    return max(1, size // 8)  # digits: 12.5 % of the side, as for the default 16 -> 2


def _check_decoded(info: DatasetInfo, split: str, data: ImageData) -> None:
    """Catch files that decode but do not belong to this dataset (wrong channels, size or label range)."""
    _, c, h, w = data.x.shape
    if (c, h, w) != (info.channels, info.image_size, info.image_size):
        raise ValueError(f"{info.name} {split}: decoded images are {c}x{h}x{w}, expected "
                         f"{info.channels}x{info.image_size}x{info.image_size}")
    if len(data) and (int(data.y.min()) < 0 or int(data.y.max()) >= info.num_classes):
        raise ValueError(f"{info.name} {split}: labels must lie in [0, {info.num_classes}), found "
                         f"[{int(data.y.min())}, {int(data.y.max())}]")


def _missing_error(info: DatasetInfo, root: Path, ddir: Path, missing: Sequence[Path]) -> FileNotFoundError:
    shown = ", ".join(str(p) for p in missing[:4]) + (f" (+{len(missing) - 4} more)" if len(missing) > 4 else "")
    return FileNotFoundError(f"{info.name}: dataset files not found under {ddir} (data root {root}); missing: "
                             f"{shown}. {info.download_hint}")


def torchvision_files(name: str, svhn_extra: bool = False) -> list[tuple[str, str | None]]:
    """(path relative to the dataset folder, published md5 or None) of every file torchvision reads for ``name``
    (CIFAR-10/100, SVHN, STL-10), as its classes declare them."""
    if name in ("cifar10", "cifar100"):
        cls = CIFAR10 if name == "cifar10" else CIFAR100
        pairs = [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]
        return [(f"{cls.base_folder}/{f}", md5) for f, md5 in pairs]
    if name == "svhn":
        return [(SVHN.split_list[s][1], SVHN.split_list[s][2]) for s in svhn_splits(svhn_extra)]
    if name == "stl10":
        pairs = [*STL10.train_list, *STL10.test_list, (STL10.class_names_file, None), (STL10.folds_list_file, None)]
        return [(f"{STL10.base_folder}/{f}", md5) for f, md5 in pairs]
    raise ValueError(f"{name}: not a torchvision dataset (torchvision_files covers cifar10, cifar100, svhn, stl10)")


def verify_published_md5s(name: str, ddir: Path, svhn_extra: bool = False, only: Sequence[str] | None = None
                          ) -> None:
    """Raise :class:`DatasetError` naming the first present file of ``name`` under ``ddir`` (of ``only``, relative
    paths, when given) whose bytes do not match torchvision's published md5; a missing file is not checked here.

    Nothing read from a data folder is unpickled before this passes (a crafted CIFAR meta file is code)."""
    bad = [(rel, md5) for rel, md5 in torchvision_files(name, svhn_extra) if (only is None or rel in only)
           and md5 is not None and (ddir / rel).is_file() and not check_integrity(str(ddir / rel), md5)]
    if bad:
        more = f" (and {len(bad) - 1} more file(s))" if len(bad) > 1 else ""
        raise DatasetError(f"{name}: {ddir / bad[0][0]} does not match its published md5 {bad[0][1]}{more}: a "
                           "corrupted or partial download; delete it and load again with data.download: true")


def svhn_splits(svhn_extra: bool) -> list[str]:
    return ["train", "test"] + (["extra"] if svhn_extra else [])


def _open_torchvision(info: DatasetInfo, root: Path, ddir: Path, required: Sequence[str], factory: Callable, *,
                      download: bool, svhn_extra: bool = False):
    """Construct a torchvision dataset, turning its generic errors into one precise line.

    torchvision raises ``RuntimeError("Dataset not found or corrupted")`` both for missing files and for files
    that fail the md5 check; we tell the two apart so the user gets either the download hint or the corrupted file.
    A download that cannot reach the network says to fetch the files elsewhere and where to put them.
    """
    try:
        return factory()
    except RuntimeError as err:
        missing = [ddir / p for p in required if not (ddir / p).is_file()]
        if missing:
            raise _missing_error(info, root, ddir, missing) from err
        verify_published_md5s(info.name, ddir, svhn_extra)
        raise DatasetError(f"{info.name}: torchvision rejected the files under {ddir} ({' '.join(str(err).split())})"
                           ": a corrupted or partial download; delete it and load again with data.download: true"
                           ) from None
    except OSError as err:  # URLError, a refused connection, a DNS failure: only a download reaches the network
        if not download:
            raise
        reason = " ".join(str(getattr(err, "reason", None) or err).split())
        layout = sorted({rel.split("/")[0] + ("/" if "/" in rel else "") for rel, _ in
                         torchvision_files(info.name, svhn_extra)})
        raise DatasetError(f"{info.name}: data.download=true could not fetch the files ({reason}); without network "
                           f"access, download them on a machine that has it (`python -m mutexmatch.datasets download "
                           f"{info.name} --root DIR`) and copy {', '.join(layout)} into {ddir}") from None


# ----------------------------------------------------------------------------------------------------------------
# Cache


def _cache_path(ddir: Path, split: str, size: int) -> Path:
    return ddir / CACHE_DIRNAME / f"{split}_{size}px.pt"


def _cached(path: Path, decode: Callable[[], dict], check: Callable[[dict], None]) -> dict:
    """Return the payload cached at ``path``, or decode it, cache it and return it.

    A cache that cannot be read, differs from the checksum written beside it or fails ``check`` is re-decoded
    (with a warning) instead of failing the run; a cache that cannot be written (read-only data root) only costs a
    warning.
    """
    if path.is_file():
        try:
            verify_checksum(path)
            payload = torch.load(path, weights_only=True, mmap=True)
            if not isinstance(payload, dict) or payload.get("format") != _CACHE_FORMAT:
                raise ValueError(f"not a format-{_CACHE_FORMAT} dataset cache")
            check(payload)
            return payload
        except (RuntimeError, OSError, ValueError, EOFError, pickle.UnpicklingError) as err:
            warnings.warn(f"ignoring unreadable dataset cache {path} ({err}); decoding the raw files again",
                          stacklevel=3)
    payload = {"format": _CACHE_FORMAT, **decode()}
    check(payload)
    try:
        _atomic_save(payload, path)
    except OSError as err:
        warnings.warn(f"could not write dataset cache {path} ({err}); the next load will decode again",
                      stacklevel=3)
    return payload


def _atomic_save(payload: dict, path: Path) -> None:
    # 0644: the cache is meant to be shared by every user of the data. The checksum is written after the cache, so a
    # kill in between leaves a cache without one, which the next load decodes again.
    atomic_write(path, lambda f: torch.save(payload, f), mode=0o644)
    atomic_write(checksum_path(path), sha256_file(path).encode(), mode=0o644)


def checksum_path(cache: Path) -> Path:
    """The file beside a cache holding the sha256 of its bytes (hex, as beside a checkpoint)."""
    return cache.with_name(cache.name + CHECKSUM_SUFFIX)


def verify_checksum(cache: Path) -> None:
    """Raise ``ValueError`` unless the cache's bytes still have the sha256 recorded beside it (bit-rot, a partial
    copy or an edit change it; a cache without one predates the checksums or lost its writer mid-way)."""
    side = checksum_path(cache)
    try:
        recorded = side.read_text().split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        raise ValueError(f"no readable checksum {side.name} beside it") from None
    actual = sha256_file(cache)
    if actual != recorded:
        raise ValueError(f"its sha256 {actual[:16]}... differs from the {recorded[:16]}... recorded in {side.name}: "
                         "the file changed on disk")


def _check_images(payload: dict) -> None:
    ImageData(payload["x"], payload["y"])  # raises ValueError on wrong dtype/shape


def _cached_images(path: Path, decode: Callable[[], ImageData]) -> ImageData:
    def as_payload() -> dict:
        data = decode()
        return {"x": data.x, "y": data.y}

    payload = _cached(path, as_payload, _check_images)
    return ImageData(payload["x"], payload["y"])


def _to_nchw(hwc_or_nchw: np.ndarray, channels_last: bool) -> torch.Tensor:
    t = torch.from_numpy(np.asarray(hwc_or_nchw))
    if channels_last:
        t = t.permute(0, 3, 1, 2)
    return t.contiguous()


# ----------------------------------------------------------------------------------------------------------------
# torchvision datasets


def _load_cifar(info: DatasetInfo, root: Path, ddir: Path, *, train: bool, download: bool) -> ImageData:
    cls = CIFAR10 if info.name == "cifar10" else CIFAR100
    required = [f"{cls.base_folder}/{f}" for f, _ in cls.train_list + cls.test_list]
    required.append(f"{cls.base_folder}/{cls.meta['filename']}")

    def decode() -> ImageData:
        ds = _open_torchvision(info, root, ddir, required, lambda: cls(str(ddir), train=train, download=download),
                               download=download)
        # torchvision keeps CIFAR as HWC (N, 32, 32, 3); its labels are a list of ints.
        return ImageData(_to_nchw(ds.data, channels_last=True), torch.as_tensor(ds.targets, dtype=torch.int64))

    return _cached_images(_cache_path(ddir, "train" if train else "test", info.image_size), decode)


def _load_svhn(info: DatasetInfo, root: Path, ddir: Path, split: str, needed: Sequence[str], download: bool
               ) -> ImageData:
    def decode() -> ImageData:
        required = [SVHN.split_list[s][1] for s in needed]  # so a missing-files error lists all of them at once
        ds = _open_torchvision(info, root, ddir, required, lambda: SVHN(str(ddir), split=split, download=download),
                               download=download, svhn_extra="extra" in needed)
        # torchvision already maps SVHN's label 10 to digit 0 and transposes X (32, 32, 3, N) to (N, 3, 32, 32).
        return ImageData(_to_nchw(ds.data, channels_last=False), torch.from_numpy(ds.labels.astype(np.int64)))

    return _cached_images(_cache_path(ddir, split, info.image_size), decode)


def _load_stl10(info: DatasetInfo, root: Path, ddir: Path, download: bool
                ) -> tuple[ImageData, ImageData, ImageData, list[np.ndarray]]:
    required = [f"{STL10.base_folder}/{f}" for f, _ in STL10.train_list + STL10.test_list]

    def decoder(split: str) -> Callable[[], ImageData]:
        def decode() -> ImageData:
            ds = _open_torchvision(info, root, ddir, required,
                                   lambda: STL10(str(ddir), split=split, download=download), download=download)
            x = _to_nchw(ds.data, channels_last=False)
            if split == "unlabeled":
                y = torch.full((len(x),), -1, dtype=torch.int64)
            else:  # torchvision already shifts the on-disk labels 1..10 to 0..9
                y = torch.from_numpy(ds.labels.astype(np.int64))
            return ImageData(x, y)
        return decode

    train, test, unlabeled = (_cached_images(_cache_path(ddir, s, info.image_size), decoder(s))
                              for s in ("train", "test", "unlabeled"))

    folds_file = ddir / STL10.base_folder / STL10.folds_list_file

    def decode_folds() -> dict:
        if not folds_file.is_file():
            raise _missing_error(info, root, ddir, [folds_file])
        # The same parse torchvision's STL10(folds=i) applies to line i: whitespace-separated 0-based indices.
        lines = [ln for ln in folds_file.read_text().splitlines() if ln.strip()]
        return {"folds": [torch.tensor([int(v) for v in ln.split()], dtype=torch.int64) for ln in lines]}

    def check_folds(payload: dict) -> None:
        for i, f in enumerate(payload["folds"]):
            if f.dtype != torch.int64 or f.dim() != 1 or (len(f) and (f.min() < 0 or f.max() >= len(train))):
                raise ValueError(f"stl10: fold {i} of {folds_file} holds indices outside [0, {len(train)})")

    folds = _cached(ddir / CACHE_DIRNAME / "folds.pt", decode_folds, check_folds)["folds"]
    return train, test, unlabeled, [f.numpy().copy() for f in folds]


# ----------------------------------------------------------------------------------------------------------------
# Image-file datasets


def _decode_files(paths: Sequence[Path], size: int, prepare: Callable[[Image.Image], Image.Image]) -> torch.Tensor:
    out = torch.empty((len(paths), 3, size, size), dtype=torch.uint8)
    for i, path in enumerate(paths):
        with Image.open(path) as img:
            arr = np.array(prepare(img.convert("RGB")))  # a writable copy: torch warns on read-only arrays
        if arr.shape != (size, size, 3):
            raise ValueError(f"{path}: image is {arr.shape[1]}x{arr.shape[0]} after preprocessing, expected "
                             f"{size}x{size}")
        out[i] = torch.from_numpy(arr).permute(2, 0, 1)
    return out


def _read_csv_split(path: Path) -> tuple[list[str], list[str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if "filename" not in fields or "label" not in fields:
            raise ValueError(f"{path}: needs the columns filename,label; found {','.join(fields) or 'none'}")
        rows = [(r["filename"], r["label"]) for r in reader]
    return [r[0] for r in rows], [r[1] for r in rows]


def _class_order(names: Sequence[str]) -> list[str]:
    """Sorted class names; numeric labels (the released code's CSVs use 0..99) sort as numbers, not strings."""
    unique = set(names)
    if all(n.strip().lstrip("-").isdigit() for n in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def _load_miniimagenet(info: DatasetInfo, root: Path, ddir: Path, size: int) -> tuple[ImageData, ImageData]:
    """mini-ImageNet from a CSV split, preprocessed as the released code does: Resize(size, LANCZOS) of the
    shorter side, then CenterCrop(size)."""
    required = [ddir / "train.csv", ddir / "test.csv", ddir / "images"]

    def prepare(img: Image.Image) -> Image.Image:
        return TF.center_crop(TF.resize(img, size, interpolation=InterpolationMode.LANCZOS), [size, size])

    classes: list[str] | None = None

    def decoder(split: str) -> Callable[[], ImageData]:
        def decode() -> ImageData:
            nonlocal classes
            missing = [p for p in required if not p.exists()]
            if missing:
                raise _missing_error(info, root, ddir, missing)
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
            x = _decode_files([ddir / "images" / f for f in files], size, prepare)
            return ImageData(x, torch.tensor([index[lab] for lab in labels], dtype=torch.int64))
        return decode

    return (_cached_images(_cache_path(ddir, "train", size), decoder("train")),
            _cached_images(_cache_path(ddir, "test", size), decoder("test")))


def _load_tinyimagenet(info: DatasetInfo, root: Path, ddir: Path) -> tuple[ImageData, ImageData]:
    """Tiny-ImageNet: train through ``ImageFolder`` (class index = position among the sorted wnids, images sorted
    by file name, as in the released code); val from ``val_annotations.txt`` in sorted file-name order."""
    size = info.image_size
    annotations = ddir / "val" / "val_annotations.txt"
    required = [ddir / "train", ddir / "val" / "images", annotations]

    def check_files() -> None:
        missing = [p for p in required if not p.exists()]
        if missing:
            raise _missing_error(info, root, ddir, missing)

    def train_folder() -> ImageFolder:
        check_files()
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

    def decode_train() -> ImageData:
        folder = train_folder()
        x = _decode_files([Path(p) for p, _ in folder.samples], size, lambda im: im)
        return ImageData(x, torch.tensor(folder.targets, dtype=torch.int64))

    def decode_val() -> ImageData:
        class_to_idx = train_folder().class_to_idx
        entries: dict[str, str] = {}
        for line in annotations.read_text().splitlines():
            if line.strip():
                fields = line.split("\t")
                entries[fields[0]] = fields[1]
        unknown = sorted(set(entries.values()) - class_to_idx.keys())
        if unknown:
            raise ValueError(f"tinyimagenet: {annotations} names wnids without a train folder: {unknown[:5]}")
        files = sorted(entries)
        x = _decode_files([ddir / "val" / "images" / f for f in files], size, lambda im: im)
        return ImageData(x, torch.tensor([class_to_idx[entries[f]] for f in files], dtype=torch.int64))

    return (_cached_images(_cache_path(ddir, "train", size), decode_train),
            _cached_images(_cache_path(ddir, "test", size), decode_val))


# ----------------------------------------------------------------------------------------------------------------
# digits


def _load_digits(info: DatasetInfo, ddir: Path, size: int) -> tuple[ImageData, ImageData]:
    """scikit-learn's 1,797 8x8 digits as a fixed split of 1,300 train / 497 test images.

    The split is ``train_test_split(test_size=497, stratify=y, random_state=0)``; both parts are kept in the
    original order of ``load_digits``. Pixel values 0..16 become ``round(v * 255 / 16)`` and are upscaled with
    nearest-exact interpolation, which at integer factors replicates pixels and so keeps every grey level and the
    dataset statistics exactly.
    """
    def decode_all() -> tuple[ImageData, ImageData]:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        x = torch.from_numpy(np.rint(digits.images * (255 / 16)).astype(np.uint8)).unsqueeze(1)
        if size != x.shape[-1]:
            x = F.interpolate(x, size=(size, size), mode="nearest-exact")
        y = torch.from_numpy(digits.target.astype(np.int64))
        train_idx, test_idx = train_test_split(np.arange(len(y)), test_size=DIGITS_NUM_TEST, stratify=digits.target,
                                               random_state=_DIGITS_SPLIT_SEED)
        assert (len(train_idx), len(test_idx)) == (DIGITS_NUM_TRAIN, DIGITS_NUM_TEST)
        parts = []
        for idx in (np.sort(train_idx), np.sort(test_idx)):
            t = torch.from_numpy(idx)
            parts.append(ImageData(x[t].contiguous(), y[t]))
        return parts[0], parts[1]

    decoded: tuple[ImageData, ImageData] | None = None

    def decoder(i: int) -> Callable[[], ImageData]:
        def decode() -> ImageData:
            nonlocal decoded
            if decoded is None:
                decoded = decode_all()
            return decoded[i]
        return decode

    return (_cached_images(_cache_path(ddir, "train", size), decoder(0)),
            _cached_images(_cache_path(ddir, "test", size), decoder(1)))


# ----------------------------------------------------------------------------------------------------------------
# Your own image folders (rules in mutexmatch/imagefolder.py)


def _imagefolder_cache_path(ddir: Path, index: imagefolder.FolderIndex, split: str, size: int) -> Path:
    return ddir / CACHE_DIRNAME / f"{split}_{size}px_{index.content_key(split, size)}.pt"


def _load_imagefolder(root: Path, image_size: int | None) -> DatasetBundle:
    index = imagefolder.scan_folder(root)
    size = image_size or imagefolder.infer_image_size(index)
    paths = {s: _imagefolder_cache_path(root, index, s, size) for s in index.files}
    todo = {s: len(index.files[s]) for s, p in paths.items() if not p.is_file()}
    if todo:
        imagefolder.check_disk(root / CACHE_DIRNAME, todo, size)
    data = {}
    for split, path in paths.items():
        def decode(split: str = split) -> dict:
            x = imagefolder.decode_images([root / split / rel for rel, _ in index.files[split]], size)
            y = torch.tensor([label for _, label in index.files[split]], dtype=torch.int64)
            stats = imagefolder.channel_stats(x) if split == "train" else ((), ())
            return {"x": x, "y": y, "mean": torch.tensor(stats[0], dtype=torch.float64),
                    "std": torch.tensor(stats[1], dtype=torch.float64)}

        payload = _cached(path, decode, _check_images)
        for stale in path.parent.glob(f"{split}_{size}px_*.pt"):
            if stale != path:  # superseded by an edit of the folder
                stale.unlink(missing_ok=True)
                checksum_path(stale).unlink(missing_ok=True)
        data[split] = payload
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


if __name__ == "__main__":
    from mutexmatch.datasets_cli import main

    raise SystemExit(main())
