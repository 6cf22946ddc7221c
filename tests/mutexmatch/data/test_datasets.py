"""Tests for mutexmatch.data.load and the built-in datasets' readers (mutexmatch/data/builtin/).

Fixture files are written in each dataset's real on-disk format and read through the real torchvision classes;
only torchvision's md5 check is patched (generated files cannot match the published checksums) and its downloaders
are made to raise, as torchvision's own test suite does.
"""

import os
import pickle
import re
import shutil
import socket

import numpy as np
import pytest
import scipy.io
import torch
import torchvision.datasets.cifar
import torchvision.datasets.stl10
import torchvision.datasets.svhn
from PIL import Image

from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.cache import CACHE_DIRNAME, checksum_path
from mutexmatch.data.load import dataset_dir, footprint, load_dataset
from mutexmatch.data.registry import DatasetError

INFO = {n: d.info for n, d in DATASETS.items()}

torch.set_num_threads(1)


@pytest.fixture
def patched_torchvision(monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("tests must not download")

    for module in (torchvision.datasets.cifar, torchvision.datasets.svhn, torchvision.datasets.stl10):
        monkeypatch.setattr(module, "check_integrity", lambda *args, **kwargs: True)
        for fn in ("download_url", "download_and_extract_archive"):
            if hasattr(module, fn):
                monkeypatch.setattr(module, fn, no_download)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _pickle(path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _assert_cache_hit(root, name: str, raw, first) -> None:
    """Move the raw files away: a second load can then only succeed from the cache."""
    cache = root / (name if name != "tinyimagenet" else "tiny-imagenet-200") / CACHE_DIRNAME
    files = list(cache.iterdir())
    assert files and all(p.suffix in (".pt", ".sha256") for p in files)  # no temp files left behind
    assert {p.name for p in files if p.suffix == ".sha256"} == {p.name + ".sha256" for p in files if p.suffix == ".pt"}
    for p in raw:
        p.rename(p.with_name(p.name + ".moved"))
    second = load_dataset(name, root)
    for split in ("train", "test"):
        assert torch.equal(getattr(second, split).x, getattr(first, split).x)
        assert torch.equal(getattr(second, split).y, getattr(first, split).y)


# ---------------------------------------------------------------------------------------------------------------
# CIFAR


def _write_cifar(root, name: str):
    """CIFAR python batches: latin1 pickles, data uint8 (N, 3072) laid out as 1024 R, 1024 G, 1024 B."""
    rng = _rng(1)
    c100 = name == "cifar100"
    folder = root / name / ("cifar-100-python" if c100 else "cifar-10-batches-py")
    folder.mkdir(parents=True)
    num_classes = 100 if c100 else 10
    batches = ["train"] if c100 else [f"data_batch_{i}" for i in range(1, 6)]
    train_x, train_y = [], []
    for b in batches:
        data = rng.integers(0, 256, size=(4, 3072), dtype=np.uint8)
        labels = rng.integers(0, num_classes, size=4).tolist()
        if b in ("train", "data_batch_1"):
            data[1, 1024 + 5 * 32 + 7] = 201  # image 1, green channel, row 5, column 7
        key = "fine_labels" if c100 else "labels"
        entry = {"batch_label": b, "data": data, key: labels, "filenames": [f"{b}_{i}.png" for i in range(4)]}
        if c100:
            entry["coarse_labels"] = [lab // 5 for lab in labels]
        _pickle(folder / b, entry)
        train_x.append(data)
        train_y += labels
    test_x = rng.integers(0, 256, size=(3, 3072), dtype=np.uint8)
    test_y = rng.integers(0, num_classes, size=3).tolist()
    _pickle(folder / ("test" if c100 else "test_batch"),
            {"batch_label": "test", "data": test_x, ("fine_labels" if c100 else "labels"): test_y})
    if c100:
        _pickle(folder / "meta", {"fine_label_names": [f"c{i}" for i in range(100)],
                                  "coarse_label_names": [f"s{i}" for i in range(20)]})
    else:
        _pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_vis": 3072})
    return folder, np.concatenate(train_x), np.asarray(train_y), test_x, np.asarray(test_y)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_roundtrip_and_cache(tmp_path, patched_torchvision, name):
    folder, train_x, train_y, test_x, test_y = _write_cifar(tmp_path, name)
    bundle = load_dataset(name, tmp_path)
    assert bundle.info is INFO[name]
    assert bundle.train.x.dtype == torch.uint8 and bundle.train.x.is_contiguous()
    assert bundle.train.x.shape == (len(train_y), 3, 32, 32) and bundle.test.x.shape == (3, 3, 32, 32)
    assert bundle.train.x[1, 1, 5, 7] == 201
    assert torch.equal(bundle.train.x, torch.from_numpy(train_x.reshape(-1, 3, 32, 32)))
    assert torch.equal(bundle.test.x, torch.from_numpy(test_x.reshape(-1, 3, 32, 32)))
    assert bundle.train.y.dtype == torch.int64
    assert bundle.train.y.tolist() == train_y.tolist() and bundle.test.y.tolist() == test_y.tolist()
    assert bundle.extra_unlabeled is None and bundle.predefined_folds is None
    _assert_cache_hit(tmp_path, name, [folder], bundle)


def test_download_flag_reaches_torchvision(tmp_path, monkeypatch):
    calls = []

    def fake_download(url, download_root, **kwargs):
        calls.append((url, download_root))
        _write_cifar(tmp_path, "cifar10")

    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", fake_download)
    bundle = load_dataset("cifar10", tmp_path, download=True)
    assert calls == [(torchvision.datasets.CIFAR10.url, str(tmp_path / "cifar10"))]
    assert bundle.train.x[1, 1, 5, 7] == 201


# ---------------------------------------------------------------------------------------------------------------
# SVHN


def _write_svhn(folder, split: str, n: int, seed: int):
    """SVHN {split}_32x32.mat: X (32, 32, 3, N) = (H, W, C, N), y (N, 1) in 1..10 with 10 meaning digit 0."""
    rng = _rng(seed)
    x = rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    x[5, 7, 1, 0] = 201  # image 0, row 5, column 7, green
    y = rng.integers(1, 11, size=(n, 1)).astype(np.uint8)
    y[0, 0] = 10
    folder.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
    return torch.from_numpy(x).permute(3, 2, 0, 1), torch.from_numpy(y[:, 0].astype(np.int64)) % 10


def test_svhn_roundtrip_extra_and_cache(tmp_path, patched_torchvision):
    folder = tmp_path / "svhn"
    train_x, train_y = _write_svhn(folder, "train", 5, 1)
    test_x, test_y = _write_svhn(folder, "test", 3, 2)
    extra_x, extra_y = _write_svhn(folder, "extra", 4, 3)
    bundle = load_dataset("svhn", tmp_path)
    assert bundle.train.x.shape == (5, 3, 32, 32) and bundle.train.x.dtype == torch.uint8
    assert bundle.train.x[0, 1, 5, 7] == 201
    assert torch.equal(bundle.train.x, train_x) and torch.equal(bundle.test.x, test_x)
    assert bundle.train.y[0] == 0  # torchvision maps the on-disk 10 to digit 0
    assert torch.equal(bundle.train.y, train_y) and torch.equal(bundle.test.y, test_y)
    assert not bundle.info.flip

    with_extra = load_dataset("svhn", tmp_path, svhn_extra=True)
    assert torch.equal(with_extra.train.x, torch.cat([train_x, extra_x]))
    assert torch.equal(with_extra.train.y, torch.cat([train_y, extra_y]))
    _assert_cache_hit(tmp_path, "svhn", list(folder.glob("*.mat")), bundle)


# ---------------------------------------------------------------------------------------------------------------
# STL-10


def _write_stl10_images(path, images: np.ndarray) -> None:
    """STL-10 binaries store every channel column-major: write (N, C, W, H) in C order."""
    path.write_bytes(np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tobytes())


def _write_stl10(root):
    rng = _rng(4)
    folder = root / "stl10" / "stl10_binary"
    folder.mkdir(parents=True)
    train = rng.integers(0, 256, size=(20, 3, 96, 96), dtype=np.uint8)
    train[2, 0, 10, 3] = 201  # image 2, red, row 10, column 3 (tells rows from columns)
    train[2, 0, 3, 10] = 17
    test = rng.integers(0, 256, size=(6, 3, 96, 96), dtype=np.uint8)
    unlabeled = rng.integers(0, 256, size=(4, 3, 96, 96), dtype=np.uint8)
    train_y = rng.integers(0, 10, size=20)
    test_y = rng.integers(0, 10, size=6)
    _write_stl10_images(folder / "train_X.bin", train)
    _write_stl10_images(folder / "test_X.bin", test)
    _write_stl10_images(folder / "unlabeled_X.bin", unlabeled)
    (folder / "train_y.bin").write_bytes((train_y + 1).astype(np.uint8).tobytes())  # 1..10 on disk
    (folder / "test_y.bin").write_bytes((test_y + 1).astype(np.uint8).tobytes())
    folds = [rng.choice(20, 4, replace=False) for _ in range(10)]
    (folder / "fold_indices.txt").write_text("".join(" ".join(map(str, f)) + " \n" for f in folds))
    (folder / "class_names.txt").write_text("\n".join(f"class{i}" for i in range(10)) + "\n")
    return folder, train, train_y, test, test_y, unlabeled, folds


def test_stl10_roundtrip_folds_and_cache(tmp_path, patched_torchvision):
    folder, train, train_y, test, test_y, unlabeled, folds = _write_stl10(tmp_path)
    bundle = load_dataset("stl10", tmp_path)
    assert bundle.train.x.shape == (20, 3, 96, 96) and bundle.train.x.is_contiguous()
    assert bundle.train.x[2, 0, 10, 3] == 201 and bundle.train.x[2, 0, 3, 10] == 17
    assert torch.equal(bundle.train.x, torch.from_numpy(train)) and torch.equal(bundle.test.x, torch.from_numpy(test))
    assert bundle.train.y.tolist() == train_y.tolist() and bundle.test.y.tolist() == test_y.tolist()
    assert bundle.extra_unlabeled is not None
    assert torch.equal(bundle.extra_unlabeled.x, torch.from_numpy(unlabeled))
    assert bundle.extra_unlabeled.y.tolist() == [-1] * 4
    assert len(bundle.predefined_folds) == 10
    for i, fold in enumerate(bundle.predefined_folds):
        np.testing.assert_array_equal(fold, folds[i])
        # our fold parse selects exactly what torchvision's STL10(folds=i) selects
        tv = torchvision.datasets.STL10(str(tmp_path / "stl10"), split="train", folds=i)
        assert torch.equal(bundle.train.x[torch.from_numpy(fold)], torch.from_numpy(np.ascontiguousarray(tv.data)))
    shutil.move(folder, tmp_path / "moved")
    again = load_dataset("stl10", tmp_path)
    assert torch.equal(again.train.x, bundle.train.x) and torch.equal(again.extra_unlabeled.x, bundle.extra_unlabeled.x)
    for a, b in zip(again.predefined_folds, bundle.predefined_folds):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------------------------
# mini-ImageNet and Tiny-ImageNet


def _decoded(path) -> np.ndarray:
    with Image.open(path) as img:
        return np.array(img.convert("RGB"))


def _write_miniimagenet(root):
    """CSV split with string labels; rows shuffled so that order of appearance is not the sorted class order."""
    rng = _rng(5)
    folder = root / "miniimagenet"
    (folder / "images").mkdir(parents=True)
    wnids = [f"n{9_000_000 - 7 * c:08d}" for c in range(100)]  # generated in descending order
    rows = {"train": [(f"{w}_tr.jpg", w) for w in wnids], "test": [(f"{w}_te.jpg", w) for w in wnids[:6]]}
    for split in rows:
        rng.shuffle(rows[split])
        lines = ["filename,label"] + [f"{f},{w}" for f, w in rows[split]]
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")
        for i, (fname, _) in enumerate(rows[split]):
            # the first train image is wider than tall (resize keeps it, center crop trims its sides)
            width = 100 if (split, i) == ("train", 0) else 80
            arr = rng.integers(0, 256, size=(80, width, 3), dtype=np.uint8)
            Image.fromarray(arr).save(folder / "images" / fname, quality=95)
    return folder, rows, sorted(wnids)


def test_miniimagenet_roundtrip_and_cache(tmp_path):
    folder, rows, classes = _write_miniimagenet(tmp_path)
    bundle = load_dataset("miniimagenet", tmp_path)
    assert bundle.info.image_size == 80 and bundle.info.pad == 10 and bundle.info.pad_mode == "reflect"
    assert bundle.train.x.shape == (100, 3, 80, 80) and bundle.test.x.shape == (6, 3, 80, 80)
    for split in ("train", "test"):
        data = getattr(bundle, split)
        assert data.y.tolist() == [classes.index(w) for _, w in rows[split]]
        for i, (fname, _) in enumerate(rows[split]):
            expected = _decoded(folder / "images" / fname)
            if expected.shape[1] == 100:
                expected = expected[:, 10:90]
            assert torch.equal(data.x[i], torch.from_numpy(expected).permute(2, 0, 1)), (split, i)
    _assert_cache_hit(tmp_path, "miniimagenet", [folder / "images"], bundle)


def test_the_footprint_counts_what_a_load_holds_without_decoding_anything(tmp_path):
    _write_miniimagenet(tmp_path)
    for name, size in (("miniimagenet", 20), ("digits", 24)):
        fp = footprint(name, tmp_path, image_size=size)
        assert not (dataset_dir(name, tmp_path) / CACHE_DIRNAME).exists()
        bundle = load_dataset(name, tmp_path, image_size=size)
        assert fp.splits == {"train": len(bundle.train), "test": len(bundle.test)} and fp.train == len(bundle.train)
        assert fp.nbytes(fp.loaded_images) == bundle.train.x.nbytes + bundle.test.x.nbytes
    (tmp_path / "miniimagenet" / "test.csv").write_bytes(b"\xff\xfe junk")  # the cache still serves the load
    assert footprint("miniimagenet", tmp_path, image_size=20).splits == {"train": 100, "test": 0}
    svhn = DATASETS["svhn"].published_images
    fp = footprint("svhn", tmp_path, svhn_extra=True)
    assert fp.train == svhn["train"] + svhn["extra"]
    assert fp.loaded_images == sum(svhn.values()) + fp.train  # the cached splits and their concatenation
    assert footprint("svhn", tmp_path).loaded_images == svhn["train"] + svhn["test"]
    assert footprint("stl10", tmp_path).unlabeled == DATASETS["stl10"].published_images["unlabeled"]
    with pytest.raises(ValueError, match="data.image_size for cifar10 must be its native 32"):
        footprint("cifar10", tmp_path, image_size=64)


def test_miniimagenet_other_size(tmp_path):
    folder = tmp_path / "miniimagenet"
    (folder / "images").mkdir(parents=True)
    lines = ["filename,label"] + [f"{c}.png,{c}" for c in range(100)]  # numeric labels sort as numbers
    (folder / "train.csv").write_text("\n".join(lines) + "\n")
    (folder / "test.csv").write_text("filename,label\n10.png,10\n")
    for c in range(100):
        Image.new("RGB", (120, 90), (c, 2 * c, 255 - c)).save(folder / "images" / f"{c}.png")
    bundle = load_dataset("miniimagenet", tmp_path, image_size=84)
    assert bundle.info.image_size == 84 and bundle.train.x.shape == (100, 3, 84, 84)
    assert bundle.train.y.tolist() == list(range(100)) and bundle.test.y.tolist() == [10]
    # Lanczos resizing of a flat colour keeps the colour
    assert (bundle.test.x[0].flatten(1) == torch.tensor([[10], [20], [245]], dtype=torch.uint8)).all()


def _write_tinyimagenet(root):
    rng = _rng(6)
    folder = root / "tiny-imagenet-200"
    wnids = [f"n{int(v):08d}" for v in rng.choice(10**7, 200, replace=False)]
    (folder / "wnids.txt").parent.mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(wnids) + "\n")  # not sorted, like the real file
    for i, w in enumerate(wnids):
        images = folder / "train" / w / "images"
        images.mkdir(parents=True)
        (folder / "train" / w / f"{w}_boxes.txt").write_text(f"{w}_0.JPEG\t0\t0\t63\t63\n")
        for j in range(2 if i < 3 else 1):
            arr = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
            img = Image.fromarray(arr)
            if (i, j) == (0, 1):
                img = img.convert("L")  # the real data holds some grayscale JPEGs
            img.save(images / f"{w}_{j}.JPEG", quality=90)
    val_images = folder / "val" / "images"
    val_images.mkdir(parents=True)
    ann = []
    for k in range(12):
        w = wnids[int(rng.integers(0, 200))]
        Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(val_images / f"val_{k}.JPEG")
        ann.append(f"val_{k}.JPEG\t{w}\t1\t2\t40\t50")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(ann) + "\n")
    return folder, wnids, dict(line.split("\t")[:2] for line in ann)


def test_tinyimagenet_roundtrip_and_cache(tmp_path):
    folder, wnids, val_labels = _write_tinyimagenet(tmp_path)
    classes = sorted(wnids)
    bundle = load_dataset("tinyimagenet", tmp_path)
    assert bundle.train.x.shape == (203, 3, 64, 64) and bundle.test.x.shape == (12, 3, 64, 64)
    assert not bundle.info.flip
    expected_train = [(c, folder / "train" / w / "images" / f"{w}_{j}.JPEG")
                      for c, w in enumerate(classes) for j in range(2 if w in wnids[:3] else 1)]
    assert bundle.train.y.tolist() == [c for c, _ in expected_train]
    for i, (_, path) in enumerate(expected_train):
        assert torch.equal(bundle.train.x[i], torch.from_numpy(_decoded(path)).permute(2, 0, 1)), path
    gray = classes.index(wnids[0])
    gray_row = [i for i, (c, p) in enumerate(expected_train) if c == gray][1]
    assert torch.equal(bundle.train.x[gray_row, 0], bundle.train.x[gray_row, 2])
    val_files = sorted(val_labels)  # val_0, val_1, val_10, val_11, val_2, ...
    assert bundle.test.y.tolist() == [classes.index(val_labels[f]) for f in val_files]
    for i, f in enumerate(val_files):
        assert torch.equal(bundle.test.x[i], torch.from_numpy(_decoded(folder / "val" / "images" / f)).permute(2, 0, 1))
    _assert_cache_hit(tmp_path, "tinyimagenet", [folder / "train", folder / "val"], bundle)


# ---------------------------------------------------------------------------------------------------------------
# digits


def test_digits_offline_split_and_stats(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits

    reference = load_digits()

    def no_network(*args, **kwargs):
        raise AssertionError("digits must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    bundle = load_dataset("digits", tmp_path)
    train, test = bundle.train, bundle.test
    assert (len(train), len(test)) == (1300, 497)
    assert train.x.shape == (1300, 1, 16, 16) and train.x.dtype == torch.uint8 and test.x.shape == (497, 1, 16, 16)
    assert bundle.info.num_classes == 10 and set(train.y.tolist()) == set(range(10)) == set(test.y.tolist())
    # stratified: every class keeps its share of the 497 test images to within one image
    share = np.bincount(reference.target, minlength=10) * 497 / 1797
    assert np.all(np.abs(np.bincount(test.y.numpy(), minlength=10) - share) <= 1)
    # nearest-exact 2x upscaling replicates pixels
    small = train.x[:, :, ::2, ::2]
    assert torch.equal(small.repeat_interleave(2, 2).repeat_interleave(2, 3), train.x)
    # together, train and test are exactly the 1,797 digits at round(v * 255 / 16)
    expected = np.rint(reference.images * 255 / 16).astype(np.uint8).reshape(1797, 64)
    got = torch.cat([small, test.x[:, :, ::2, ::2]]).reshape(1797, 64).numpy()
    key = lambda a: np.lexsort(a.T[::-1])  # noqa: E731
    np.testing.assert_array_equal(got[key(got)], expected[key(expected)])
    # ... each with its own label
    label_of: dict[bytes, set[int]] = {}
    for img, lab in zip(expected, reference.target):
        label_of.setdefault(img.tobytes(), set()).add(int(lab))
    got_labels = torch.cat([train.y, test.y]).tolist()
    assert all(lab in label_of[img.tobytes()] for img, lab in zip(got, got_labels))
    assert train.x[train.x > 0].min() >= 16 and train.x.max() == 255
    # the registry's statistics are the train split's
    pixels = train.x.double() / 255
    assert abs(pixels.mean().item() - bundle.info.mean[0]) < 5e-5
    assert abs(pixels.std().item() - bundle.info.std[0]) < 5e-5

    big = load_dataset("digits", tmp_path, image_size=32)
    assert big.train.x.shape == (1300, 1, 32, 32) and big.info.pad == 4
    assert torch.equal(big.train.x[:, :, ::2, ::2], train.x)

    monkeypatch.setattr("sklearn.datasets.load_digits", no_network)
    again = load_dataset("digits", tmp_path)
    assert torch.equal(again.train.x, train.x) and torch.equal(again.test.y, test.y)


def test_bit_rot_in_a_cache_is_detected_and_decoded_again(tmp_path):
    first = load_dataset("digits", tmp_path)
    cache = tmp_path / "digits" / CACHE_DIRNAME / "train_16px.pt"
    data = bytearray(cache.read_bytes())
    pixel = data.index(first.train.x[0].numpy().tobytes())  # the first image's bytes inside the zip's tensor record
    data[pixel + 20] ^= 0x01  # one flipped bit: torch.load alone would return the image with it
    cache.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"train_16px.pt \(its sha256 .* differs from the .* recorded in "
                                         r"train_16px.pt.sha256"):
        again = load_dataset("digits", tmp_path)
    assert torch.equal(again.train.x, first.train.x)
    assert torch.equal(torch.load(cache, weights_only=True)["x"], first.train.x)  # rewritten with a new checksum
    checksum_path(cache).unlink()
    with pytest.warns(UserWarning, match="no readable checksum train_16px.pt.sha256"):
        load_dataset("digits", tmp_path)
    assert checksum_path(cache).is_file()


def test_corrupt_cache_is_rebuilt(tmp_path):
    first = load_dataset("digits", tmp_path)
    cache = tmp_path / "digits" / CACHE_DIRNAME / "train_16px.pt"
    cache.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="unreadable dataset cache"):
        again = load_dataset("digits", tmp_path)
    assert torch.equal(again.train.x, first.train.x)
    assert torch.load(cache, weights_only=True)["x"].shape == (1300, 1, 16, 16)


# ---------------------------------------------------------------------------------------------------------------
# errors (unpatched torchvision)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("cifar10", "data.download: true"),
        ("cifar100", "data.download: true"),
        ("svhn", "data.download: true"),
        ("stl10", "data.download: true"),
        ("miniimagenet", "train.csv"),
        ("tinyimagenet", "val_annotations.txt"),
    ],
)
def test_missing_files_raise_with_hint(tmp_path, name, hint):
    with pytest.raises(FileNotFoundError) as err:
        load_dataset(name, tmp_path)
    message = str(err.value)
    assert name in message and str(tmp_path) in message and hint in message


def test_corrupted_files_are_not_reported_missing(tmp_path):
    (tmp_path / "svhn").mkdir()
    for split in ("train", "test"):
        (tmp_path / "svhn" / f"{split}_32x32.mat").write_bytes(b"partial download")
    with pytest.raises(DatasetError, match=r"svhn: .*train_32x32.mat does not match its published md5 \w+ \(and 1 "
                                           r"more file\(s\)\): a corrupted or partial download"):
        load_dataset("svhn", tmp_path)


def test_junk_cifar_files_name_the_first_bad_file(tmp_path):
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]:
        (folder / name).write_bytes(b"\x80junk" * 10)
    with pytest.raises(DatasetError) as err:
        load_dataset("cifar10", tmp_path)
    assert str(err.value).startswith(f"cifar10: {folder / 'data_batch_1'} does not match its published md5 "
                                     "c99cafc152244af753f735de768cd75f (and 6 more file(s))")


def test_download_without_network_says_where_to_put_the_files(tmp_path, monkeypatch):
    import urllib.error

    def offline(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", offline)
    with pytest.raises(DatasetError) as err:
        load_dataset("cifar10", tmp_path, download=True)
    assert str(err.value) == (
        "cifar10: data.download=true could not fetch the files ([Errno -3] Temporary failure in name resolution); "
        "without network access, download them on a machine that has it (`python -m mutexmatch.datasets download "
        f"cifar10 --root DIR`) and copy cifar-10-batches-py/ into {tmp_path / 'cifar10'}")


def test_argument_errors(tmp_path):
    # the registry's names (a dataset module added to the package joins the list; the built-ins are always there)
    assert {"cifar10", "cifar100", "digits", "miniimagenet", "stl10", "svhn", "tinyimagenet"} <= set(DATASETS)
    with pytest.raises(ValueError, match=re.escape(", ".join(sorted(DATASETS)))):
        load_dataset("imagenet", tmp_path)
    with pytest.raises(ValueError, match="data.image_size"):
        load_dataset("cifar10", tmp_path, image_size=64)
    with pytest.raises(ValueError, match="data.image_size"):
        load_dataset("digits", tmp_path, image_size=4)
    with pytest.raises(ValueError, match="svhn_extra"):
        load_dataset("cifar10", tmp_path, svhn_extra=True)


BUILTIN_FACTS = {  # the paper's protocol for each built-in dataset: a module added beside them leaves these as they are
    "cifar10": (10, 32, True, 4, "constant"),
    "cifar100": (100, 32, True, 4, "constant"),
    "svhn": (10, 32, False, 4, "constant"),
    "stl10": (10, 96, True, 4, "constant"),
    "miniimagenet": (100, 80, True, 10, "reflect"),
    "tinyimagenet": (200, 64, False, 4, "constant"),
    "digits": (10, 16, False, 2, "constant"),
}


def test_registry_facts():
    assert {n: (i.num_classes, i.image_size, i.flip, i.pad, i.pad_mode) for n, i in INFO.items()
            if n in BUILTIN_FACTS} == BUILTIN_FACTS
    assert [n for n in BUILTIN_FACTS if INFO[n].has_unlabeled_split] == ["stl10"]
    assert INFO["cifar10"].mean[0] == pytest.approx(125.3 / 255)


def test_the_smallest_class_declared_for_digits_is_the_real_one(tmp_path):
    train = load_dataset("digits", tmp_path).train
    assert int(torch.bincount(train.y).min()) == INFO["digits"].train_per_class_min


# ---------------------------------------------------------------------------------------------------------------
# data.normalization: the released code's constants (its SVHN and STL-10 statistics divided by 255 twice)

# The released code's transforms.Normalize arguments, written out here as it writes them (not imported).
RELEASED_NORMALIZE = {
    "svhn": ((0.4380 / 255, 0.4440 / 255, 0.4730 / 255), (0.1751 / 255, 0.1771 / 255, 0.1744 / 255)),
    "stl10": ((0.4409 / 255, 0.4279 / 255, 0.3868 / 255), (0.2309 / 255, 0.2262 / 255, 0.2237 / 255)),
}


@pytest.mark.parametrize("name", sorted(RELEASED_NORMALIZE))
def test_released_normalization_gives_the_released_tensors(tmp_path, patched_torchvision, name) -> None:
    from torchvision.transforms import functional as TF

    from mutexmatch.data.augment import normalize

    if name == "svhn":
        _write_svhn(tmp_path / "svhn", "train", 5, 1)
        _write_svhn(tmp_path / "svhn", "test", 3, 2)
    else:
        _write_stl10(tmp_path)
    released = load_dataset(name, tmp_path, normalization="released")
    correct = load_dataset(name, tmp_path)
    x = released.train.x[:3]
    # the released pipeline: ToTensor (pixel / 255) then Normalize(mean, std), image by image
    mean, std = RELEASED_NORMALIZE[name]
    want = torch.stack([TF.normalize(img.float() / 255, mean, std) for img in x])
    got = normalize(x, released.info.mean, released.info.std, channels_last=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)  # values reach ~1500: compare relatively
    assert got.abs().max() > 100  # almost the identity scaled by 255, as released
    ours = normalize(x, correct.info.mean, correct.info.std, channels_last=False)
    assert ours.abs().max() < 10 and correct.info.mean == INFO[name].mean


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "miniimagenet"])
def test_released_normalization_equals_correct_where_the_released_code_had_no_bug(name) -> None:
    info = INFO[name]
    assert info.released_mean == info.mean and info.released_std == info.std


def test_released_normalization_needs_a_dataset_of_the_released_code(tmp_path) -> None:
    with pytest.raises(ValueError, match="the released code has no digits dataset; use `correct`"):
        load_dataset("digits", tmp_path, normalization="released")
    with pytest.raises(ValueError, match=r"data.normalization='sloppy': must be one of correct, released"):
        load_dataset("digits", tmp_path, normalization="sloppy")
