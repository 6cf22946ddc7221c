"""Issue 41 item 2: the class-wise scores long-tailed papers report, equal to scikit-learn's (the reference
implementation every other codebase uses), and head/medium/tail thirds by the split's labeled counts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score, f1_score
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from mutexmatch import metrics as M
from mutexmatch.config import parse_config
from mutexmatch.training import Callback, Trainer
from mutexmatch.training.callbacks import TEST_CONFUSION
from mutexmatch.training.class_scores import (balanced_accuracy, class_groups, class_scores, confusion_matrix,
                                              group_accuracy, macro_f1, recall)

C = 7
# scikit-learn says so when a class is predicted but never a label, one of the cases compared here
pytestmark = pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true:UserWarning")


def _labels(seed: int, n: int = 300, missing_true: int | None = None, never_predicted: int | None = None):
    """Random labels and predictions over C classes, skewed (a long tail), optionally without one class as a label
    or as a prediction (the cases where scikit-learn drops or zeroes a class)."""
    g = np.random.default_rng(seed)
    p = 0.5 ** np.arange(C) / (0.5 ** np.arange(C)).sum()
    y, pred = g.choice(C, n, p=p), g.choice(C, n, p=p[::-1])
    right = g.random(n) < 0.4
    pred[right] = y[right]
    if missing_true is not None:
        y[y == missing_true] = (missing_true + 1) % C
    if never_predicted is not None:
        pred[pred == never_predicted] = (never_predicted + 2) % C
    return y, pred


def _conf(y, pred) -> np.ndarray:
    return confusion_matrix(torch.from_numpy(y), torch.from_numpy(pred), C).numpy()


CASES = [dict(seed=s) for s in range(4)] + [dict(seed=5, missing_true=3), dict(seed=6, never_predicted=0),
                                            dict(seed=7, missing_true=6, never_predicted=2)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_balanced_accuracy_macro_f1_and_recall_equal_scikit_learn(case):
    y, pred = _labels(**case)
    conf = _conf(y, pred)
    assert (conf == sk_confusion_matrix(y, pred, labels=range(C))).all()
    assert balanced_accuracy(conf) == pytest.approx(balanced_accuracy_score(y, pred), abs=1e-12)
    assert macro_f1(conf) == pytest.approx(f1_score(y, pred, average="macro", zero_division=0), abs=1e-12)
    present = np.isin(np.arange(C), y)
    r = recall(conf)
    assert np.isnan(r[~present]).all()
    for c in np.flatnonzero(present):
        assert r[c] == pytest.approx(((pred == c) & (y == c)).sum() / (y == c).sum(), abs=1e-12)


def test_on_a_balanced_test_set_balanced_accuracy_is_accuracy_and_each_third_its_classes_mean_recall():
    g = np.random.default_rng(0)
    y = np.repeat(np.arange(C), 40)
    pred = np.where(g.random(len(y)) < 0.5, y, g.integers(0, C, len(y)))
    conf = _conf(y, pred)
    acc = (pred == y).mean()
    assert balanced_accuracy(conf) == pytest.approx(acc, abs=1e-12)
    assert balanced_accuracy(conf) != pytest.approx(balanced_accuracy(_conf(*_labels(0))), abs=1e-3)  # not constant
    groups = class_groups([50, 40, 40, 30, 20, 10, 5])
    for classes in groups.values():
        assert group_accuracy(conf, classes) == pytest.approx(recall(conf)[classes].mean(), abs=1e-12)
    # the thirds cover every test image once: their accuracies weighted by images give the accuracy
    weights = [conf[c].sum() for c in groups.values()]
    assert np.average([group_accuracy(conf, c) for c in groups.values()], weights=weights) == pytest.approx(acc)


def test_group_accuracy_counts_the_groups_test_images_whatever_they_were_predicted_as():
    conf = np.array([[8, 2, 0], [1, 1, 0], [0, 5, 3]])   # rows: true class
    assert group_accuracy(conf, np.array([0])) == 0.8
    assert group_accuracy(conf, np.array([1, 2])) == 4 / 10    # (1 + 3) of the 2 + 8 images of classes 1 and 2
    assert group_accuracy(conf, np.array([2, 1])) == 4 / 10
    assert math.isnan(group_accuracy(np.zeros((3, 3), int), np.array([0])))


@pytest.mark.parametrize("counts, head, medium, tail", [
    ([500, 300, 180, 108, 65, 39, 23, 14, 8, 5], [0, 1, 2], [3, 4, 5, 6], [7, 8, 9]),      # USB's rule, γ = 100
    ([5, 8, 14, 23, 39, 65, 108, 180, 300, 500], [9, 8, 7], [6, 5, 4, 3], [2, 1, 0]),      # reversed ("inconsistent")
    ([4] * 10, [0, 1, 2], [3, 4, 5, 6], [7, 8, 9]),                                         # balanced: index order
    ([9, 3, 9, 3, 9, 3, 1], [0, 2], [4, 1, 3], [5, 6]),                                     # ties: lower index first
    ([3, 5], [], [1, 0], []),                                                               # C < 3: all medium
    ([1, 2, 3], [2], [1], [0]),
])
def test_thirds_by_labeled_count(counts, head, medium, tail):
    groups = class_groups(counts)
    assert {g: c.tolist() for g, c in groups.items()} == {"head": head, "medium": medium, "tail": tail}


@pytest.mark.parametrize("c, sizes", [(10, (3, 4, 3)), (100, (33, 34, 33)), (200, (66, 68, 66)), (11, (3, 5, 3))])
def test_head_and_tail_hold_c_div_3_classes_and_medium_the_rest(c, sizes):
    groups = class_groups(np.arange(c))
    assert tuple(len(groups[g]) for g in ("head", "medium", "tail")) == sizes
    assert sorted(np.concatenate(list(groups.values())).tolist()) == list(range(c))


def test_class_scores_names_every_metric_the_trainer_declares_and_leaves_out_what_has_no_value():
    y, pred = _labels(1, missing_true=4)
    conf = _conf(y, pred)
    scores = class_scores(conf, class_groups(np.bincount(y, minlength=C)))
    assert scores[M.TEST_BALANCED_ACC] == pytest.approx(balanced_accuracy_score(y, pred))
    assert set(scores) == {M.TEST_BALANCED_ACC, M.TEST_MACRO_F1, *M.GROUP_ACC.values(),
                           *(M.recall_metric(c) for c in range(C) if c != 4)}
    assert all(M.is_logged(k) for k in scores)
    assert M.GROUP_ACC["head"] not in class_scores(conf[:2, :2], class_groups([1, 2]))


def _predictions(model, evaluator, x, y) -> np.ndarray:
    with torch.no_grad():
        return torch.cat([lg.argmax(1) for lg, _ in evaluator.logits(model, x, y)]).numpy()


def test_a_run_logs_the_scores_of_its_ema_models_predictions_and_writes_the_test_confusion_matrix(tmp_path):
    """Two steps on digits with a validation split: the logged test/acc, test/balanced_acc, test/macro_f1 and
    val/balanced_acc are scikit-learn's over the EMA model's predictions; confusion_matrix.json holds the test
    matrix and the split's labeled counts, and the evaluation event carries the matrix (MLflow's class_counts)."""
    cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20, "val_per_class": 5},
                        "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
                        "train": {"iterations": 2, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                                  "progress": False}, "output_dir": str(tmp_path / "run")})
    events, recorder = [], Callback()
    recorder.on_eval = events.append
    trainer = Trainer(cfg, [recorder])
    trainer.fit()
    ev, model = trainer.evaluator, trainer.ema.module
    y, pred = trainer.bundle.test.y.numpy(), _predictions(model, ev, trainer.bundle.test.x, trainer.bundle.test.y)
    vx, vy = ev.val_data()
    (line,) = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert logged[M.TEST_ACC] == pytest.approx((y == pred).mean(), abs=1e-12)
    assert logged[M.TEST_BALANCED_ACC] == pytest.approx(balanced_accuracy_score(y, pred), abs=1e-12)
    assert logged[M.TEST_MACRO_F1] == pytest.approx(f1_score(y, pred, average="macro", zero_division=0), abs=1e-12)
    assert logged[M.VAL_BALANCED_ACC] == pytest.approx(
        balanced_accuracy_score(vy.numpy(), _predictions(model, ev, vx, vy)), abs=1e-12)
    # validation images need not be balanced (an image folder's val/): there it is not the accuracy
    skewed = torch.cat([torch.nonzero(trainer.bundle.test.y == c)[:5 * c + 1, 0] for c in range(10)])
    sx, sy = trainer.bundle.test.x[skewed], trainer.bundle.test.y[skewed]
    spred = _predictions(model, ev, sx, sy)
    assert ev.val_scores(model, sx, sy) == pytest.approx({
        M.VAL_ACC: (spred == sy.numpy()).mean(), M.VAL_BALANCED_ACC: balanced_accuracy_score(sy.numpy(), spred)})
    matrix = sk_confusion_matrix(y, pred, labels=range(10))
    saved = json.loads((tmp_path / "run" / "confusion_matrix.json").read_text())
    assert saved["step"] == 2 and saved["matrix"] == matrix.tolist()
    assert saved["labeled_per_class"] == [2] * 10 and saved["groups"]["head"] == [0, 1, 2]
    assert (events[0].class_counts[TEST_CONFUSION] == matrix).all()
