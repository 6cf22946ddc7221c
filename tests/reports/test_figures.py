"""Figure data helpers and the PNGs they draw (the pictures themselves were inspected by eye)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.image import imread

from reports.figures import (MAX_PANELS_PER_ROW, CurvePanel, curve_band, is_fraction_metric, panel_grid, plot_curves,
                             plot_heatmaps, plot_sensitivity, row_normalise)


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


def test_plots_write_png_pdf_svg_and_refuse_empty_input(tmp_path):
    h = pd.DataFrame({"run_id": ["a"] * 3, "step": [1, 2, 3], "value": [0.2, 0.5, 0.6]})
    loss = h.assign(value=[2.3, 1.1, 0.4])
    files, _ = plot_curves([CurvePanel("cell", 1, {"test/acc": h, "train/loss": loss})],
                           ["test/acc", "train/pl_acc", "train/loss"], tmp_path / "c")
    assert [p.name for p in files] == ["c.png", "c.pdf", "c.svg"]
    plot_heatmaps(np.eye(4) * 5 + 1, 1 - np.eye(4), tmp_path / "h")
    plot_heatmaps(np.eye(4) * 5 + 1, None, tmp_path / "h1")        # FixMatch: no TNC panel
    assert imread(tmp_path / "h1.png").shape[1] < imread(tmp_path / "h.png").shape[1]
    plot_sensitivity({"MutexMatch": pd.DataFrame({"x": [1, 3, "C"], "mean": [90.0, 91.0, 92.0],
                                                  "std": [1.0, np.nan, 0.5], "n": [5, 1, 5]})},
                     tmp_path / "s", "algorithm.k", "%")
    for name in ("c", "h", "s"):
        image = imread(tmp_path / f"{name}.png")
        assert image.ndim == 3 and np.ptp(image[..., :3]) > 0.5
        pdf = (tmp_path / f"{name}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF-") and b"/Type3" not in pdf and b"/CreationDate" not in pdf
    with pytest.raises(ValueError, match="no cell with a finished run"):
        plot_curves([], ["test/acc"], tmp_path / "x")
    with pytest.raises(ValueError, match="no level with a finished run"):
        plot_sensitivity({"a": pd.DataFrame({"x": [1], "mean": [np.nan], "std": [np.nan], "n": [0]})},
                         tmp_path / "y", "k", "%")
    with pytest.raises(ValueError, match=r"pseudo-label matrix is 3×3 but complementary-label matrix is 2×2"):
        plot_heatmaps(np.ones((3, 3)), np.ones((2, 2)), tmp_path / "z")
    with pytest.raises(ValueError, match=r"class_names: 2 names given, but the class counts have 3 classes"):
        plot_heatmaps(np.ones((3, 3)), None, tmp_path / "z", ["cat", "dog"])
    assert not any((tmp_path / n).exists() for n in ("x.png", "y.png", "z.png"))


@pytest.mark.parametrize("n,grid", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (5, (2, 3)), (6, (2, 3)),
                                    (7, (3, 3)), (8, (3, 3))])
def test_panel_grid_is_balanced(n, grid):
    """Issue 34: four curve panels (the quickstart's three methods and the tuned row) were drawn 3 + 1."""
    assert panel_grid(n) == grid
    rows, cols = grid
    assert cols <= MAX_PANELS_PER_ROW and (rows - 1) * cols < n <= rows * cols  # no empty row, nothing left out
    with pytest.raises(ValueError, match="panels: 0; a grid needs at least one"):
        panel_grid(0)


def test_four_curve_panels_are_drawn_two_by_two(tmp_path, monkeypatch):
    import reports.figures as figures

    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, stem: drawn.append(fig) or [])
    h = pd.DataFrame({"run_id": ["a"] * 3, "step": [1, 2, 3], "value": [0.2, 0.5, 0.6]})
    plot_curves([CurvePanel(f"cell {i}", 1, {"test/acc": h}) for i in range(4)], ["test/acc"], tmp_path / "c")
    shown = [ax.get_position() for ax in drawn[0].axes if ax.get_visible()]
    assert len(shown) == 4
    assert len({round(b.x0, 3) for b in shown}) == 2 and len({round(b.y0, 3) for b in shown}) == 2


def test_curve_panels_share_the_y_range_unless_told_not_to(tmp_path):
    low = pd.DataFrame({"run_id": ["a"] * 3, "step": [1, 2, 3], "value": [0.1, 0.2, 0.3]})
    high = low.assign(value=[0.7, 0.8, 0.95])
    panels = [CurvePanel("low", 1, {"test/acc": low}), CurvePanel("high", 1, {"test/acc": high})]
    _, shared = plot_curves(panels, ["test/acc"], tmp_path / "shared")
    assert shared[0].ylim == shared[1].ylim and shared[0].ylim[0] <= 10 and shared[0].ylim[1] >= 95
    assert [p.points for p in shared] == [{"test/acc": 3}, {"test/acc": 3}]
    _, own = plot_curves(panels, ["test/acc"], tmp_path / "own", sharey=False)
    assert own[0].ylim[1] < 50 < own[1].ylim[0]


def test_heat_map_ticks_are_the_class_names(tmp_path):
    plot_heatmaps(np.eye(3) + 1, None, tmp_path / "named", ["cat", "dog", "ship"])
    svg = (tmp_path / "named.svg").read_text()
    plot_heatmaps(np.eye(3) + 1, None, tmp_path / "plain")
    # SVG text is drawn as paths, each glyph defined once: the names add glyphs the digits alone do not have
    assert svg.count("<path id=") > (tmp_path / "plain.svg").read_text().count("<path id=")


def test_fraction_metrics_are_the_percent_ones():
    assert all(is_fraction_metric(m) for m in ("test/acc", "train/pl_acc", "val/best_acc", "train/tnc_cpa",
                                               "train/mask_ratio"))
    assert not any(is_fraction_metric(m) for m in ("train/loss", "train/lr", "perf/img_per_s"))


# ------------------------------------------------------------------------------------------------ paper-ready
def _drawn(monkeypatch):
    """The matplotlib Figures the plot functions save (instead of their files)."""
    from reports import figures

    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, stem: drawn.append(fig) or [])
    return drawn


def _search_frame() -> pd.DataFrame:
    return pd.DataFrame({"trial": [0, 1, 2, 3], "algorithm.tau": [0.8, 0.9, 0.95, 0.7],
                         "algorithm.k": [2, 5, 9, 1], "objective": [0.5, 0.62, 0.6, 0.4],
                         "pruned": [False, True, False, True], "best": [False, True, False, False]})


def test_every_figure_is_a_column_or_the_text_wide_with_8_pt_text(monkeypatch, tmp_path):
    from matplotlib.text import Text

    from reports.figures import COLUMN_IN, TEXT_IN, plot_search_history, plot_search_slice

    drawn = _drawn(monkeypatch)
    h = pd.DataFrame({"run_id": ["a"] * 3, "step": [100, 200, 300], "value": [0.5, 0.6, 0.7]})
    one = [CurvePanel("MutexMatch", 1, {"test/acc": h})]
    plot_curves(one, ["test/acc"], tmp_path / "c1")
    plot_curves(one * 4, ["test/acc"], tmp_path / "c4")
    plot_heatmaps(np.eye(10) * 5 + 1, 1 - np.eye(10), tmp_path / "h2")
    plot_heatmaps(np.eye(10) * 5 + 1, None, tmp_path / "h1")
    plot_sensitivity({"MutexMatch": pd.DataFrame({"x": [1, 3], "mean": [90.0, 91.0], "std": [1.0, 0.5],
                                                  "n": [5, 5]})}, tmp_path / "s", xlabel="k", ylabel="%")
    plot_search_history(_search_frame(), "best validation accuracy (%)", "max", tmp_path / "sh")
    plot_search_slice(_search_frame(), {"algorithm.tau": "τ", "algorithm.k": "k"}, "%", tmp_path / "ss",
                      whole={"algorithm.k"})
    widths = [round(float(f.get_size_inches()[0]), 2) for f in drawn]
    assert widths == [COLUMN_IN, TEXT_IN, TEXT_IN, COLUMN_IN, COLUMN_IN, COLUMN_IN, TEXT_IN]
    for fig in drawn:
        FigureCanvasAgg(fig).draw()
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert texts and min(t.get_fontsize() for t in texts) >= 8, [(t.get_text(), t.get_fontsize())
                                                                     for t in texts if t.get_fontsize() < 8]


def test_search_plots_mark_pruned_trials_and_the_best_one(monkeypatch, tmp_path):
    from reports.figures import plot_search_history

    drawn = _drawn(monkeypatch)
    plot_search_history(_search_frame(), "best validation accuracy (%)", "max", tmp_path / "sh")
    lines = {ln.get_label(): ln for ln in drawn[0].axes[0].get_lines()}
    assert list(lines["trial"].get_xdata()) == [0, 2] and lines["trial"].get_markerfacecolor() != "none"
    assert list(lines["pruned (ASHA)"].get_xdata()) == [1, 3] and lines["pruned (ASHA)"].get_markerfacecolor() == "none"
    assert list(lines["best trial"].get_xdata()) == [1] and lines["best trial"].get_marker() == "*"
    assert list(lines["best so far"].get_ydata()) == pytest.approx([50.0, 62.0, 62.0, 62.0])  # in %, as the tables
    assert [t.get_text() for t in drawn[0].legends[0].get_texts()] == ["best so far", "trial", "pruned (ASHA)",
                                                                       "best trial"]


def test_parameters_and_metrics_are_named_in_words():
    from orchestration.contract.layout import metric_name, param_name

    assert (param_name("algorithm.tau"), param_name("algorithm.k"), param_name("algorithm.lambda_sep")) == \
        ("τ", "k", "λ_sep")
    assert param_name("optim.lr") == "learning rate" and metric_name("val/best_acc") == "best validation accuracy"


def test_learning_curves_have_a_panel_for_each_tuned_row():
    from types import SimpleNamespace

    from reports.drawing import cell_title, curve_cells, level_labels

    table = SimpleNamespace(rows="method", columns="setting", row_groups=None, tuned_rows={"mm": "MM (tuned)"},
                            row_labels={"mm": "MM (default)", "fm": "FixMatch"}, column_labels={"d20": "20 labels"},
                            quoted_rows=[])
    layout = SimpleNamespace(axes={"method": {"fm": {}, "mm": {}}, "setting": {"d20": {}}}, tables=[table])
    cells = curve_cells(layout)
    assert cells == [{"method": "fm", "setting": "d20"}, {"method": "mm", "setting": "d20"},
                     {"method": "mm", "setting": "d20", "tuned": "true"}]
    labels = level_labels(layout)
    assert [cell_title(c, layout, labels) for c in cells] == ["FixMatch", "MM (default)", "MM (tuned)"]
