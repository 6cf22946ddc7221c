"""Tiny generated datasets in the real on-disk formats, for smoke runs and tests without the real data.

Every registered dataset with a ``fake_size`` writes exactly the files its reader reads for the real dataset
(``BuiltinDataset.write_fake``), in the layout of the data root (``<root>/cifar10/cifar-10-batches-py/…``,
``<root>/svhn/train_32x32.mat``, …), filled with random pixels and class-balanced labels. The default sizes are the
smallest that still hold every labeled-set size the experiment YAMLs use (e.g. CIFAR-100 with 10,000 labels needs
100 train images per class; STL-10 with 5,000 labels needs its 5,000 labeled train images and 1,000-image folds).

torchvision verifies the published md5 of the files it reads, which generated files cannot match.
:func:`write_fake_root` therefore decodes each written dataset once inside :func:`generated_checksums_accepted`
(torchvision's own integrity check, bypassed for that call only), which leaves the dataset caches that every later
load — including trials running in other processes, e.g. Ray workers — reads without touching torchvision.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.cache import CACHE_DIRNAME
from mutexmatch.data.fakefill import pixels
from mutexmatch.data.registry import FakeSize, listed
from mutexmatch.data.torchvision_reader import TorchvisionDataset
from mutexmatch.data.written import foreign_files, has_manifest, record_written, shown

__all__ = ["FakeSize", "FAKE_DATASETS", "generated_checksums_accepted", "write_fake_dataset",
           "write_fake_imagefolder", "write_fake_root"]

# The datasets that have files to generate (digits needs none), in listing order.
FAKE_DATASETS: tuple[str, ...] = tuple(d.name for d in listed(list(DATASETS.values())) if d.fake_size is not None)


@contextlib.contextmanager
def generated_checksums_accepted() -> Iterator[None]:
    """Within the block, torchvision accepts the files of the datasets it reads whose md5 differs from the
    published one (generated files cannot match it) and refuses to download anything; restored on exit."""
    from unittest import mock

    modules = {sys.modules[d.tv_class.__module__] for d in DATASETS.values() if isinstance(d, TorchvisionDataset)}

    def no_download(*args: object, **kwargs: object) -> None:
        raise RuntimeError("mutexmatch.fakedata: generated datasets are never downloaded")

    with contextlib.ExitStack() as stack:
        for module in sorted(modules, key=lambda m: m.__name__):
            stack.enter_context(mock.patch.object(module, "check_integrity", lambda *a, **k: True))
            for fn in ("download_url", "download_and_extract_archive"):
                if hasattr(module, fn):
                    stack.enter_context(mock.patch.object(module, fn, no_download))
        yield


def write_fake_dataset(name: str, root: str | Path, size: FakeSize | None = None, *, seed: int = 0) -> Path:
    """Write dataset ``name`` (one of :data:`FAKE_DATASETS`) below the data root ``root``; return its folder.

    ``size`` defaults to the dataset's ``fake_size``. Raises ``ValueError`` for an unknown name or a size that
    cannot form the dataset (no train or test image per class), and, before writing anything, for a dataset folder
    holding files it did not write (:func:`refuse_foreign_files`).
    """
    if name not in FAKE_DATASETS:
        raise ValueError(f"name={name!r}: must be one of {', '.join(FAKE_DATASETS)} (digits needs no files)")
    dataset = DATASETS[name]
    size = dataset.fake_size if size is None else size
    if not isinstance(size, FakeSize) or size.train_per_class < 1 or size.test_per_class < 1 or size.unlabeled < 0:
        raise ValueError(f"size={size!r}: needs train_per_class >= 1, test_per_class >= 1, unlabeled >= 0")
    folder = Path(root) / dataset.folder
    refuse_foreign_files(folder)
    try:
        return dataset.write_fake(Path(root), size, np.random.default_rng(seed))
    finally:  # files written before a failure (a full disk) are its own too: a rerun may write over them
        if folder.is_dir():
            record_written(folder, _TOOL, skip=(CACHE_DIRNAME,))


def write_fake_imagefolder(folder: str | Path, *, num_classes: int = 10, train_per_class: int = 30,
                           test_per_class: int = 2, val_per_class: int = 0, unlabeled: int = 0, side: int = 32,
                           seed: int = 0) -> Path:
    """Write an ``imagefolder`` dataset (``mutexmatch/data/imagefolder.py``) of random RGB PNGs at ``folder``.

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
                Image.fromarray(pixels(rng, (side, side, 3))).save(cdir / f"{i:05d}.png")
    if unlabeled:
        (folder / "unlabeled").mkdir(parents=True, exist_ok=True)
        for i in range(unlabeled):
            Image.fromarray(pixels(rng, (side, side, 3))).save(folder / "unlabeled" / f"{i:05d}.png")
    return folder


def write_fake_root(root: str | Path, names: Sequence[str] = FAKE_DATASETS, *,
                    sizes: Mapping[str, FakeSize] | None = None, seed: int = 0, decode: bool = True) -> Path:
    """Write every dataset in ``names`` below ``root`` (created if needed) and return ``root`` as an absolute path.

    ``sizes`` overrides the datasets' ``fake_size``. With ``decode`` (default) each dataset is loaded once through
    :func:`mutexmatch.data.load.load_dataset` (with its extra split too, where one was written) with torchvision's
    md5 check bypassed, so the real readers parse the generated files and leave the caches that later loads use.

    Files it did not write are never written over: a dataset folder holding any (real CIFAR-10 files, a hand-edited
    generated file) raises ``ValueError`` naming them before anything is written (:func:`refuse_foreign_files`).
    """
    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    sizes = dict(sizes or {})
    unknown = sorted(set(names) - set(FAKE_DATASETS)) + sorted(set(sizes) - set(FAKE_DATASETS))
    if unknown:
        raise ValueError(f"names/sizes: unknown dataset(s) {unknown}; allowed: {', '.join(FAKE_DATASETS)}")
    for name in names:
        refuse_foreign_files(root / DATASETS[name].folder)
    for i, name in enumerate(names):
        write_fake_dataset(name, root, sizes.get(name), seed=seed + i)
    if decode:
        from mutexmatch.data.load import load_dataset  # the loader imports nothing of fake data: no circle

        with generated_checksums_accepted():
            for name in names:
                load_dataset(name, root)
                if DATASETS[name].extra_split and (sizes.get(name) or DATASETS[name].fake_size).unlabeled:
                    load_dataset(name, root, svhn_extra=True)  # the extra split's cache too
    return root


_TOOL = "fakedata"


def refuse_foreign_files(folder: Path) -> None:
    """Raise ``ValueError`` naming the files in the dataset folder ``folder`` that fake data did not write (finding
    #13: real CIFAR-10 files were overwritten with noise). A folder it generated before may hold caches of other
    image sizes (loads write them); one it did not generate may not even hold a cache: a cache of real files is
    decoded from them, and the next load of the real data would read the noise's."""
    skip = (CACHE_DIRNAME,) if has_manifest(folder, _TOOL) else ()
    foreign = foreign_files(folder, _TOOL, skip=skip)
    if foreign:
        raise ValueError(f"{folder} holds {len(foreign)} file(s) mutexmatch.fakedata did not write "
                         f"({shown(folder, foreign)}); it never writes over them: give another data root for the "
                         f"fake data, or move them away")
