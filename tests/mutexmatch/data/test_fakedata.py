"""Tests for mutexmatch.data.fake over the registry: every registered dataset with files writes them in its real
on-disk format, its real reader (torchvision's for CIFAR/SVHN/STL-10, our CSV and folder readers for mini-/Tiny-
ImageNet) reads them with the requested class-balanced sizes and its declared facts, and later loads need no
checksum bypass (they read the caches)."""

import numpy as np
import pytest
import torch

from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.fake import FAKE_DATASETS, FakeSize, write_fake_dataset, write_fake_root
from mutexmatch.data.load import load_dataset
from mutexmatch.data.splits import make_split
from mutexmatch.data.torchvision_reader import TorchvisionDataset

torch.set_num_threads(1)


def _small(name: str) -> FakeSize:
    """Two train and one test image per class (and four images of a further split where the dataset has one)."""
    return FakeSize(2, 1, 4 if DATASETS[name].fake_size.unlabeled else 0)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_fake_root(tmp_path_factory.mktemp("fake"), sizes={n: _small(n) for n in FAKE_DATASETS}, seed=3)


def test_every_registered_dataset_with_files_is_generated():
    assert set(FAKE_DATASETS) == {n for n, d in DATASETS.items() if d.needs_files}
    assert all(DATASETS[n].fake_size is not None for n in FAKE_DATASETS)


@pytest.mark.parametrize("name", FAKE_DATASETS)
def test_real_loaders_read_balanced_splits(root, name):
    info, size = DATASETS[name].info, _small(name)
    bundle = load_dataset(name, root)
    side = info.image_size
    assert bundle.train.x.shape == (size.train_per_class * info.num_classes, info.channels, side, side)
    assert bundle.test.x.shape == (size.test_per_class * info.num_classes, info.channels, side, side)
    assert bundle.train.y.bincount(minlength=info.num_classes).tolist() == [size.train_per_class] * info.num_classes
    assert bundle.test.y.bincount(minlength=info.num_classes).tolist() == [size.test_per_class] * info.num_classes
    assert bundle.train.x.dtype == torch.uint8 and bundle.train.x.float().std() > 30  # random pixels, not blank
    assert (bundle.extra_unlabeled is not None) == info.has_unlabeled_split
    if bundle.extra_unlabeled is not None:
        assert len(bundle.extra_unlabeled) == size.unlabeled


@pytest.mark.parametrize("name", FAKE_DATASETS)
def test_generated_files_are_the_files_the_dataset_lists(root, name):
    dataset = DATASETS[name]
    ddir = root / dataset.folder
    assert ddir.is_dir()
    assert [rel for rel, _ in dataset.files() if not (ddir / rel).is_file()] == []


@pytest.mark.parametrize("name", FAKE_DATASETS)
def test_default_fake_size_holds_the_datasets_label_rules(name):
    dataset = DATASETS[name]
    size, info = dataset.fake_size, dataset.info
    assert size.train_per_class >= 1 and size.test_per_class >= 1
    assert size.train_per_class <= (info.train_per_class_min or size.train_per_class)  # never more than the real one
    for labels in dataset.allowed_num_labels or ():
        assert size.train_per_class * info.num_classes >= labels, labels


def test_stl10_folds_and_unlabeled(tmp_path):
    root = write_fake_root(tmp_path, ["stl10"], sizes={"stl10": FakeSize(5, 1, 4)}, seed=3)
    bundle = load_dataset("stl10", root)
    assert bundle.extra_unlabeled.x.shape == (4, 3, 96, 96)
    assert len(bundle.predefined_folds) == 10
    assert all(len(f) == 10 and len(set(f.tolist())) == 10 for f in bundle.predefined_folds)  # 50 train / 5
    labels = bundle.train.y.numpy()
    one = make_split(labels, dataset="stl10", num_labels=10, num_classes=10, fold=2,
                     predefined_folds=bundle.predefined_folds, num_extra_unlabeled=4)
    np.testing.assert_array_equal(one.labeled, bundle.predefined_folds[2])
    every = make_split(labels, dataset="stl10", num_labels=50, num_classes=10, fold=0,
                       predefined_folds=bundle.predefined_folds, num_extra_unlabeled=4)
    assert len(every.labeled) == 50


def test_caches_serve_later_loads_without_the_checksum_bypass(root):
    """Outside write_fake_root the bypass is gone (see the next test), yet loads succeed: they read the caches, as
    trials in other processes do."""
    for dataset in DATASETS.values():
        if isinstance(dataset, TorchvisionDataset):
            module = __import__(dataset.tv_class.__module__, fromlist=["check_integrity"])
            assert module.check_integrity.__module__ == "torchvision.datasets.utils"  # restored
    assert len(load_dataset("cifar10", root).train.y) == 2 * 10


def test_without_decoding_torchvision_rejects_the_generated_checksums(tmp_path):
    write_fake_root(tmp_path, ["svhn"], sizes={"svhn": FakeSize(1, 1)}, decode=False)
    with pytest.raises(ValueError, match="does not match its published md5"):  # registry.DatasetError
        load_dataset("svhn", tmp_path)


def test_bad_arguments_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"name='digits'"):
        write_fake_dataset("digits", tmp_path)
    with pytest.raises(ValueError, match=r"train_per_class >= 1"):
        write_fake_dataset("cifar10", tmp_path, FakeSize(0, 1))
    with pytest.raises(ValueError, match=r"unknown dataset\(s\) \['imagenet'\]"):
        write_fake_root(tmp_path, ["imagenet"])


@pytest.mark.parametrize("name", [n for n in FAKE_DATASETS if DATASETS[n].extra_split])
def test_the_extra_split_is_generated_and_cached_too(root, name):
    """A smoke run with ``data.svhn_extra`` (usb_classic_cv.yaml) reads the extra split's cache, which the
    generation left: no md5 bypass is active here."""
    size = _small(name)
    bundle = load_dataset(name, root, svhn_extra=True)
    assert len(bundle.train) == size.train_per_class * DATASETS[name].info.num_classes + size.unlabeled


def test_never_writes_over_files_it_did_not_make(tmp_path, capsys):
    """Adversarial finding #13 (data loss): `python -m mutexmatch.fakedata ROOT` over a folder holding real CIFAR-10
    files overwrote them with random pixels, rc 0, and later runs trained on noise."""
    from mutexmatch.fakedata import main

    real = tmp_path / "cifar10" / "cifar-10-batches-py"
    real.mkdir(parents=True)
    (real / "data_batch_1").write_bytes(b"the user's photos")
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), "--datasets", "svhn,cifar10", "--test-per-class", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and str(real / "data_batch_1") in err and "did not write" in err
    assert (real / "data_batch_1").read_bytes() == b"the user's photos"
    assert not (tmp_path / "svhn").exists()  # refused before anything is written, for every dataset named
    # A hand-edited generated file is not the generator's any more either.
    fake = write_fake_root(tmp_path / "fake", ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})
    write_fake_root(fake, ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})  # its own files: rewritten
    (fake / "cifar10" / "cifar-10-batches-py" / "test_batch").write_bytes(b"replaced by hand")
    with pytest.raises(ValueError, match="test_batch"):
        write_fake_root(fake, ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})
