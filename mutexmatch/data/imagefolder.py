"""Your own images as a dataset (``data.dataset: imagefolder``): a folder of class folders, checked and decoded once.

``data.root`` is the dataset folder itself::

    <root>/train/<class>/...   required: labeled training images; the classes are the sorted folder names
    <root>/test/<class>/...    required: every test class must also be a train class
    <root>/val/<class>/...     optional: the validation split (instead of carving data.val_per_class out of train)
    <root>/unlabeled/...       optional: images without labels, at any depth, added to the unlabeled pool

Rules (documented in ``docs/datasets.md`` too):

- **Which files count.** Every file whose extension PIL can open (``PIL.Image.registered_extensions()``, case
  insensitive) at any depth below a class folder. Names starting with ``.`` (``.DS_Store``, our own cache folder)
  and files with other extensions (``README.txt``) are ignored; ``check_folder`` counts the ignored files. Links
  are followed: a folder reached by several paths counts once (the first in sorted order), a link back to one of
  its own ancestors is refused.
- **Colour.** Every image becomes 8-bit RGB with ``PIL.Image.convert("RGB")``: grayscale is copied to the three
  channels, palette images are looked up in their palette, an alpha channel is dropped (the colour under it is
  kept), 16-bit and float images are clipped to 0..255 by PIL (with a warning naming how many and the first).
- **Size.** ``data.image_size`` S, or when it is null the side of the first training image in sorted path order,
  which must then be square. An S×S image is kept as it is; any other image is resized so that its shorter side is
  S (Lanczos, as the released code does for mini-ImageNet) and centre-cropped to S×S.
- **Cache.** Each split is decoded once, in parallel threads over the available cores (PIL releases the GIL while
  it decodes), into the same uint8 cache as the built-in datasets: ``<root>/.mutexmatch_cache/<split>_<S>px_<key>.pt``,
  where ``<key>`` digests the split's relative paths, file sizes and modification times and the class list. An
  edited folder therefore gets a new key and is decoded again, never served stale; superseded caches are deleted.
- **Normalisation.** The per-channel mean and std of ``pixel / 255`` over the decoded ``train/`` images; the
  trainer records them in the run folder (``dataset.json``).
- **Weak augmentation.** Horizontal flip and a random S×S crop of the image padded by round(S / 8) zero pixels, the
  paper's CIFAR setting (4 pixels at 32).

Problems with the layout raise :class:`ImageFolderError` naming the path and the rule before anything is decoded;
a file that PIL cannot decode raises it naming the file (a corrupt image never becomes a black one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from mutexmatch.data.imagefiles import open_image

NAME = "imagefolder"
LABELED_SPLITS = ("train", "test", "val")
UNLABELED_SPLIT = "unlabeled"
REQUIRED_SPLITS = ("train", "test")
# Images per thread task when decoding or writing a folder: large enough that task overhead is negligible, small
# enough that every core gets work on a folder of a few thousand images.
THREAD_CHUNK = 512


class ImageFolderError(ValueError):
    """A problem with an image folder; the message names the path and the rule it breaks."""


def image_extensions() -> frozenset[str]:
    """Lower-case file extensions (with the dot) that PIL can open."""
    return frozenset(ext.lower() for ext in Image.registered_extensions())


@dataclass
class FolderIndex:
    """The files of one image folder: ``files[split]`` lists ``(relative path, label)`` in sorted path order
    (label -1 under ``unlabeled/``); ``ignored`` counts files skipped for their extension."""

    root: Path
    classes: tuple[str, ...]
    files: dict[str, list[tuple[str, int]]]
    ignored: int = 0

    def counts(self, split: str) -> dict[str, int]:
        """Images per class of a labeled split (every train class listed, 0 where the split has none)."""
        out = dict.fromkeys(self.classes, 0)
        for _, label in self.files.get(split, []):
            out[self.classes[label]] += 1
        return out

    def content_key(self, split: str, size: int) -> str:
        """Digest of what a cache of ``split`` at ``size`` px depends on: paths, sizes, mtimes, classes."""
        h = hashlib.sha256(f"{size}\n{'/'.join(self.classes)}\n".encode())
        for rel, label in self.files[split]:
            st = (self.root / split / rel).stat()
            h.update(f"{rel}\0{label}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()[:16]


def _walk_images(top: Path, exts: frozenset[str]) -> tuple[list[str], int]:
    """Image files below ``top`` as sorted paths relative to ``top`` (hidden names skipped), and the ignored count.
    Links are followed; a folder reached by several paths is listed once, by the first in sorted order."""
    found: list[str] = []
    ignored = 0
    seen: set[tuple[int, int]] = set()  # (device, inode) of every folder listed
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        _refuse_link_loop(Path(dirpath))
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:  # finding #7: links reaching one folder by 2^n paths never ended
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            if os.path.splitext(name)[1].lower() in exts:
                found.append(os.path.relpath(os.path.join(dirpath, name), top))
            else:
                ignored += 1
    return sorted(found), ignored


def _refuse_link_loop(folder: Path) -> None:
    """os.walk(followlinks=True) follows a link back to one of the folder's own ancestors (inside the data root or
    above it) again and again until the path grows too long, listing the same images over and over."""
    real = folder.resolve()
    for ancestor in folder.absolute().parents:
        if ancestor.resolve() == real:
            raise ImageFolderError(f"imagefolder: {folder} leads back to {ancestor} (a link loop); remove the link")


def _class_folders(split_dir: Path) -> list[str]:
    loose = sorted(p.name for p in split_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    if loose:
        raise ImageFolderError(f"imagefolder: {split_dir / loose[0]} lies directly in {split_dir.name}/: images "
                               f"must be inside a class folder ({split_dir.name}/<class>/...)")
    return sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan_folder(root: str | Path) -> FolderIndex:
    """List and check the layout of the image folder at ``root`` (no image is opened)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ImageFolderError(f"imagefolder: data.root={str(root)!r} is not a folder")
    for split in REQUIRED_SPLITS:
        if not (root / split).is_dir():
            raise ImageFolderError(f"imagefolder: {root / split} is missing: data.root must hold train/<class>/ "
                                   f"and test/<class>/ folders (optional: val/<class>/, unlabeled/)")
    exts = image_extensions()
    classes = tuple(_class_folders(root / "train"))
    if len(classes) < 2:
        raise ImageFolderError(f"imagefolder: {root / 'train'} holds {len(classes)} class folder(s): a classifier "
                               f"needs at least 2 (train/<class>/...)")
    index = {c: i for i, c in enumerate(classes)}
    out = FolderIndex(root=root, classes=classes, files={})
    for split in LABELED_SPLITS:
        if not (root / split).is_dir():
            continue
        rows: list[tuple[str, int]] = []
        found = _class_folders(root / split)
        if not found:  # finding #16: an empty test/ scored 0.0, an empty val/ passed a search's dry run
            carve = " (or remove the empty val/ to carve data.val_per_class out of train/)" if split == "val" else ""
            raise ImageFolderError(f"imagefolder: {root / split} holds no class folder: {split}/ needs "
                                   f"{split}/<class>/ images of the train classes{carve}")
        for cls in found:
            if cls not in index:
                raise ImageFolderError(f"imagefolder: {root / split / cls} is not a class of train/ "
                                       f"({', '.join(classes)}): every {split} class needs a train folder")
            rels, ignored = _walk_images(root / split / cls, exts)
            out.ignored += ignored
            if not rels:
                raise ImageFolderError(f"imagefolder: {root / split / cls} holds no images (every class folder "
                                       f"needs at least one file PIL can open, e.g. .jpg or .png)")
            rows += [(f"{cls}/{r}", index[cls]) for r in rels]
        out.files[split] = rows
    if (root / UNLABELED_SPLIT).is_dir():
        rels, ignored = _walk_images(root / UNLABELED_SPLIT, exts)
        out.ignored += ignored
        out.files[UNLABELED_SPLIT] = [(r, -1) for r in rels]
    return out


def infer_image_size(index: FolderIndex) -> int:
    """The side of the first training image (sorted path order); it must be square."""
    rel = index.files["train"][0][0]
    path = index.root / "train" / rel
    w, h = _open(path).size
    if w != h:
        raise ImageFolderError(f"imagefolder: data.image_size is null, so it is taken from the first train image "
                               f"{path}, which is {w}x{h}, not square: set data.image_size (images are resized to "
                               f"that side and centre-cropped)")
    return w


def check_labels_available(index: FolderIndex, num_labels: int, val_per_class: int) -> list[str]:
    """One error line per train class holding fewer images than its share of ``num_labels`` (plus validation)."""
    per_class = num_labels // len(index.classes)
    carved = 0 if "val" in index.files else val_per_class
    errors = []
    for cls, n in index.counts("train").items():
        if n < per_class + carved:
            need = f"{per_class} labeled" + (f" + {carved} validation" if carved else "")
            errors.append(f"data.num_labels={num_labels}: {index.root / 'train' / cls} holds {n} images, fewer "
                          f"than its share ({need} per class of {len(index.classes)} classes)")
    return errors


# ----------------------------------------------------------------------------------------------------------------
# Decoding


def _open(path: Path) -> Image.Image:
    """An image of the folder, through the one reader of data files (:func:`mutexmatch.data.imagefiles.open_image`:
    not a regular file, more than ``MAX_IMAGE_PIXELS`` pixels or undecodable is one line, before decoding)."""
    return open_image(path, NAME, ImageFolderError)


def to_rgb_square(img: Image.Image, size: int) -> np.ndarray:
    """The module docstring's colour and size rules: RGB, then (unless already size×size) shorter side to ``size``
    with Lanczos and a centre crop; returns an HWC uint8 array."""
    img = img.convert("RGB")
    if img.size != (size, size):
        img = TF.center_crop(TF.resize(img, size, interpolation=InterpolationMode.LANCZOS), [size, size])
    return np.array(img)  # a writable copy: torch warns on read-only arrays


# Modes whose values PIL's convert("RGB") clips to 0..255 instead of scaling (16-bit and 32-bit integer, float).
WIDE_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


def _decode_chunk(paths: Sequence[Path], size: int) -> tuple[np.ndarray, list[tuple[Path, str]]]:
    """The chunk's images, and those whose mode is clipped by the conversion (path, mode)."""
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    wide = []
    for i, path in enumerate(paths):
        with _open(path) as img:
            if img.mode in WIDE_MODES:
                wide.append((path, img.mode))
            out[i] = to_rgb_square(img, size)
    return out, wide


def decode_images(paths: Sequence[Path], size: int, workers: int | None = None) -> torch.Tensor:
    """Decode ``paths`` into one uint8 ``(N, 3, size, size)`` tensor, in parallel threads."""
    workers = workers or len(os.sched_getaffinity(0))
    chunks = [paths[i:i + THREAD_CHUNK] for i in range(0, len(paths), THREAD_CHUNK)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        decoded = list(pool.map(lambda c: _decode_chunk(c, size), chunks))
    parts, wide = [d[0] for d in decoded], [w for d in decoded for w in d[1]]
    if wide:  # the clipping is documented, but a user whose 16-bit scans turn white should hear of it
        warnings.warn(f"imagefolder: {len(wide)} image(s) are 16-bit or float (first: {wide[0][0]}, mode "
                      f"{wide[0][1]}); converting to 8-bit RGB clips their values to 0..255 instead of scaling them; "
                      "convert them to 8 bits yourself to choose the scaling", RuntimeWarning, stacklevel=2)
    hwc = np.concatenate(parts) if parts else np.empty((0, size, size, 3), dtype=np.uint8)
    return torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous()


def check_disk(cache_dir: Path, splits: dict[str, int], size: int) -> None:
    """Refuse to decode when the uint8 caches of ``splits`` (split -> image count) would not fit on the disk."""
    need = sum(n * 3 * size * size for n in splits.values())
    probe = cache_dir if cache_dir.exists() else cache_dir.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        detail = ", ".join(f"{s} {n:,}" for s, n in splits.items())
        raise ImageFolderError(f"imagefolder: the decoded cache ({detail} images at {size}x{size} px) needs "
                               f"{need / 1e9:.2f} GB in {cache_dir}, but only {free / 1e9:.2f} GB are free: free "
                               f"space or set a smaller data.image_size")


def channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of ``x / 255`` for uint8 ``(N, C, H, W)``, accumulated in float64 chunks."""
    c = x.shape[1]
    s = torch.zeros(c, dtype=torch.float64)
    s2 = torch.zeros(c, dtype=torch.float64)
    for i in range(0, len(x), 4096):
        v = x[i:i + 4096].to(torch.float64).div_(255).transpose(0, 1).reshape(c, -1)
        s += v.sum(1)
        s2 += (v * v).sum(1)
    n = x.numel() // c
    mean = s / n
    std = (s2 / n - mean * mean).clamp_min(0).sqrt()
    return tuple(round(float(m), 6) for m in mean), tuple(round(float(v), 6) for v in std)
