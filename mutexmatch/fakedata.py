"""Tiny generated datasets in the real on-disk formats, for smoke runs and tests without the real data.

Every writer produces exactly the files :func:`mutexmatch.datasets.load_dataset` reads for the real dataset, in the
layout of the data root (``<root>/cifar10/cifar-10-batches-py/…``, ``<root>/svhn/train_32x32.mat``,
``<root>/stl10/stl10_binary/…``, ``<root>/miniimagenet/{train,test}.csv + images/``,
``<root>/tiny-imagenet-200/…``), filled with random pixels and class-balanced labels. The default sizes are the
smallest that still hold every labeled-set size the experiment YAMLs use (e.g. CIFAR-100 with 10,000 labels needs
100 train images per class; STL-10 with 5,000 labels needs its 5,000 labeled train images and 1,000-image folds).

torchvision verifies the published md5 of CIFAR, SVHN and STL-10 files, which generated files cannot match.
:func:`write_fake_root` therefore decodes each written dataset once inside :func:`generated_checksums_accepted`
(torchvision's own integrity check, bypassed for that call only), which leaves the dataset caches that every later
load — including trials running in other processes, e.g. Ray workers — reads without touching torchvision.

    python -m mutexmatch.fakedata /tmp/fake-data            # all datasets at the default sizes
"""

from __future__ import annotations

import argparse
import contextlib
import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["FakeSize", "FAKE_SIZES", "FAKE_DATASETS", "generated_checksums_accepted", "write_fake_dataset",
           "write_fake_imagefolder", "write_fake_root"]


@dataclass(frozen=True)
class FakeSize:
    """Images per class in the train and test splits (STL-10 also has an unlabeled split)."""

    train_per_class: int
    test_per_class: int
    unlabeled: int = 0


# The smallest sizes that hold every labeled-set size used by experiments/*.yaml (see the module docstring).
FAKE_SIZES: dict[str, FakeSize] = {
    "cifar10": FakeSize(400, 2),       # 4,000 labels
    "cifar100": FakeSize(100, 2),      # 10,000 labels
    "svhn": FakeSize(25, 2),           # 250 labels
    "stl10": FakeSize(500, 2, 20),     # 5,000 labels = every labeled train image; folds of 1,000
    "miniimagenet": FakeSize(10, 1),   # 1,000 labels
    "tinyimagenet": FakeSize(25, 1),   # 5,000 labels
}
FAKE_DATASETS = tuple(FAKE_SIZES)
_NUM_CLASSES = {"cifar10": 10, "cifar100": 100, "svhn": 10, "stl10": 10, "miniimagenet": 100, "tinyimagenet": 200}
_STL10_FOLDS = 10          # fold_indices.txt of the real STL-10 has ten lines
_MINI_SIDE = 84            # stored larger than the 80 px it is loaded at, so the resize + center crop really runs


def _balanced_labels(rng: np.random.Generator, num_classes: int, per_class: int) -> np.ndarray:
    """``per_class`` images of every class, in shuffled order (as in the real files)."""
    return rng.permutation(np.repeat(np.arange(num_classes), per_class))


def _pixels(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _pickle(path: Path, obj: object) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


def _write_cifar(root: Path, name: str, size: FakeSize, rng: np.random.Generator) -> Path:
    """CIFAR python batches: pickles with ``data`` uint8 (N, 3072) laid out as 1024 R, 1024 G, 1024 B."""
    c100 = name == "cifar100"
    folder = root / name / ("cifar-100-python" if c100 else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    num_classes = _NUM_CLASSES[name]
    key = "fine_labels" if c100 else "labels"
    train_y = _balanced_labels(rng, num_classes, size.train_per_class)
    batches = ["train"] if c100 else [f"data_batch_{i}" for i in range(1, 6)]
    for name_b, labels in zip(batches, np.array_split(train_y, len(batches))):
        entry = {"batch_label": name_b, "data": _pixels(rng, (len(labels), 3072)), key: labels.tolist(),
                 "filenames": [f"{name_b}_{i}.png" for i in range(len(labels))]}
        if c100:
            entry["coarse_labels"] = (labels // 5).tolist()
        _pickle(folder / name_b, entry)
    test_y = _balanced_labels(rng, num_classes, size.test_per_class)
    test = {"batch_label": "test", "data": _pixels(rng, (len(test_y), 3072)), key: test_y.tolist()}
    if c100:
        test["coarse_labels"] = (test_y // 5).tolist()
        _pickle(folder / "meta", {"fine_label_names": [f"c{i}" for i in range(100)],
                                  "coarse_label_names": [f"s{i}" for i in range(20)]})
    else:
        _pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_vis": 3072})
    _pickle(folder / ("test" if c100 else "test_batch"), test)
    return folder


def _write_svhn(root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
    """SVHN ``{split}_32x32.mat``: X (32, 32, 3, N) = (H, W, C, N), y (N, 1) in 1..10, where 10 means digit 0."""
    import scipy.io

    folder = root / "svhn"
    folder.mkdir(parents=True, exist_ok=True)
    for split, per_class in (("train", size.train_per_class), ("test", size.test_per_class)):
        digits = _balanced_labels(rng, 10, per_class)
        y = np.where(digits == 0, 10, digits).astype(np.uint8)[:, None]
        scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": _pixels(rng, (32, 32, 3, len(y))), "y": y})
    return folder


def _write_stl10(root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
    """STL-10 binaries: every image stored channel by channel, each channel column-major; labels 1..10 as uint8;
    ``fold_indices.txt`` with ten lines of 0-based train indices (each fold a fifth of the train images)."""
    folder = root / "stl10" / "stl10_binary"
    folder.mkdir(parents=True, exist_ok=True)

    def images(path: Path, n: int) -> None:
        # (N, C, H, W) random pixels; the on-disk order is (N, C, W, H) in C order (column-major channels).
        path.write_bytes(np.ascontiguousarray(_pixels(rng, (n, 3, 96, 96)).transpose(0, 1, 3, 2)).tobytes())

    train_y = _balanced_labels(rng, 10, size.train_per_class)
    test_y = _balanced_labels(rng, 10, size.test_per_class)
    images(folder / "train_X.bin", len(train_y))
    images(folder / "test_X.bin", len(test_y))
    images(folder / "unlabeled_X.bin", size.unlabeled)
    (folder / "train_y.bin").write_bytes((train_y + 1).astype(np.uint8).tobytes())
    (folder / "test_y.bin").write_bytes((test_y + 1).astype(np.uint8).tobytes())
    fold_size = len(train_y) // 5
    folds = [rng.choice(len(train_y), fold_size, replace=False) for _ in range(_STL10_FOLDS)]
    (folder / "fold_indices.txt").write_text("".join(" ".join(map(str, f)) + " \n" for f in folds))
    (folder / "class_names.txt").write_text("".join(f"class{i}\n" for i in range(10)))
    return folder


def _save_images(rng: np.random.Generator, paths: Sequence[Path], side: int) -> None:
    from PIL import Image

    for path in paths:
        Image.fromarray(_pixels(rng, (side, side, 3))).save(path)


def _write_miniimagenet(root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
    """mini-ImageNet CSV split: ``train.csv``/``test.csv`` (columns filename,label; labels are wnids) and the PNG
    files in ``images/``."""
    folder = root / "miniimagenet"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    wnids = [f"n{1_000_000 + 37 * c:08d}" for c in range(_NUM_CLASSES["miniimagenet"])]
    for split, per_class in (("train", size.train_per_class), ("test", size.test_per_class)):
        labels = _balanced_labels(rng, len(wnids), per_class)
        files = [f"{split}_{i:06d}.png" for i in range(len(labels))]
        (folder / f"{split}.csv").write_text(
            "filename,label\n" + "".join(f"{f},{wnids[c]}\n" for f, c in zip(files, labels)))
        _save_images(rng, [folder / "images" / f for f in files], _MINI_SIDE)
    return folder


def _write_tinyimagenet(root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
    """Tiny-ImageNet tree: ``wnids.txt``, ``train/<wnid>/images/<wnid>_<i>.JPEG`` and ``val/images`` with
    ``val/val_annotations.txt`` (file, wnid, box)."""
    folder = root / "tiny-imagenet-200"
    folder.mkdir(parents=True, exist_ok=True)
    wnids = [f"n{2_000_000 + 53 * c:08d}" for c in range(_NUM_CLASSES["tinyimagenet"])]
    (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
    for w in wnids:
        images = folder / "train" / w / "images"
        images.mkdir(parents=True, exist_ok=True)
        files = [f"{w}_{i}.JPEG" for i in range(size.train_per_class)]
        (folder / "train" / w / f"{w}_boxes.txt").write_text("".join(f"{f}\t0\t0\t63\t63\n" for f in files))
        _save_images(rng, [images / f for f in files], 64)
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    labels = _balanced_labels(rng, len(wnids), size.test_per_class)
    files = [f"val_{i}.JPEG" for i in range(len(labels))]
    _save_images(rng, [folder / "val" / "images" / f for f in files], 64)
    (folder / "val" / "val_annotations.txt").write_text(
        "".join(f"{f}\t{wnids[c]}\t0\t0\t63\t63\n" for f, c in zip(files, labels)))
    return folder


@contextlib.contextmanager
def generated_checksums_accepted() -> Iterator[None]:
    """Within the block, torchvision accepts CIFAR/SVHN/STL-10 files whose md5 differs from the published one
    (generated files cannot match it) and refuses to download anything; restored on exit."""
    from unittest import mock

    import torchvision.datasets.cifar
    import torchvision.datasets.stl10
    import torchvision.datasets.svhn

    def no_download(*args: object, **kwargs: object) -> None:
        raise RuntimeError("mutexmatch.fakedata: generated datasets are never downloaded")

    with contextlib.ExitStack() as stack:
        for module in (torchvision.datasets.cifar, torchvision.datasets.svhn, torchvision.datasets.stl10):
            stack.enter_context(mock.patch.object(module, "check_integrity", lambda *a, **k: True))
            for fn in ("download_url", "download_and_extract_archive"):
                if hasattr(module, fn):
                    stack.enter_context(mock.patch.object(module, fn, no_download))
        yield


def write_fake_dataset(name: str, root: str | Path, size: FakeSize | None = None, *, seed: int = 0) -> Path:
    """Write dataset ``name`` (one of :data:`FAKE_DATASETS`) below the data root ``root``; return its folder.

    ``size`` defaults to ``FAKE_SIZES[name]``. Raises ``ValueError`` for an unknown name or a size that cannot
    form the dataset (no train or test image per class).
    """
    if name not in FAKE_SIZES:
        raise ValueError(f"name={name!r}: must be one of {', '.join(FAKE_DATASETS)} (digits needs no files)")
    size = FAKE_SIZES[name] if size is None else size
    if not isinstance(size, FakeSize) or size.train_per_class < 1 or size.test_per_class < 1 or size.unlabeled < 0:
        raise ValueError(f"size={size!r}: needs train_per_class >= 1, test_per_class >= 1, unlabeled >= 0")
    root = Path(root)
    rng = np.random.default_rng(seed)
    if name in ("cifar10", "cifar100"):
        return _write_cifar(root, name, size, rng)
    if name == "svhn":
        return _write_svhn(root, size, rng)
    if name == "stl10":
        return _write_stl10(root, size, rng)
    if name == "miniimagenet":
        return _write_miniimagenet(root, size, rng)
    return _write_tinyimagenet(root, size, rng)


def write_fake_imagefolder(folder: str | Path, *, num_classes: int = 10, train_per_class: int = 30,
                           test_per_class: int = 2, val_per_class: int = 0, unlabeled: int = 0, side: int = 32,
                           seed: int = 0) -> Path:
    """Write an ``imagefolder`` dataset (``mutexmatch/imagefolder.py``) of random RGB PNGs at ``folder``.

    Classes are named ``class_00`` … so that their sorted order is their label order; ``val/`` and ``unlabeled/``
    are written only when asked for. Returns ``folder`` as an absolute path.
    """
    from PIL import Image

    folder = Path(folder).expanduser().resolve()
    rng = np.random.default_rng(seed)
    counts = {"train": train_per_class, "test": test_per_class, "val": val_per_class}
    for split, per_class in counts.items():
        for c in range(num_classes if per_class else 0):
            cdir = folder / split / f"class_{c:02d}"
            cdir.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.fromarray(_pixels(rng, (side, side, 3))).save(cdir / f"{i:05d}.png")
    if unlabeled:
        (folder / "unlabeled").mkdir(parents=True, exist_ok=True)
        for i in range(unlabeled):
            Image.fromarray(_pixels(rng, (side, side, 3))).save(folder / "unlabeled" / f"{i:05d}.png")
    return folder


def write_fake_root(root: str | Path, names: Sequence[str] = FAKE_DATASETS, *,
                    sizes: Mapping[str, FakeSize] | None = None, seed: int = 0, decode: bool = True) -> Path:
    """Write every dataset in ``names`` below ``root`` (created if needed) and return ``root`` as an absolute path.

    ``sizes`` overrides :data:`FAKE_SIZES` per dataset. With ``decode`` (default) each dataset is loaded once
    through :func:`mutexmatch.datasets.load_dataset` with torchvision's md5 check bypassed, so the real readers
    parse the generated files and leave the caches that later loads use.
    """
    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    sizes = dict(sizes or {})
    unknown = sorted(set(names) - set(FAKE_SIZES)) + sorted(set(sizes) - set(FAKE_SIZES))
    if unknown:
        raise ValueError(f"names/sizes: unknown dataset(s) {unknown}; allowed: {', '.join(FAKE_DATASETS)}")
    for i, name in enumerate(names):
        write_fake_dataset(name, root, sizes.get(name), seed=seed + i)
    if decode:
        from mutexmatch.datasets import load_dataset

        with generated_checksums_accepted():
            for name in names:
                load_dataset(name, root)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutexmatch.fakedata", description=__doc__.splitlines()[0])
    parser.add_argument("root", help="data root to write (e.g. /tmp/fake-data); use it as data.root")
    parser.add_argument("--datasets", default=",".join(FAKE_DATASETS),
                        help=f"comma-separated subset of {','.join(FAKE_DATASETS)}")
    parser.add_argument("--test-per-class", type=int, default=None,
                        help="test images per class for every dataset (default: each dataset's FAKE_SIZES value)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    sizes = None
    if args.test_per_class is not None:
        sizes = {n: FakeSize(FAKE_SIZES[n].train_per_class, args.test_per_class, FAKE_SIZES[n].unlabeled)
                 for n in names if n in FAKE_SIZES}
    try:
        root = write_fake_root(args.root, names, sizes=sizes)
    except ValueError as e:
        parser.error(str(e))
    print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
