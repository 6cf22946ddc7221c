"""The names of the metrics the trainer logs at every evaluation — declared here once, read by the trainer,
the MLflow contract (``orchestration.contract``) and the report layouts (a table on ``test/accc`` is refused before
anything trains). Standard library only.

Loss terms are not listed here: each algorithm declares the terms it computes (``Algorithm.terms``), logged as
``train/<term>`` beside the weighted total ``train/loss``, so a run logs exactly its algorithm's terms. Who knows the
registry passes its terms to :func:`logged` / :func:`is_logged` (the sweep at launch,
:func:`mutexmatch.algorithms.declared_terms`); a reader without it (a report build, which never imports the
trainer) accepts any well-formed ``train/<term>`` and checks it against what the runs logged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["TEST_ACC", "TEST_ACC_RAW", "TEST_BEST_ACC", "TEST_MEDIAN_ACC", "VAL_ACC", "VAL_BEST_ACC", "TRAIN_LR",
           "TEST_BALANCED_ACC", "VAL_BALANCED_ACC", "TEST_MACRO_F1", "GROUP_ACC", "CLASS_METRICS", "recall_metric",
           "is_recall_metric",
           "PERF_IMG_PER_S", "PERF_DATA_S", "PERF_COMPUTE_S", "TOTAL", "term_metric", "term_name_errors",
           "MASK_RATIO", "PL_ACC", "PL_ACC_ALL", "CPA", "SAMPLE_METRICS", "TNC_CPA", "FIXED", "logged", "is_logged"]

TEST_ACC = "test/acc"                  # the EMA model on the test set
TEST_ACC_RAW = "test/acc_raw"          # the raw (non-EMA) model on the test set
TEST_BEST_ACC = "test/best_acc"        # the best test/acc so far
TEST_MEDIAN_ACC = "test/median_acc"    # median of the last train.median_window evaluations (FixMatch's "median")
VAL_ACC = "val/acc"                    # the EMA model on the validation split (only with one)
VAL_BEST_ACC = "val/best_acc"
TRAIN_LR = "train/lr"
# Class-wise scores of the EMA model (mutexmatch.training.class_scores; what long-tailed papers report, issue 41)
TEST_BALANCED_ACC = "test/balanced_acc"  # the mean of the per-class recalls
VAL_BALANCED_ACC = "val/balanced_acc"
TEST_MACRO_F1 = "test/macro_f1"        # the mean of the per-class F1 scores
# The accuracy over the test images of each third of the classes, thirds by the run's labeled count per class
GROUP_ACC = {"head": "test/head_acc", "medium": "test/medium_acc", "tail": "test/tail_acc"}
CLASS_METRICS = (TEST_BALANCED_ACC, VAL_BALANCED_ACC, TEST_MACRO_F1, *GROUP_ACC.values())
_RECALL_PREFIX = "test/recall/"
_RECALL = re.compile(r"^test/recall/(0|[1-9][0-9]*)$")


def recall_metric(label: int) -> str:
    """``test/recall/<label>``: the recall of class ``label`` (its index) on the test set, one metric per class."""
    return f"{_RECALL_PREFIX}{label}"


def is_recall_metric(name: str) -> bool:
    """Whether ``name`` is a class's recall, :func:`recall_metric` of some class index."""
    return bool(_RECALL.match(name))

PERF_IMG_PER_S = "perf/img_per_s"
PERF_DATA_S, PERF_COMPUTE_S = "perf/data_s", "perf/compute_s"  # seconds per step waiting for data / computing

TOTAL = "loss"   # the weighted total L = sum_t lambda_t L_t, logged by every algorithm as train/loss
_TERM_PREFIX = "train/"
_TERM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def term_metric(term: str) -> str:
    """``train/<term>``: a loss term's metric, its mean over the steps since the last evaluation (``train/loss`` is
    the weighted total L)."""
    return f"{_TERM_PREFIX}{term}"


# Unlabeled-sample ratios at the evaluation's steps
MASK_RATIO = "train/mask_ratio"            # the share of confident samples (max p^w >= tau)
PL_ACC = "train/pl_acc"                    # pseudo-label accuracy of the confident samples
PL_ACC_ALL = "train/pl_acc_all"            # pseudo-label accuracy of all samples
CPA = "train/cpa"                          # complementary-label accuracy (the least likely class is wrong)
SAMPLE_METRICS = (MASK_RATIO, PL_ACC, PL_ACC_ALL, CPA)
TNC_CPA = "train/tnc_cpa"                  # the TNC's complementary-label accuracy (algorithms with a TNC)

# Every metric but the algorithms' own loss terms and the per-class recalls (as many as the data has classes).
FIXED = frozenset((TEST_ACC, TEST_ACC_RAW, TEST_BEST_ACC, TEST_MEDIAN_ACC, VAL_ACC, VAL_BEST_ACC, TRAIN_LR,
                   *CLASS_METRICS, PERF_IMG_PER_S, PERF_DATA_S, PERF_COMPUTE_S, TNC_CPA, *SAMPLE_METRICS,
                   term_metric(TOTAL)))


def term_name_errors(owner: str, terms: object) -> list[str]:
    """One line per problem with ``terms``, an algorithm's declared loss terms: a non-empty tuple of distinct
    lower-case names whose ``train/<term>`` is no other metric's name."""
    if not isinstance(terms, tuple) or not terms:
        return [f"{owner}.terms={terms!r}: must be a non-empty tuple of the loss terms it computes, e.g. ('sup', 'p')"]
    errors = [f"{owner}.terms: {t!r} is not a term name (lower-case letters, digits and _, starting with a letter)"
              for t in terms if not (isinstance(t, str) and _TERM_NAME.match(t))]
    errors += [f"{owner}.terms: {t!r} would be logged as {term_metric(t)!r}, a metric the trainer logs already"
               for t in terms if isinstance(t, str) and term_metric(t) in FIXED]
    errors += [f"{owner}.terms: {t!r} given twice" for t in sorted({t for t in terms if terms.count(t) > 1})]
    return errors


def logged(terms: Iterable[str]) -> frozenset[str]:
    """The metrics the trainer logs (for some algorithm and data) when ``terms`` are the algorithms' loss terms."""
    return FIXED | {term_metric(t) for t in terms}


def is_logged(name: str, terms: Iterable[str] | None = None) -> bool:
    """Whether the trainer logs a metric called ``name``: one of :data:`FIXED`, a class's recall
    (:func:`recall_metric`) or ``train/<term>`` of one of ``terms``; with ``terms`` None (the caller cannot know the
    registry), any well-formed ``train/<term>``."""
    if is_recall_metric(name):
        return True
    if terms is not None:
        return name in logged(terms)
    term = name[len(_TERM_PREFIX):] if name.startswith(_TERM_PREFIX) else ""
    return name in FIXED or bool(_TERM_NAME.match(term))
