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


def _striped_tiff(path: Path, strips: int) -> Path:
    """A 1x2 8-bit TIFF whose header lists ``strips`` one-row strips (their offsets and byte counts one byte each):
    PIL builds one tile object per listed strip when it opens the file, before any size can be checked."""
    entries = [(256, 3, 1, 1), (257, 3, 1, 2), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 1, strips, None), (277, 3, 1, 1), (278, 3, 1, 1), (279, 1, strips, None)]
    data_at = 8 + 2 + 12 * len(entries) + 4
    out = bytearray(b"II*\0" + struct.pack("<IH", 8, len(entries)))
    for i, (tag, typ, count, value) in enumerate(entries):
        out += struct.pack("<HHI", tag, typ, count)
        out += struct.pack("<I", data_at) if value is None else struct.pack("<HH", value, 0)
    path.write_bytes(bytes(out + struct.pack("<I", 0) + bytes(2 * strips)))
    return path


def test_a_tiff_listing_more_strips_than_an_image_needs_is_refused_before_opening(tmp_path, monkeypatch):
    """Adversarial finding #8: a 60 MB TIFF listing 30 M strips took 7 GB in PIL's open (227 MB and 13 s for the
    1 M strips of a 2 MB file here); the pixel limit is checked only after the open."""
    monkeypatch.setattr(Image, "open", lambda *a, **k: pytest.fail("opened by PIL"))
    with pytest.raises(ValueError, match=r"^who: .*many.tif lists 100,000 strips or tiles, more than the 65,536 an "
                                         r"image may have; re-save or remove it$"):
        open_image(_striped_tiff(tmp_path / "many.tif", 100_000), "who")


def test_every_format_is_refused_by_its_size_before_it_is_decoded(tmp_path, monkeypatch):
    """Finding #8 asked for the pixel limit "for every format the reader accepts, not only PNG's header": each
    format PIL writes, its decoder made to fail, is refused by the limit (lowered here) before any decoding."""
    from PIL import ImageFile

    monkeypatch.setattr("mutexmatch.data.imagefiles.MAX_IMAGE_PIXELS", 64 * 64)
    Image.init()  # every plugin, as the image folder's extension list does
    saved = []
    for fmt in sorted(set(Image.SAVE) - {"PDF", "EPS", "PALM", "XBM", "MSP", "BLP", "DDS", "ICNS", "ICO", "MPO", "IM"}):
        path = tmp_path / f"big.{fmt.lower()}"
        try:
            Image.new("RGB" if fmt not in ("IM", "SPIDER") else "L", (65, 64)).save(path, format=fmt)
        except (OSError, ValueError, KeyError):
            continue  # a format whose writer needs another mode or an optional library
        saved.append(fmt)
        monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail(f"{fmt} decoded"))
        with pytest.raises(ValueError, match=r"is 65x64 pixels, more than the 4,096"):
            open_image(path, "who")
        monkeypatch.undo()
        monkeypatch.setattr("mutexmatch.data.imagefiles.MAX_IMAGE_PIXELS", 64 * 64)
    assert {"PNG", "JPEG", "TIFF", "BMP", "GIF", "WEBP", "PPM", "TGA"} <= set(saved)
