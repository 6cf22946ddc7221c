"""Long-tailed splits (issue 41 item 1): USB's per-class counts, checked by brute force and against semilearn's
``make_imbalance_data``, and USB's labeled/unlabeled draw, index for index against semilearn 0.3.2's
``sample_labeled_unlabeled_data`` (skipped only where semilearn is not installed, as the USB lockstep tests are)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mutexmatch.data.longtail import imbalance_counts, longtail_indices
from mutexmatch.data.splits import make_split

# (C, N_1, gamma): small and USB-sized, gammas that divide evenly and ones that do not, reversed ones.
SETTINGS = [(2, 10, 10), (3, 500, 100), (10, 500, 100), (10, 1500, -100), (10, 4000, 100), (10, 3000, -100),
            (100, 150, 10), (100, 50, -15), (7, 33, 2.5), (5, 20, 1), (10, 20, -10), (4, 1, 3)]


@pytest.mark.parametrize("num_classes, head, gamma", SETTINGS)
def test_counts_brute_force(num_classes, head, gamma):
    """USB's rule from its definition: n_c = floor(N_1 * |gamma|^(-c/(C-1))) (within a float's rounding), the last
    class floor(N_1/|gamma|), non-increasing, and a negative gamma the same list reversed; ceil rounds up."""
    counts = imbalance_counts(head, gamma, num_classes)
    assert len(counts) == num_classes and all(isinstance(n, int) for n in counts)
    forward = counts[::-1] if gamma < 0 else counts
    assert forward == sorted(forward, reverse=True) and forward[0] == head
    assert forward[-1] == int(head / abs(gamma))
    for c, n in enumerate(forward):
        exact = head * abs(gamma) ** (-c / (num_classes - 1))
        assert exact - 1 - 1e-9 < n <= exact + 1e-9
    ceil = imbalance_counts(head, gamma, num_classes, rule="ceil")
    ceil_forward = ceil[::-1] if gamma < 0 else ceil
    for c, n in enumerate(ceil_forward):
        exact = head * abs(gamma) ** (-c / (num_classes - 1))
        assert exact - 1e-9 <= n < exact + 1 + 1e-9
    assert ceil_forward[-1] == math.ceil(head / abs(gamma))


def test_counts_refuse_bad_values():
    with pytest.raises(ValueError, match=r"labeled_ratio=0\.5: .*>= 1"):
        imbalance_counts(10, 0.5, 10)
    with pytest.raises(ValueError, match=r"2 classes or more"):
        imbalance_counts(10, 10, 1)
    with pytest.raises(ValueError, match=r"rule='round'"):
        imbalance_counts(10, 10, 10, rule="round")


def _cifar_like(num_classes: int, per_class: int, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    np.random.default_rng(seed).shuffle(labels)
    return labels


def test_draw_counts_disjoint_and_rest_of_pool():
    labels = _cifar_like(10, 60)
    lb_counts = imbalance_counts(50, 10, 10)
    lb, ulb = longtail_indices(labels, lb_counts, None, 10, seed=0)
    assert np.bincount(labels[lb], minlength=10).tolist() == lb_counts
    assert np.intersect1d(lb, ulb).size == 0
    assert np.union1d(lb, ulb).size == labels.size          # no unlabeled head: the rest of every class
    ulb_counts = imbalance_counts(8, -4, 10)
    lb2, ulb2 = longtail_indices(labels, lb_counts, ulb_counts, 10, seed=0)
    np.testing.assert_array_equal(lb, lb2)
    assert np.bincount(labels[ulb2], minlength=10).tolist() == ulb_counts
    assert np.intersect1d(lb2, ulb2).size == 0


def test_draw_refuses_too_small_class_and_keeps_global_rng():
    labels = _cifar_like(3, 20)
    np.random.seed(9)
    before = np.random.random(2)
    np.random.seed(9)
    longtail_indices(labels, [15, 8, 1], [5, 5, 5], 3, seed=1)
    np.testing.assert_array_equal(np.random.random(2), before)
    with pytest.raises(ValueError, match=r"class 0 has 20 images.*15 labeled \+ 6 unlabeled"):
        longtail_indices(labels, [15, 8, 1], [6, 5, 5], 3, seed=1)


def test_make_split_long_tailed_fold_is_seed_and_meta():
    labels = _cifar_like(10, 60)
    imb = SimpleNamespace(labeled_head=20, labeled_ratio=10, unlabeled_head=40, unlabeled_ratio=-10, rule="int")
    counts = imbalance_counts(20, 10, 10)
    split = make_split(labels, dataset="cifar10", num_labels=sum(counts), num_classes=10, fold=2, imbalance=imb)
    lb, ulb = longtail_indices(labels, counts, imbalance_counts(40, -10, 10), 10, seed=2)
    np.testing.assert_array_equal(split.labeled, lb)
    np.testing.assert_array_equal(split.unlabeled, np.concatenate([lb, ulb]))   # USB's include_lb_to_ulb
    assert split.meta["seed"] == 2 and split.meta["labeled_per_class"] == counts
    assert split.meta["imbalance"]["unlabeled_ratio"] == -10
    apart = make_split(labels, dataset="cifar10", num_labels=sum(counts), num_classes=10, fold=2, imbalance=imb,
                       unlabeled_includes_labeled=False)
    np.testing.assert_array_equal(apart.unlabeled, ulb)
    with pytest.raises(ValueError, match=r"data.num_labels=20: .*holds 78 labeled images"):
        make_split(labels, dataset="cifar10", num_labels=20, num_classes=10, fold=0, imbalance=imb)


def test_balanced_split_unchanged_by_the_option():
    labels = _cifar_like(10, 60)
    a = make_split(labels, dataset="cifar10", num_labels=40, num_classes=10, fold=1)
    assert "imbalance" not in a.meta and "labeled_per_class" not in a.meta   # digests of stored runs kept


# ------------------------------------------------------------------------------------------ semilearn reference
def _usb_utils(tmp_path: Path):
    """semilearn/datasets/utils.py loaded on its own (no package import: it needs only numpy and torch), its
    index dumps redirected from site-packages into ``tmp_path``."""
    spec = importlib.util.find_spec("semilearn")
    if spec is None:
        pytest.skip("USB reference not installed: `make usb-reference`")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "utils.py"
    mod_spec = importlib.util.spec_from_file_location("_usb_dataset_utils", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    module.base_dir = str(tmp_path)
    return module


# USB's classic_cv_imb settings (lb head, lb gamma, ulb head, ulb gamma) on CIFAR-10's and CIFAR-100's label
# vectors (5,000 / 500 images per class), and STL-10's "unknown" (no unlabeled head).
USB_SETTINGS = [(10, 5000, 500, 100, 4000, 100), (10, 5000, 1500, 100, 3000, 100), (10, 5000, 500, 100, 4000, -100),
                (10, 5000, 1500, 100, 3000, -100), (10, 5000, 500, 100, 4000, 1), (10, 5000, 500, 150, 4000, 150),
                (100, 500, 50, 10, 400, 10), (100, 500, 150, 10, 300, -10), (100, 500, 150, 15, 300, 15),
                (10, 500, 50, 10, None, 1)]


@pytest.mark.parametrize("num_classes, per_class, lb_head, lb_gamma, ulb_head, ulb_gamma", USB_SETTINGS)
def test_indices_equal_semilearn(tmp_path, num_classes, per_class, lb_head, lb_gamma, ulb_head, ulb_gamma):
    usb = _usb_utils(tmp_path)
    labels = _cifar_like(num_classes, per_class, seed=num_classes)
    lb_counts = imbalance_counts(lb_head, lb_gamma, num_classes)
    ulb_counts = None if ulb_head is None else imbalance_counts(ulb_head, ulb_gamma, num_classes)
    assert lb_counts == usb.make_imbalance_data(lb_head, num_classes, lb_gamma)
    for seed in range(3):
        args = SimpleNamespace(dataset="x", num_labels=lb_head, lb_imb_ratio=lb_gamma, ulb_imb_ratio=ulb_gamma,
                               seed=seed)
        np.random.seed(seed)   # USB's train.py seeds numpy's global RNG with args.seed before building the data
        # at ratio 1 USB's ulb_num_labels is the total over the classes; ours is the head, per class
        ulb_num = None if ulb_head is None else ulb_head * (num_classes if ulb_gamma == 1 else 1)
        usb_lb, usb_ulb = usb.sample_labeled_unlabeled_data(args, None, labels, num_classes, lb_head, ulb_num,
                                                            lb_gamma, ulb_gamma, load_exist=False)
        lb, ulb = longtail_indices(labels, lb_counts, ulb_counts, num_classes, seed=seed)
        np.testing.assert_array_equal(lb, usb_lb)
        np.testing.assert_array_equal(ulb, usb_ulb)
