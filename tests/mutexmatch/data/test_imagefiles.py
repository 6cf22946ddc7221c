"""The one reader of data files (issue 33 item 1, for the built-in datasets too): a file that is not a regular file
and an image whose header promises more than MAX_IMAGE_PIXELS are refused in one line before anything is decoded —
in an image folder, in a built-in dataset shipped as image files (mini-ImageNet), in torchvision's on-disk formats
(CIFAR-10) and beside a decoded cache. Before, a pipe named like a dataset file blocked the load for ever."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from mutexmatch.data.cache import verify_checksum
from mutexmatch.data.fake import FakeSize, write_fake_dataset
from mutexmatch.data.imagefiles import MAX_IMAGE_PIXELS, open_image, regular_file
from mutexmatch.data.load import load_dataset
from mutexmatch.data.registry import DatasetError


def _png_header(path: Path, side: int) -> Path:
    """A 1x1 PNG whose header says side x side pixels: opening it reads the header, decoding it would fail."""
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = struct.pack(">II", side, side)  # IHDR's width and height, after the signature, length and type
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))  # its CRC over the type and the fields
    path.write_bytes(bytes(data))
    return path


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def test_a_pipe_and_a_bomb_are_refused_before_decoding(tmp_path):
    with pytest.raises(ValueError, match=r"^who: .*pipe is not a regular file \(a pipe, socket or device\); remove "
                                         r"it$"):
        open_image(_fifo(tmp_path / "pipe"), "who")
    side = 9000  # 81 M pixels: beyond our limit, below PIL's own (89 M, where it only warns)
    assert side * side > MAX_IMAGE_PIXELS
    with pytest.raises(ValueError, match=r"^who: .*bomb.png is 9,000x9,000 pixels, more than the 67,108,864 an "
                                         r"image may have; shrink or remove it$"):
        open_image(_png_header(tmp_path / "bomb.png", side), "who")
    with pytest.raises(ValueError, match=r"is not a readable image \(FileNotFoundError"):
        open_image(tmp_path / "missing.png", "who")
    assert regular_file(tmp_path / "missing.png", "who") == tmp_path / "missing.png"  # the caller says "missing"


def test_a_builtin_dataset_of_image_files_reads_through_it(tmp_path):
    folder = write_fake_dataset("miniimagenet", tmp_path, FakeSize(1, 1))
    first = sorted((folder / "images").glob("train_*.png"))[0]
    _png_header(first, 9000)
    with pytest.raises(DatasetError, match=rf"^miniimagenet: {first} is 9,000x9,000 pixels"):
        load_dataset("miniimagenet", tmp_path)
    _fifo(first)
    with pytest.raises(DatasetError, match=rf"^miniimagenet: {first} is not a regular file"):
        load_dataset("miniimagenet", tmp_path)
    _fifo(folder / "train.csv")
    with pytest.raises(DatasetError, match=r"train.csv is not a regular file"):
        load_dataset("miniimagenet", tmp_path)


def test_torchvisions_on_disk_files_and_a_caches_checksum_are_checked_first(tmp_path):
    folder = write_fake_dataset("cifar10", tmp_path, FakeSize(1, 1))
    batch = next(folder.rglob("data_batch_1"))
    _fifo(batch)
    with pytest.raises(DatasetError, match=rf"^cifar10: {batch} is not a regular file"):
        load_dataset("cifar10", tmp_path)
    cache = tmp_path / "c.pt"
    cache.write_bytes(b"x")
    _fifo(tmp_path / "c.pt.sha256")
    with pytest.raises(ValueError, match="is not a regular file"):
        verify_checksum(cache)
