"""THE reader of image files in a data folder, and decoding a list of them into one uint8 tensor (the readers of
datasets shipped as JPEG/PNG files: mini-ImageNet, Tiny-ImageNet; the no-code image folder opens each file here).

Every file read from a data folder goes through :func:`regular_file` first (issue 33 item 1): a FIFO named like a
dataset file blocked the read for ever, a device never ends; an image goes through :func:`open_image`, which also
refuses one whose header promises more than :data:`MAX_IMAGE_PIXELS` (a decompression bomb) before decoding it, and
a TIFF listing more than :data:`MAX_IMAGE_PARTS` strips or tiles before PIL opens it (finding #8).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

__all__ = ["MAX_IMAGE_PIXELS", "MAX_IMAGE_PARTS", "regular_file", "open_image", "decode_files"]

# Pixels of one image before decoding it (2^26: 256 MB as RGB); PIL's own limit warns first and fails at twice its
# 89 M, a size no semi-supervised image needs.
MAX_IMAGE_PIXELS = 1 << 26
# Strips or tiles one TIFF may list: PIL's open builds a Python object (~230 bytes) for each listed one before the
# size is known, so a 60 MB file listing 30 M one-byte strips took 7 GB (finding #8). 2^16 is one strip per row of
# an 8192-row image, or 32x32 tiles over the largest image allowed; ~15 MB to open.
MAX_IMAGE_PARTS = 1 << 16
# TIFF's byte-order marks and its StripOffsets / TileOffsets tags (TIFF 6.0, sections 2, 3 and 15).
_TIFF_ORDER = {b"II": "<", b"MM": ">"}
_TIFF_OFFSET_TAGS = (273, 324)


def regular_file(path: Path, who: str, error: Callable[[str], Exception] = ValueError) -> Path:
    """``path`` unless it exists and is not a regular file (a pipe, socket or device; a link is followed), which
    raises ``error`` with one line: ``<who>: <path> is not a regular file …; remove it``. A missing path passes:
    the caller says what is missing and how to get it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if not stat.S_ISREG(mode):
        raise error(f"{who}: {path} is not a regular file (a pipe, socket or device); remove it")
    return path


def open_image(path: Path, who: str, error: Callable[[str], Exception] = ValueError) -> Image.Image:
    """The decoded image at ``path``: a regular file whose header promises at most :data:`MAX_IMAGE_PIXELS`, else
    ``error`` with one line naming the file and what to do (a missing, truncated or undecodable file too)."""
    regular_file(path, who, error)
    parts = _tiff_parts(path)
    if parts > MAX_IMAGE_PARTS:
        raise error(f"{who}: {path} lists {parts:,} strips or tiles, more than the {MAX_IMAGE_PARTS:,} an image may "
                    "have; re-save or remove it")
    unreadable = (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError)
    try:
        img = Image.open(path)  # reads the header only
    except unreadable as err:
        raise error(_unreadable(path, who, err)) from None
    if img.size[0] * img.size[1] > MAX_IMAGE_PIXELS:
        img.close()
        raise error(f"{who}: {path} is {img.size[0]:,}x{img.size[1]:,} pixels, more than the {MAX_IMAGE_PIXELS:,} "
                    "an image may have; shrink or remove it")
    try:
        img.load()  # decode now, so a truncated file fails here and not in a worker later
    except unreadable as err:
        img.close()
        raise error(_unreadable(path, who, err)) from None
    return img


def _tiff_parts(path: Path) -> int:
    """The strips or tiles the first image of a TIFF (or BigTIFF) lists, read from its first directory's entry
    counts without loading any list; 0 for another format or a header too short to say (PIL then judges it).
    PIL offers no way to read a tag's count without unpacking the whole list, which is the cost being avoided."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
            order = _TIFF_ORDER.get(head[:2])
            if order is None or len(head) < 16:
                return 0
            magic = struct.unpack(order + "H", head[2:4])[0]
            if magic not in (42, 43):  # 43: BigTIFF
                return 0
            big = magic == 43
            first, count_fmt, entry_fmt = ((struct.unpack(order + "Q", head[8:16])[0], "Q", "HHQ8x") if big
                                           else (struct.unpack(order + "I", head[4:8])[0], "H", "HHI4x"))
            f.seek(first)
            entries = struct.unpack(order + count_fmt, f.read(struct.calcsize(order + count_fmt)))[0]
            size = struct.calcsize(order + entry_fmt)
            table = f.read(min(entries, 4096) * size)  # a directory of more entries is PIL's to refuse
    except (OSError, ValueError, struct.error):
        return 0
    counts = (struct.unpack_from(order + entry_fmt, table, i) for i in range(0, len(table) - size + 1, size))
    return max((count for tag, _, count in counts if tag in _TIFF_OFFSET_TAGS), default=0)


def _unreadable(path: Path, who: str, err: BaseException) -> str:
    return f"{who}: {path} is not a readable image ({type(err).__name__}: {err}); repair or remove it"


def decode_files(paths: Sequence[Path], size: int, prepare: Callable[[Image.Image], Image.Image], who: str,
                 error: Callable[[str], Exception] = ValueError) -> torch.Tensor:
    """``(N, 3, size, size)`` uint8 from RGB-converted files (each through :func:`open_image`), each passed through
    ``prepare`` (e.g. a resize)."""
    out = torch.empty((len(paths), 3, size, size), dtype=torch.uint8)
    for i, path in enumerate(paths):
        with open_image(path, who, error) as img:
            arr = np.array(prepare(img.convert("RGB")))  # a writable copy: torch warns on read-only arrays
        if arr.shape != (size, size, 3):
            raise error(f"{who}: {path}: image is {arr.shape[1]}x{arr.shape[0]} after preprocessing, expected "
                        f"{size}x{size}")
        out[i] = torch.from_numpy(arr).permute(2, 0, 1)
    return out
