"""Cell statistics and the paired comparison, checked against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import betainc

from reports.stats import FoldValue, cell_stats, paired_comparison


def frame(values: dict[int, float], digest: str = "s") -> list[FoldValue]:
    return [FoldValue(f, float(v), f"r{f}", f"{digest}{f}") for f, v in values.items()]


def test_cell_stats_mean_and_sample_std():
    s = cell_stats(frame({2: 93.0, 0: 91.0, 1: 92.0, 3: np.nan}))
    assert s.n == 3 and list(s.values) == [0, 1, 2]        # NaN dropped, sorted by fold
    assert s.mean == pytest.approx(92.0)
    assert s.std == pytest.approx(1.0)                       # sqrt(((−1)² + 0 + 1²) / (3 − 1))
    assert s.run_ids == {0: "r0", 1: "r1", 2: "r2"}
    one = cell_stats(frame({4: 97.5}))
    assert (one.n, one.mean, one.std) == (1, 97.5, None)
    none = cell_stats(frame({}))
    assert (none.n, none.mean, none.std) == (0, None, None)


def test_paired_comparison_matches_t_formula():
    a = frame({0: 91.0, 1: 92.0, 2: 93.5, 3: 94.0, 4: 95.0})
    b = frame({0: 88.0, 1: 90.0, 2: 92.0, 3: 94.0, 4: 90.0})
    res = paired_comparison(a, b)
    d = np.array([3.0, 2.0, 1.5, 0.0, 5.0])
    mean, sd = d.mean(), math.sqrt(((d - d.mean()) ** 2).sum() / 4)
    t = mean / (sd / math.sqrt(5))
    p = betainc(2.0, 0.5, 4.0 / (4.0 + t * t))               # two-sided Student-t tail, 4 degrees of freedom
    assert (res.n, res.mean_diff, res.std_diff) == (5, pytest.approx(mean), pytest.approx(sd))
    assert res.p_value == pytest.approx(p, rel=1e-9)


def test_paired_comparison_pairs_only_same_fold_and_split():
    a = frame({0: 91.0, 1: 92.0, 2: 93.0, 3: 94.0})
    b = frame({0: 90.0, 1: 90.0, 5: 10.0}) + [FoldValue(2, 92.5, "r2", "other-split")]   # same fold, other images
    res = paired_comparison(a, b)
    assert res.n == 2 and res.mean_diff == pytest.approx(1.5)   # folds 0 and 1 only
    lone = paired_comparison(a, frame({0: 90.0}))
    assert (lone.n, lone.mean_diff, lone.std_diff, lone.p_value) == (1, None, None, None)


def test_identical_differences_have_no_p_value():
    res = paired_comparison(frame({0: 91.0, 1: 92.0, 2: 93.0}), frame({0: 90.0, 1: 91.0, 2: 92.0}))
    assert res.n == 3 and res.mean_diff == pytest.approx(1.0) and res.std_diff == pytest.approx(0.0, abs=1e-12)
    assert res.p_value is None
