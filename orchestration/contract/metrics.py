"""Metric names the layout's readers rely on, and accuracies in %.

The names the trainer logs are the trainer's facts (:mod:`mutexmatch.metrics`, standard library only): this module
takes them from there, the contract's one import outside the standard library, and is how a report reaches them."""

from __future__ import annotations

from mutexmatch import metrics as M
from mutexmatch.metrics import FIXED, is_logged, logged, term_metric  # noqa: F401  (the layout checks names by them)

__all__ = ["FIXED", "is_logged", "logged", "term_metric", "TEST_ACC", "TEST_BEST_ACC", "TEST_MEDIAN_ACC", "VAL_ACC",
           "VAL_BEST_ACC",
           "PL_ACC", "TRAIN_LOSS", "VALIDATION_METRICS", "TRIALS_METRIC", "PERCENT_SUFFIX", "PERCENT_METRICS",
           "PERCENT_DECIMALS", "percent", "percent_metric", "with_percent"]


# Names the trainer logs, declared by the trainer (mutexmatch.metrics), that the layout's readers rely on.
TEST_ACC, TEST_BEST_ACC, VAL_ACC, VAL_BEST_ACC = M.TEST_ACC, M.TEST_BEST_ACC, M.VAL_ACC, M.VAL_BEST_ACC
PL_ACC = M.PL_ACC
TEST_MEDIAN_ACC = M.TEST_MEDIAN_ACC  # the median of the last train.median_window evaluations (the MLflow UI's median20)
TRAIN_LOSS = M.term_metric(M.TOTAL)  # logged at every evaluation: its history gives a run's logged steps
# Each loss term is logged as M.term_metric(term) for exactly the terms its algorithm declares (Algorithm.terms);
# the sweep validates layouts against those of the registered algorithms (sweep._check_report_layouts).
VALIDATION_METRICS = (VAL_ACC, VAL_BEST_ACC, M.VAL_BALANCED_ACC)  # the only legal search objectives (never test/*)
TRIALS_METRIC = "trials/"            # parent run: trials/finished, trials/failed, trials/running, ... (status)
# Accuracies are fractions (what the trainer computes, Tune's objective, every stored run); the tables and the
# MLflow UI show %. Each accuracy is also logged in % under its name + PERCENT_SUFFIX for the UI, and every reader
# that prints % converts with percent(), so the two never disagree.
PERCENT_SUFFIX = "_pct"
PERCENT_METRICS = (M.TEST_ACC, M.TEST_ACC_RAW, M.TEST_BEST_ACC, M.TEST_MEDIAN_ACC, M.VAL_ACC, M.VAL_BEST_ACC,
                   *M.CLASS_METRICS)  # the class-wise scores too (macro F1 included), not each class's recall


def percent(fraction: float) -> float:
    """An accuracy as the tables and the UI show it: 0.9123 → 91.23."""
    return 100.0 * fraction


def percent_metric(name: str) -> str:
    """``test/acc`` → ``test/acc_pct``: the name of an accuracy's twin in %."""
    return name + PERCENT_SUFFIX


# Decimals of a twin in %. The UI shows a value as logged, and its runs view averages the logged twins per cell:
# twins cut to the tables' two decimals gave a mean 0.01 off the report's (84.03 where the table says 84.04, issue
# 34); at four, the UI's average rounds to the table's figure (off by at most 5e-5 before rounding).
PERCENT_DECIMALS = 4


def with_percent(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` plus the twin in % of each accuracy among them (:data:`PERCENT_METRICS`), to
    :data:`PERCENT_DECIMALS` decimals (the fraction keeps full precision)."""
    return {**metrics, **{percent_metric(k): round(percent(v), PERCENT_DECIMALS) for k, v in metrics.items()
                          if k in PERCENT_METRICS}}
