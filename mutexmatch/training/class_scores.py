"""Class-wise scores of one evaluation, all read off its confusion matrix: balanced accuracy, macro F1, the recall
of each class and the accuracy of the head, medium and tail thirds of the classes (what long-tailed semi-supervised
papers report beside accuracy; issue 41, docs/longtail.md "Metrics").

The formulas are scikit-learn's, so the numbers compare with other code: balanced accuracy is
``balanced_accuracy_score`` (the mean recall over the classes that have a test image), macro F1 is
``f1_score(average="macro")`` (the mean F1 over the classes that are a label or a prediction; a class never
predicted has F1 0).
"""

from __future__ import annotations

import numpy as np
import torch

from mutexmatch import metrics as M

__all__ = ["GROUPS", "confusion_matrix", "add_to_confusion", "recall", "balanced_accuracy", "macro_f1", "class_groups",
           "group_accuracy", "class_scores", "confusion_record"]

GROUPS = tuple(M.GROUP_ACC)   # head, medium, tail


def confusion_matrix(y: torch.Tensor, pred: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``counts[true, predicted]`` (int64, on the tensors' device) of labels ``y`` and predictions ``pred``."""
    counts = torch.zeros(num_classes, num_classes, dtype=torch.long, device=y.device)
    return add_to_confusion(counts, y, pred)


def add_to_confusion(counts: torch.Tensor, y: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """``counts`` (C x C, int64) plus one per (label, prediction) pair, in place. index_add_ rather than bincount:
    CUDA's bincount reads its input's maximum, so it would make the host wait for the device at every batch."""
    idx = y.long() * counts.shape[1] + pred.long()
    counts.view(-1).index_add_(0, idx, torch.ones_like(idx))
    return counts


def recall(conf: np.ndarray) -> np.ndarray:
    """Each class's recall, the share of its test images predicted as it; NaN for a class without one."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.diag(conf) / conf.sum(axis=1)


def balanced_accuracy(conf: np.ndarray) -> float:
    """The mean recall over the classes with a test image (``sklearn.metrics.balanced_accuracy_score``)."""
    r = recall(conf)
    r = r[~np.isnan(r)]
    return float(r.mean()) if len(r) else float("nan")


def macro_f1(conf: np.ndarray) -> float:
    """The mean over the classes that are a label or a prediction of F1 = 2 TP / (2 TP + FP + FN)
    (``sklearn.metrics.f1_score(average="macro")``, whose labels are those classes)."""
    tp = np.diag(conf).astype(float)
    denominator = 2 * tp + (conf.sum(axis=0) - tp) + (conf.sum(axis=1) - tp)
    seen = denominator > 0
    return float((2 * tp[seen] / denominator[seen]).mean()) if seen.any() else float("nan")


def class_groups(labeled_per_class: np.ndarray | list[int]) -> dict[str, np.ndarray]:
    """The head, medium and tail classes: the classes ordered by their labeled images in the run's split, most first
    (ties: the lower class index first), cut into thirds of ``C // 3`` classes for head and tail, the rest medium
    (C = 10: 3, 4, 3). On a balanced split every count ties, so the thirds are the classes in index order."""
    counts = np.asarray(labeled_per_class)
    order = np.argsort(-counts, kind="stable")
    third = len(counts) // 3
    return {"head": order[:third], "medium": order[third:len(counts) - third], "tail": order[len(counts) - third:]}


def group_accuracy(conf: np.ndarray, classes: np.ndarray) -> float:
    """The accuracy over the test images whose label is one of ``classes``; NaN if there is none."""
    rows = conf[classes]
    total = rows.sum()
    return float(rows[np.arange(len(classes)), classes].sum() / total) if total else float("nan")


def class_scores(conf: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, float]:
    """The test metrics of :mod:`mutexmatch.metrics` read off the test confusion matrix ``conf``: balanced accuracy,
    macro F1, each group's accuracy (a group without classes, C < 3, is left out) and each class's recall (a
    class without a test image is left out)."""
    scores = {M.TEST_BALANCED_ACC: balanced_accuracy(conf), M.TEST_MACRO_F1: macro_f1(conf)}
    scores.update({M.GROUP_ACC[g]: group_accuracy(conf, classes) for g, classes in groups.items() if len(classes)})
    scores.update({M.recall_metric(c): float(r) for c, r in enumerate(recall(conf)) if not np.isnan(r)})
    return scores


def confusion_record(step: int, conf: np.ndarray, groups: dict[str, np.ndarray], labeled_per_class: list[int],
                     classes: list[str] | None) -> dict:
    """The run folder's ``confusion_matrix.json``: the EMA model's test confusion matrix at ``step`` (rows = true
    class), with what reading it needs (class names, labeled counts, the groups, each class's recall)."""
    return {"step": step, "model": "ema", "split": "test", "rows": "true class", "columns": "predicted class",
            "classes": classes, "labeled_per_class": list(labeled_per_class),
            "groups": {g: c.tolist() for g, c in groups.items()},
            "recall": [None if np.isnan(r) else float(r) for r in recall(conf)], "matrix": conf.tolist()}
