"""Figure data helpers and the PNGs they draw (the pictures themselves were inspected by eye)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from reports.figures import (CurvePanel, curve_band, is_fraction_metric, plot_curves, plot_heatmaps, plot_sensitivity,
                             row_normalise)


def test_row_normalise_percent_per_true_class():
    rates = row_normalise(np.array([[3, 1, 0], [0, 0, 0], [1, 1, 2]]))
    assert rates[0].tolist() == [75.0, 25.0, 0.0]
    assert np.isnan(rates[1]).all()                          # no sample of class 1: blank, not 0 %
    assert rates[2].tolist() == [25.0, 25.0, 50.0]
    with pytest.raises(ValueError, match=r"must be a square C×C matrix, got shape \(2, 3\)"):
        row_normalise(np.ones((2, 3)))


def test_curve_band_mean_std_over_runs():
    h = pd.DataFrame({"run_id": ["a", "a", "b", "b", "c"], "step": [10, 20, 10, 20, 10],
                      "value": [0.5, 0.7, 0.7, np.nan, 0.9]})
    band = curve_band(h)
    assert band["step"].tolist() == [10, 20]
    assert band["mean"].tolist() == pytest.approx([70.0, 70.0])
    assert band["std"].iloc[0] == pytest.approx(20.0) and np.isnan(band["std"].iloc[1])   # one run at step 20
    assert band["n"].tolist() == [3, 1]


def test_plots_write_pngs_and_refuse_empty_input(tmp_path):
    h = pd.DataFrame({"run_id": ["a"] * 3, "step": [1, 2, 3], "value": [0.2, 0.5, 0.6]})
    loss = h.assign(value=[2.3, 1.1, 0.4])
    plot_curves([CurvePanel("cell", 1, {"test/acc": h, "train/loss": loss})],
                ["test/acc", "train/pl_acc", "train/loss"], tmp_path / "c.png", "t")
    plot_heatmaps(np.eye(4) * 5 + 1, 1 - np.eye(4), tmp_path / "h.png", "t")
    plot_heatmaps(np.eye(4) * 5 + 1, None, tmp_path / "h1.png", "t")        # FixMatch: no TNC panel
    assert imread(tmp_path / "h1.png").shape[1] < imread(tmp_path / "h.png").shape[1]
    plot_sensitivity({"MutexMatch": pd.DataFrame({"x": [1, 3, "C"], "mean": [90.0, 91.0, 92.0],
                                                  "std": [1.0, np.nan, 0.5], "n": [5, 1, 5]})},
                     tmp_path / "s.png", "t", "algorithm.k", "%")
    for name in ("c", "h", "s"):
        image = imread(tmp_path / f"{name}.png")
        assert image.ndim == 3 and np.ptp(image[..., :3]) > 0.5
    with pytest.raises(ValueError, match="no cell with a finished run"):
        plot_curves([], ["test/acc"], tmp_path / "x.png", "t")
    with pytest.raises(ValueError, match="no level with a finished run"):
        plot_sensitivity({"a": pd.DataFrame({"x": [1], "mean": [np.nan], "std": [np.nan], "n": [0]})},
                         tmp_path / "y.png", "t", "k", "%")
    with pytest.raises(ValueError, match=r"pseudo-label matrix is 3×3 but complementary-label matrix is 2×2"):
        plot_heatmaps(np.ones((3, 3)), np.ones((2, 2)), tmp_path / "z.png", "t")
    assert not any((tmp_path / n).exists() for n in ("x.png", "y.png", "z.png"))


def test_fraction_metrics_are_the_percent_ones():
    assert all(is_fraction_metric(m) for m in ("test/acc", "train/pl_acc", "val/best_acc", "train/tnc_cpa",
                                               "train/mask_ratio"))
    assert not any(is_fraction_metric(m) for m in ("train/loss", "train/lr", "perf/img_per_s"))
