"""Tests for mutexmatch.fakedata: generated datasets are read by the real loaders (torchvision's readers for
CIFAR/SVHN/STL-10, our CSV and folder readers for mini-/Tiny-ImageNet) with the requested class-balanced sizes, and
later loads need no checksum bypass (they read the caches)."""

import numpy as np
import pytest
import torch

from mutexmatch.datasets import DATASETS, load_dataset
from mutexmatch.fakedata import FAKE_DATASETS, FAKE_SIZES, FakeSize, write_fake_dataset, write_fake_root
from mutexmatch.splits import make_split

torch.set_num_threads(1)

SMALL = {"cifar10": FakeSize(3, 1), "cifar100": FakeSize(2, 1), "svhn": FakeSize(3, 2),
         "stl10": FakeSize(5, 1, 4), "miniimagenet": FakeSize(2, 1), "tinyimagenet": FakeSize(1, 1)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_fake_root(tmp_path_factory.mktemp("fake"), sizes=SMALL, seed=3)


@pytest.mark.parametrize("name", FAKE_DATASETS)
def test_real_loaders_read_balanced_splits(root, name):
    info, size = DATASETS[name], SMALL[name]
    bundle = load_dataset(name, root)
    side = info.image_size
    assert bundle.train.x.shape == (size.train_per_class * info.num_classes, info.channels, side, side)
    assert bundle.test.x.shape == (size.test_per_class * info.num_classes, info.channels, side, side)
    assert bundle.train.y.bincount(minlength=info.num_classes).tolist() == [size.train_per_class] * info.num_classes
    assert bundle.test.y.bincount(minlength=info.num_classes).tolist() == [size.test_per_class] * info.num_classes
    assert bundle.train.x.dtype == torch.uint8 and bundle.train.x.float().std() > 30  # random pixels, not blank


def test_stl10_folds_and_unlabeled(root):
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


def test_default_sizes_hold_the_largest_labeled_sets_of_the_experiments():
    # CIFAR-10 4000, CIFAR-100 10000, SVHN 250, STL-10 5000, mini-ImageNet 1000, Tiny-ImageNet 5000 labels.
    largest = {"cifar10": 4000, "cifar100": 10000, "svhn": 250, "stl10": 5000, "miniimagenet": 1000,
               "tinyimagenet": 5000}
    for name, labels in largest.items():
        assert FAKE_SIZES[name].train_per_class * DATASETS[name].num_classes >= labels, name
    assert FAKE_SIZES["stl10"].train_per_class * 10 == 5000  # 5000 labels = every labeled image, folds of 1000


def test_caches_serve_later_loads_without_the_checksum_bypass(root):
    """Outside write_fake_root the bypass is gone (see the next test), yet loads succeed: they read the caches, as
    trials in other processes do."""
    import torchvision.datasets.cifar

    assert torchvision.datasets.cifar.check_integrity.__module__ == "torchvision.datasets.utils"  # restored
    assert len(load_dataset("cifar10", root).train.y) == 3 * 10


def test_without_decoding_torchvision_rejects_the_generated_checksums(tmp_path):
    write_fake_root(tmp_path, ["svhn"], sizes={"svhn": FakeSize(1, 1)}, decode=False)
    with pytest.raises(ValueError, match="does not match its published md5"):  # datasets.DatasetError
        load_dataset("svhn", tmp_path)


def test_bad_arguments_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"name='digits'"):
        write_fake_dataset("digits", tmp_path)
    with pytest.raises(ValueError, match=r"train_per_class >= 1"):
        write_fake_dataset("cifar10", tmp_path, FakeSize(0, 1))
    with pytest.raises(ValueError, match=r"unknown dataset\(s\) \['imagenet'\]"):
        write_fake_root(tmp_path, ["imagenet"])
