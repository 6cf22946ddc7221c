"""Writing a loaded dataset as an image folder of lossless PNGs (``python -m mutexmatch.datasets export``), so that
loading the export as ``data.dataset: imagefolder`` gives the same pixels and labels."""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image

from mutexmatch.data import EXPORT_FORMATS, imagefolder  # EXPORT_FORMATS: where --help reads it without torch
from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.images import ImageData
from mutexmatch.data.load import DatasetBundle, dataset_dir

SPLITS = (*imagefolder.LABELED_SPLITS, imagefolder.UNLABELED_SPLIT)
_CHUNK = imagefolder.THREAD_CHUNK


def class_names(name: str, root: str | Path, bundle: DatasetBundle) -> list[str]:
    """Class folder names whose sorted order is the label order (imagefolder labels the sorted train folders).

    The dataset's own names when it has them, they are already sorted and are usable as folder names; otherwise
    ``<index>_<name>`` or the bare zero-padded index.
    """
    known, n = dataset_class_names(name, root, bundle), bundle.info.num_classes
    if known is None:
        return index_names(n)
    if known == sorted(known) and len(set(known)) == n and all(_safe_folder_name(c) == c for c in known):
        return known
    width = len(str(n - 1))
    return [f"{i:0{width}d}_{_safe_folder_name(c)}" for i, c in enumerate(known)]


def dataset_class_names(name: str, root: str | Path, bundle: DatasetBundle) -> list[str] | None:
    """The classes as the dataset names them (an image folder's class folders as they are), in label order; None
    when it names none (or not one per class)."""
    known = bundle.classes
    if known is None and name in DATASETS:
        known = DATASETS[name].class_names(dataset_dir(name, root))
    return None if known is None or len(known) != bundle.info.num_classes else list(known)


def index_names(n: int) -> list[str]:
    width = len(str(n - 1))
    return [f"{i:0{width}d}" for i in range(n)]


def _safe_folder_name(name: str) -> str:
    """``name`` with anything but letters, digits, ``-``, ``_``, ``.`` and spaces replaced; no leading dot
    (imagefolder skips hidden folders)."""
    return re.sub(r"[^\w.\- ]", "_", name).lstrip(".").strip() or "_"


def _png(x: torch.Tensor) -> Image.Image:
    """One uint8 (C, H, W) image as a PIL image: 'L' for one channel, 'RGB' for three."""
    arr = x.permute(1, 2, 0).numpy()
    return Image.fromarray(arr[:, :, 0], mode="L") if arr.shape[2] == 1 else Image.fromarray(arr, mode="RGB")


def write_split(data: ImageData, folder: Path, names: Sequence[str] | None) -> None:
    """``folder/<class>/NNNNN.png`` (``folder/NNNNN.png`` when ``names`` is None): NNNNN is the image's index in
    the split, zero-padded so that imagefolder's sorted file order is the original order within each class."""
    width = max(5, len(str(len(data) - 1)))
    labels = data.y.tolist()
    dirs = [folder] if names is None else [folder / n for n in sorted(set(names[y] for y in labels))]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)

    def write(i: int) -> None:
        sub = folder if names is None else folder / names[labels[i]]
        _png(data.x[i]).save(sub / f"{i:0{width}d}.png")  # PNG is lossless: pixels round-trip exactly

    def write_chunk(start: int) -> None:
        for i in range(start, min(start + _CHUNK, len(data))):
            write(i)

    # PIL releases the GIL while it compresses, so threads keep every core busy.
    with ThreadPoolExecutor() as pool:
        list(pool.map(write_chunk, range(0, len(data), _CHUNK)))
