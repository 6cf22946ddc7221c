"""The names of the metrics the trainer logs at every evaluation — declared here once, read by the trainer,
the MLflow contract (``orchestration.contract``) and the report layouts (a table on ``test/accc`` is refused before
anything trains). Standard library only.
"""

from __future__ import annotations

__all__ = ["TEST_ACC", "TEST_ACC_RAW", "TEST_BEST_ACC", "TEST_MEDIAN_ACC", "VAL_ACC", "VAL_BEST_ACC", "TRAIN_LR",
           "PERF_IMG_PER_S", "PERF_DATA_S", "PERF_COMPUTE_S", "TERMS", "term_metric", "MASK_RATIO", "PL_ACC",
           "PL_ACC_ALL", "CPA", "SAMPLE_METRICS",
           "TNC_CPA", "LOGGED", "is_logged"]

TEST_ACC = "test/acc"                  # the EMA model on the test set
TEST_ACC_RAW = "test/acc_raw"          # the raw (non-EMA) model on the test set
TEST_BEST_ACC = "test/best_acc"        # the best test/acc so far
TEST_MEDIAN_ACC = "test/median_acc"    # median of the last train.median_window evaluations (FixMatch's "median")
VAL_ACC = "val/acc"                    # the EMA model on the validation split (only with one)
VAL_BEST_ACC = "val/best_acc"
TRAIN_LR = "train/lr"
PERF_IMG_PER_S = "perf/img_per_s"
PERF_DATA_S, PERF_COMPUTE_S = "perf/data_s", "perf/compute_s"  # seconds per step waiting for data / computing

TERMS = ("loss", "sup", "sep", "p", "n")   # the loss terms, means over the steps since the last evaluation


def term_metric(term: str) -> str:
    """``train/<term>``: a loss term's metric (``train/loss`` is the weighted total L)."""
    return f"train/{term}"


# Unlabeled-sample ratios at the evaluation's steps
MASK_RATIO = "train/mask_ratio"            # the share of confident samples (max p^w >= tau)
PL_ACC = "train/pl_acc"                    # pseudo-label accuracy of the confident samples
PL_ACC_ALL = "train/pl_acc_all"            # pseudo-label accuracy of all samples
CPA = "train/cpa"                          # complementary-label accuracy (the least likely class is wrong)
SAMPLE_METRICS = (MASK_RATIO, PL_ACC, PL_ACC_ALL, CPA)
TNC_CPA = "train/tnc_cpa"                  # the TNC's complementary-label accuracy (algorithms with a TNC)

LOGGED = frozenset((TEST_ACC, TEST_ACC_RAW, TEST_BEST_ACC, TEST_MEDIAN_ACC, VAL_ACC, VAL_BEST_ACC, TRAIN_LR,
                    PERF_IMG_PER_S, PERF_DATA_S, PERF_COMPUTE_S, TNC_CPA, *SAMPLE_METRICS,
                    *(term_metric(t) for t in TERMS)))


def is_logged(name: str) -> bool:
    """Whether the trainer logs a metric called ``name`` (for some algorithm and data)."""
    return name in LOGGED
