"""Long-tailed (class-imbalanced) labeled and unlabeled sets, as USB draws them (issue 41 item 1).

USB's rule (``semilearn/datasets/utils.py``, ``make_imbalance_data``): for a head count N and ratio gamma over C
classes, mu = (1/|gamma|)^(1/(C-1)) and class c gets int(N * mu^c), the last class int(N / |gamma|); a negative
gamma reverses the list (the "inconsistent" setting, the tail class of the labeled set being the head of the
unlabeled one). ``rule="ceil"`` rounds the same numbers up (DARP's and RDA's rounding, as issue 41 names it).

USB's draw (``sample_labeled_unlabeled_data``): numpy's global RNG seeded with the run's seed, then for every class
in order its indices shuffled in place, the first n_c labeled and the next m_c unlabeled (all the rest of the class
when there is no unlabeled head: STL-10's "unknown" setting), so no labeled image is in the drawn unlabeled part.
:func:`longtail_indices` does exactly that with the global RNG saved before and restored after.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from mutexmatch.checks import check_int, shown

ROUNDING = ("int", "ceil")
Rounding = Literal["int", "ceil"]


class Imbalance(Protocol):
    """What a long-tailed split reads (``data.imbalance`` of the run config)."""

    labeled_head: int
    labeled_ratio: float
    unlabeled_head: int | None
    unlabeled_ratio: float
    rule: str


def imbalance_counts(head: int, ratio: float, num_classes: int, rule: str = "int",
                     field: str = "data.imbalance.labeled_ratio") -> list[int]:
    """Images per class, class 0 first: USB's ``make_imbalance_data(head, num_classes, ratio)`` (``rule="int"``),
    computed with its float operations so every count is its count; ``ceil`` rounds up instead."""
    if rule not in ROUNDING:
        raise ValueError(f"data.imbalance.rule={shown(rule)}: must be one of {', '.join(ROUNDING)}")
    head = check_int("data.imbalance head", head, low=1)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not abs(ratio) >= 1:
        raise ValueError(f"{field}={shown(ratio)}: |ratio| must be >= 1 (head class / tail class; negative "
                         "reverses the order)")
    if num_classes < 2:
        raise ValueError(f"{field}={shown(ratio)}: a long tail needs 2 classes or more, the dataset has "
                         f"{num_classes}")
    rnd = int if rule == "int" else math.ceil
    mu = np.power(1 / abs(ratio), 1 / (num_classes - 1))
    counts = [int(rnd(head * np.power(mu, c))) for c in range(num_classes - 1)]
    counts.append(int(rnd(head / abs(ratio))))
    return counts[::-1] if ratio < 0 else counts


def split_counts(imbalance: Imbalance, num_classes: int) -> tuple[list[int], list[int] | None]:
    """(labeled per class, unlabeled per class or None for the rest of every class) of ``data.imbalance``."""
    labeled = imbalance_counts(imbalance.labeled_head, imbalance.labeled_ratio, num_classes, imbalance.rule)
    if imbalance.unlabeled_head is None:
        return labeled, None
    return labeled, imbalance_counts(imbalance.unlabeled_head, imbalance.unlabeled_ratio, num_classes,
                                     imbalance.rule, field="data.imbalance.unlabeled_ratio")


def num_labels_problem(num_labels: int, labeled_counts: Sequence[int]) -> str | None:
    """The error line when ``data.num_labels`` is not the long-tailed labeled set's size, else None."""
    total = sum(labeled_counts)
    if num_labels == total:
        return None
    return (f"data.num_labels={num_labels}: the long-tailed labeled set of data.imbalance holds {total} labeled "
            f"images (per class {list(labeled_counts)}); set data.num_labels: {total}")


def longtail_indices(labels: np.ndarray, labeled_counts: Sequence[int], unlabeled_counts: Sequence[int] | None,
                     num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """USB's ``sample_labeled_unlabeled_data`` draw: (labeled, unlabeled) indices, each in class order. Images
    labeled -1 are never drawn. A class too small for its counts is refused (USB silently takes fewer)."""
    labels = np.asarray(labels)
    sizes = np.bincount(labels[labels >= 0], minlength=num_classes)
    for c in range(num_classes):
        want = labeled_counts[c] + (unlabeled_counts[c] if unlabeled_counts is not None else 0)
        if sizes[c] < want:
            extra = f" + {unlabeled_counts[c]} unlabeled" if unlabeled_counts is not None else ""
            raise ValueError(f"data.imbalance: class {c} has {int(sizes[c])} images available but the long-tailed "
                             f"split needs {labeled_counts[c]} labeled{extra}; lower labeled_head/unlabeled_head")
    state = np.random.get_state()
    labeled, unlabeled = [], []
    try:
        np.random.seed(seed)
        for c in range(num_classes):
            idx = np.where(labels == c)[0]
            np.random.shuffle(idx)
            n = labeled_counts[c]
            labeled.append(idx[:n])
            unlabeled.append(idx[n:] if unlabeled_counts is None else idx[n:n + unlabeled_counts[c]])
    finally:
        np.random.set_state(state)
    return np.concatenate(labeled).astype(np.int64), np.concatenate(unlabeled).astype(np.int64)
