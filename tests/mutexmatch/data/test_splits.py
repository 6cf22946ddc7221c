"""Tests for mutexmatch.data.splits: the released code's labeled draw, the balanced rule, validation, STL-10 folds,
and the saved split's digest."""

import json
import warnings

import numpy as np
import pytest

from mutexmatch.data.splits import (
    SPLIT_RULES,
    Split,
    balanced_labeled_indices,
    make_split,
    official_labeled_indices,
)


def _labels(n_per_class: int = 60, num_classes: int = 10, seed: int = 7) -> np.ndarray:
    """Unequal class sizes in shuffled order, so index arithmetic cannot hide mistakes."""
    rng = np.random.default_rng(seed)
    sizes = n_per_class + rng.integers(0, 15, size=num_classes)
    labels = np.repeat(np.arange(num_classes), sizes)
    rng.shuffle(labels)
    return labels


def _released_draw(labels: np.ndarray, num_labels: int, num_classes: int, seed: int) -> np.ndarray:
    """The released code's sample_labeled_data, written out from its rule."""
    np.random.seed(seed)
    per_class = num_labels // num_classes
    return np.concatenate([np.random.choice(np.where(labels == c)[0], per_class, False) for c in range(num_classes)])


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_official_rule_reproduces_released_draw(seed):
    labels = _labels()
    expected = _released_draw(labels, 40, 10, seed)
    got = official_labeled_indices(labels, 40, 10, seed)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


def test_official_rule_leaves_global_rng_untouched():
    np.random.seed(1234)
    reference = np.random.random(3)
    np.random.seed(1234)
    official_labeled_indices(_labels(), 40, 10, seed=2)
    np.testing.assert_array_equal(np.random.random(3), reference)


def test_make_split_official_fold_uses_seed_fold_plus_one():
    labels = _labels()
    for fold in range(5):
        split = make_split(labels, dataset="cifar10", num_labels=40, num_classes=10, fold=fold)
        np.testing.assert_array_equal(split.labeled, _released_draw(labels, 40, 10, fold + 1))
        assert split.meta["seed"] == fold + 1 and split.meta["rule"] == "official"
        # The released code trains on the whole train set as unlabeled data, labeled images included.
        np.testing.assert_array_equal(split.unlabeled, np.arange(len(labels)))
        assert split.val.size == 0


def test_balanced_rule_deterministic_and_class_balanced():
    labels = _labels()
    np.random.seed(5)
    global_before = np.random.get_state()[1].copy()
    a = balanced_labeled_indices(labels, 250, 10, seed=11)
    b = balanced_labeled_indices(labels, 250, 10, seed=11)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.random.get_state()[1], global_before)
    assert len(np.unique(a)) == 250
    np.testing.assert_array_equal(np.bincount(labels[a], minlength=10), np.full(10, 25))
    c = balanced_labeled_indices(labels, 250, 10, seed=12)
    assert not np.array_equal(np.sort(a), np.sort(c))


def test_excluded_images_are_never_drawn():
    labels = _labels()
    masked = labels.copy()
    masked[::2] = -1
    for rule in SPLIT_RULES.values():
        picked = rule(masked, 100, 10, 3)
        assert (picked % 2 == 1).all()


@pytest.mark.parametrize("rule", ["official", "balanced"])
def test_folds_differ(rule):
    labels = _labels()
    folds = [frozenset(make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=f, rule=rule).labeled)
             for f in range(5)]
    assert len(set(folds)) == 5


def test_balanced_allows_more_folds_than_official():
    labels = _labels()
    split = make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=9, rule="balanced")
    assert split.meta["seed"] == 10
    with pytest.raises(ValueError, match="data.fold"):
        make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=5, rule="official")


@pytest.mark.parametrize("rule", ["official", "balanced"])
def test_validation_is_disjoint_and_balanced(rule):
    labels = _labels()
    n = len(labels)
    split = make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=1, rule=rule, val_per_class=5)
    np.testing.assert_array_equal(np.bincount(labels[split.val], minlength=10), np.full(10, 5))
    assert not set(split.val) & set(split.labeled)
    assert not set(split.val) & set(split.unlabeled)
    assert set(split.unlabeled) == set(range(n)) - set(split.val)
    assert split.meta["val_per_class"] == 5 and split.meta["val_seed"] == 10_001

    strict = make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=1, rule=rule, val_per_class=5,
                        unlabeled_includes_labeled=False)
    np.testing.assert_array_equal(strict.val, split.val)
    assert not set(strict.labeled) & set(strict.unlabeled)
    assert set(strict.labeled) | set(strict.unlabeled) | set(strict.val) == set(range(n))


def test_official_draw_with_validation_runs_over_remaining_images():
    labels = _labels()
    split = make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=2, val_per_class=3)
    remaining = labels.copy()
    remaining[split.val] = -1
    np.testing.assert_array_equal(split.labeled, _released_draw(remaining, 40, 10, 3))


def test_extra_unlabeled_indices_follow_train():
    labels = _labels()
    n = len(labels)
    split = make_split(labels, dataset="x", num_labels=20, num_classes=10, fold=0, num_extra_unlabeled=7)
    np.testing.assert_array_equal(split.unlabeled[-7:], np.arange(n, n + 7))
    assert len(split.unlabeled) == n + 7


def test_digest_survives_save_load_and_detects_changes(tmp_path):
    split = make_split(_labels(), dataset="cifar10", num_labels=40, num_classes=10, fold=3, val_per_class=2)
    path = tmp_path / "runs" / "split.json"
    split.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["split.json"]  # no temp file left behind
    loaded = Split.load(path)
    assert loaded.digest() == split.digest()
    for name in ("labeled", "unlabeled", "val"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(split, name))
        assert getattr(loaded, name).dtype == np.int64
    assert loaded.meta == split.meta

    changed = Split(labeled=split.labeled.copy(), unlabeled=split.unlabeled, val=split.val, meta=dict(split.meta))
    changed.labeled[0] = changed.labeled[1]
    assert changed.digest() != split.digest()
    assert Split(split.labeled, split.unlabeled, split.val, {**split.meta, "fold": 4}).digest() != split.digest()

    doc = json.loads(path.read_text())
    assert doc["digest"] == split.digest()
    doc["labeled"][0] += 1
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="digest mismatch"):
        Split.load(path)


@pytest.mark.parametrize("damage, problem", [
    (lambda p: p.unlink(), "missing"),
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "not a valid split file"),  # a kill while copying it
    (lambda p: p.write_bytes(b"\xff\xfe\x00junk"), "not a valid split file"),
    (lambda p: p.write_text(p.read_text().replace('"labeled":[', '"labeled":[7,', 1)), "split digest mismatch"),
])
def test_a_damaged_split_file_is_rewritten_on_resume(tmp_path, damage, problem):
    split = make_split(_labels(), dataset="cifar10", num_labels=40, num_classes=10, fold=1)
    path = tmp_path / "split.json"
    split.save(path)
    damage(path)
    with pytest.warns(UserWarning, match=f"split.json: {problem}.*; rewritten from the run's split"):
        split.check_file(path)
    assert Split.load(path).digest() == split.digest()


def test_a_valid_split_file_of_another_split_is_refused_on_resume(tmp_path):
    path = tmp_path / "split.json"
    make_split(_labels(), dataset="cifar10", num_labels=40, num_classes=10, fold=2).save(path)
    split = make_split(_labels(), dataset="cifar10", num_labels=40, num_classes=10, fold=1)
    with pytest.raises(ValueError, match="split.json: holds another labeled split .* the dataset or its labels "
                                         "changed since the run started"):
        split.check_file(path)
    split.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split.check_file(path)  # the run's own file passes silently


def test_split_rejects_validation_overlap():
    with pytest.raises(ValueError, match="validation"):
        Split(labeled=np.array([1, 2]), unlabeled=np.array([3]), val=np.array([2]), meta={})


def _stl_like(seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), 500)
    rng.shuffle(labels)
    folds = [rng.choice(5000, 1000, replace=False) for _ in range(10)]
    return labels, folds


def test_stl10_predefined_folds():
    labels, folds = _stl_like()
    split = make_split(labels, dataset="stl10", num_labels=1000, num_classes=10, fold=3, predefined_folds=folds,
                       num_extra_unlabeled=50)
    np.testing.assert_array_equal(split.labeled, folds[3])
    assert split.meta["rule"] == "predefined" and split.meta["seed"] is None
    np.testing.assert_array_equal(split.unlabeled, np.arange(5050))

    full = make_split(labels, dataset="stl10", num_labels=5000, num_classes=10, fold=0, predefined_folds=folds)
    np.testing.assert_array_equal(full.labeled, np.arange(5000))

    with_val = make_split(labels, dataset="stl10", num_labels=1000, num_classes=10, fold=2, predefined_folds=folds,
                          val_per_class=4)
    np.testing.assert_array_equal(with_val.labeled, folds[2])
    assert not set(with_val.val) & set(folds[2])
    assert len(with_val.val) == 40


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_labels": 45}, "data.num_labels"),
        ({"num_labels": 0}, "data.num_labels"),
        ({"num_labels": 1000}, "data.num_labels"),  # more than any class holds
        ({"num_labels": 4.0}, "data.num_labels"),
        ({"fold": -1}, "data.fold"),
        ({"fold": 5}, "data.fold"),
        ({"rule": "random"}, "data.split_rule"),
        ({"val_per_class": -1}, "data.val_per_class"),
        ({"val_per_class": 500}, "data.val_per_class"),
        ({"num_labels": 550, "val_per_class": 10}, "data.num_labels"),  # fits only without the val images
        ({"num_extra_unlabeled": -3}, "num_extra_unlabeled"),
    ],
)
def test_value_errors_name_the_field(kwargs, field):
    args = {"dataset": "cifar10", "num_labels": 40, "num_classes": 10, "fold": 0, **kwargs}
    with pytest.raises(ValueError, match=field) as err:
        make_split(_labels(), **args)
    if "num_labels" in kwargs and "val_per_class" not in kwargs:
        assert str(kwargs["num_labels"]) in str(err.value)


def test_num_labels_message_names_value_and_class_count():
    with pytest.raises(ValueError, match=r"data.num_labels=45 .*10 classes"):
        make_split(_labels(), dataset="cifar10", num_labels=45, num_classes=10, fold=0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_labels": 5010}, "data.num_labels"),   # drawn (not a fold's size): more than a class holds
        ({"num_labels": 1000, "fold": 10}, "data.fold"),
        ({"num_labels": 5000, "val_per_class": 1}, "data.val_per_class"),
    ],
)
def test_stl10_value_errors_name_the_field(kwargs, field):
    labels, folds = _stl_like()
    args = {"dataset": "stl10", "num_classes": 10, "fold": 0, "predefined_folds": folds, **kwargs}
    with pytest.raises(ValueError, match=field):
        make_split(labels, **args)


def test_labels_out_of_range_rejected():
    labels = _labels()
    labels[0] = 10
    with pytest.raises(ValueError, match="labels"):
        make_split(labels, dataset="x", num_labels=40, num_classes=10, fold=0)


def test_the_trainer_rewrites_a_corrupt_split_file_when_it_resumes(tmp_path):
    from mutexmatch.training import main

    run = tmp_path / "run"
    args = ["--set", "train.iterations=4", "--set", "train.eval_interval=2", "--set", "train.batch_size=4",
            "--set", "train.mu=2", "--set", "train.progress=false", "--set", f"output_dir={run}",
            "--set", f"data.root={tmp_path / 'data'}"]
    assert main(args + ["--stop-at", "2"]) == 0
    good = (run / "split.json").read_bytes()
    (run / "split.json").write_bytes(good[: len(good) // 2])  # what a kill while copying the folder leaves
    with pytest.warns(UserWarning, match="split.json: not a valid split file"):
        assert main(["--resume", str(run)]) == 0
    assert (run / "split.json").read_bytes() == good


@pytest.mark.parametrize("num_labels", [40, 100])
def test_stl10_usb_cv_label_counts_are_drawn_by_the_rule(num_labels):
    """USB-CV's 40 and 100 STL-10 labels are no predefined fold: drawn per class by the split rule from the labeled
    train images (issue 42 item 4), the same draw as without folds."""
    labels, folds = _stl_like()
    split = make_split(labels, dataset="stl10", num_labels=num_labels, num_classes=10, fold=1, predefined_folds=folds,
                       num_extra_unlabeled=50)
    plain = make_split(labels, dataset="stl10", num_labels=num_labels, num_classes=10, fold=1, num_extra_unlabeled=50)
    np.testing.assert_array_equal(split.labeled, plain.labeled)
    assert split.meta["rule"] == "official" and len(split.labeled) == num_labels
    assert np.bincount(labels[split.labeled], minlength=10).tolist() == [num_labels // 10] * 10
    np.testing.assert_array_equal(split.unlabeled, np.arange(5050))
