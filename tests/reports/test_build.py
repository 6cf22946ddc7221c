"""End to end: a real MLflow SQLite store (tests/reports/conftest.py) → ``reports.build`` → exact files."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from orchestration.contract import TRAINER_MODULES
from reports import out_folder
from reports.build import build_report, main


def _t3_two_sided_p(t: float) -> float:
    """Two-sided p of Student's t with 3 degrees of freedom, closed form (no scipy):
    P(|T| > t) = 1 − (2/π)(atan(t/√3) + (t/√3)/(1 + t²/3))."""
    x = abs(t) / math.sqrt(3.0)
    return 1.0 - (2.0 / math.pi) * (math.atan(x) + x / (1.0 + x * x))


def _expected_paired_p() -> float:
    # MutexMatch − FixMatch on d20, folds 0-3 (fold 4's split digests differ): 91-88, 92-90, 93-92, 94-94.
    d = [3.0, 2.0, 1.0, 0.0]
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    return _t3_two_sided_p(mean / (sd / math.sqrt(len(d))))


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return build_report(store.spec_path, tracking_uri=store.uri, out_dir=out)


def test_main_table_markdown_exact(report):
    p = _expected_paired_p()
    expected = (
        "**Accuracy (%) on digits**\n"
        "\n"
        "| Method | 20 labels | paper | Δ | 40 labels | paper | Δ |\n"
        "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| Supervised | 82.00±1.58 | — | — | — | — | — |\n"
        "| FixMatch | *92.00±3.16* | — | — | *96.00±2.65* (n=3) | 89.18 | +6.82 |\n"
        "| MutexMatch | **93.00±1.58** | 93.22±2.52 | -0.22 | **97.50** (n=1) | — | — |\n"
        "\n"
        "Note: Mean ± std (sample, ddof=1) over folds of `test/acc` ×100; protocol: best (maximum over all "
        "evaluations); split rule: official. **bold**: best, *italic*: second best per column; (n=k): k of 5 folds "
        "finished; —: none. Paper: the published number; Δ = ours − paper.\n"
        "\n"
        "Paired comparison MutexMatch − FixMatch on the same folds (same fold index and labeled split digest), "
        "×100: mean and sample std of the differences, two-sided paired t-test (scipy.stats.ttest_rel); n/a with "
        "fewer than 2 pairs.\n"
        "\n"
        "| MutexMatch − FixMatch | 20 labels | 40 labels |\n"
        "| :--- | ---: | ---: |\n"
        "| mean Δ | +1.50 | n/a |\n"
        "| std Δ | 1.29 | n/a |\n"
        "| pairs | 4 | 1 |\n"
        f"| p | {p:.4f} | n/a |\n"
    )
    assert (report.out_dir / "main.md").read_text() == expected


def test_paired_p_value_matches_hand_formula(report):
    (pair, results), = report.tables["main"].paired
    assert (pair.a, pair.b) == ("mutexmatch", "fixmatch")
    d20 = results[(None, "d20")]
    assert d20.n == 4
    assert d20.mean_diff == pytest.approx(1.5)
    assert d20.std_diff == pytest.approx(math.sqrt(5.0 / 3.0))
    assert d20.p_value == pytest.approx(_expected_paired_p(), rel=1e-9)
    assert results[(None, "d40")].p_value is None and results[(None, "d40")].n == 1


def test_per_fold_appendix_exact(report):
    lines = (report.out_dir / "main_folds.md").read_text().splitlines()
    assert lines[2:4] == ["| Method | Fold | 20 labels | 40 labels |", "| :--- | ---: | ---: | ---: |"]
    body = lines[4:19]
    # what the values are, not the summary table's caption ("mean ± std over 5 folds" above one fold each)
    assert lines[0] == ("**Test accuracy (EMA model) (%) of each fold: the values behind the table's mean ± std "
                        "(table `main`)**") and lines[19] == ""
    assert lines[20].startswith("Note: `test/acc` ×100 of each fold, protocol: best")
    assert body[0] == "| Supervised | 0 | 80.00 | — |"
    # fold 0 of fixmatch/d20 is the newer run (88), not the older duplicate (50); fold 3 of d40 FAILED.
    assert body[5:10] == ["| FixMatch | 0 | 88.00 | 94.00 |", "| FixMatch | 1 | 90.00 | 95.00 |",
                          "| FixMatch | 2 | 92.00 | 99.00 |", "| FixMatch | 3 | 94.00 | — |",
                          "| FixMatch | 4 | 96.00 | — |"]
    assert body[10] == "| MutexMatch | 0 | 91.00 | 97.50 |"


def test_index_lists_files_and_run_ids(report, store):
    index = (report.out_dir / "index.md").read_text()
    for link in ("(main.md)", "(main_folds.md)", "(main.tex)", "(main_folds.tex)", "(report.tex)",
                 "(curves.png)", "(dis.png)", "(k-sens.png)", "(curves.pdf)", "(dis.svg)"):
        assert link in index
    assert "## Cells with no finished run\n\n- Accuracy (%) on digits (main): Supervised, 40 labels (excluded by " \
           "the YAML)\n" in index
    for (method, setting, k, fold), rid in store.run_ids.items():
        if k == "k5":
            assert f"{fold}: `{rid}`" in index
    assert "| method=supervised,setting=d40,k=k5 | 0 | — |" in index
    assert f"`{store.ignored['duplicate']}` (method=fixmatch,setting=d20,k=k5, fold 0): an older FINISHED" in index
    assert f"`{store.ignored['failed']}` (method=fixmatch,setting=d40,k=k5, fold 3): FAILED" in index
    for what in ("smoke", "search", "fold7"):
        assert store.ignored[what] not in index
    assert not report.skipped_figures


def test_latex_tables_mark_cells(report):
    tex = (report.out_dir / "main.tex").read_text()
    assert r"\textbf{93.00$\pm$1.58}" in tex and r"\underline{92.00$\pm$3.16}" in tex
    assert r"\textbf{97.50}\,{\scriptsize (n=1)}" in tex and r"\toprule" in tex and r"$-0.22$" in tex
    assert r"\caption{Accuracy (\%) on digits}" in tex and "main" not in tex.split(r"\label")[0]
    assert "Note: Mean $\\pm$ std" in tex


def test_figures_are_drawn(report):
    for name in ("curves", "dis", "k-sens"):
        image = imread(report.out_dir / f"{name}.png")
        assert image.shape[0] > 200 and image.shape[1] > 300
        assert np.ptp(image[..., :3]) > 0.5   # not a blank canvas
        assert (report.out_dir / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert b"<svg" in (report.out_dir / f"{name}.svg").read_bytes()[:2000]


def test_learning_curves_use_every_evaluation_and_one_y_range(report, store):
    curves = report.figures["curves"]
    assert len(curves.panels) == 5       # the k5 cells with a finished run; supervised/d40 has none
    assert {p.ylim for p in curves.panels} == {curves.panels[0].ylim}
    assert all(p.points == {"test/acc": len(store.steps), "train/pl_acc": len(store.steps)} for p in curves.panels)
    assert "same y-axis in every panel" in curves.caption and "every evaluation" in curves.caption


@pytest.mark.parametrize("protocol, sup_d20, mutex_d20", [
    ("final", "81.00±1.58", "**92.00±1.58**"),        # last evaluation: v − 1
    ("median20", "80.50±1.58", "**91.50±1.58**"),     # median of the 4 evaluations: v − 1.5
])
def test_protocol_override(store, tmp_path, protocol, sup_d20, mutex_d20):
    result = build_report(store.spec_path, tracking_uri=store.uri, out_dir=tmp_path, protocol=protocol,
                          formats=["md"])
    text = (tmp_path / "main.md").read_text()
    assert f"protocol: {protocol} (" in text
    assert f"| Supervised | {sup_d20} | — | — | — | — | — |" in text
    assert f"| MutexMatch | {mutex_d20} |" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == [out_folder.MANIFEST, "index.md", "main.md", "main_folds.md"]
    assert result.tables["main"].protocol == protocol


def test_cli(store, tmp_path, capsys):
    assert main([str(store.spec_path), "--tracking-uri", store.uri, "--out", str(tmp_path), "--format", "md",
                 "--protocol", "final"]) == 0
    assert "protocol: final (the last evaluation)" in (tmp_path / "main.md").read_text()
    assert main([str(store.spec_path), "--tracking-uri", store.uri, "--out", str(tmp_path), "--format",
                 "md,jpg"]) == 2
    assert "--format 'md,jpg': must be a comma-separated subset of md,tex,pdf,png" in capsys.readouterr().err


def test_default_tracking_uri_from_env(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.uri)
    result = build_report(store.spec_path, out_dir=tmp_path, formats=["md"])
    assert result.tables["main"].cells[(None, "mutexmatch", "d20")].n == 5


def test_bad_inputs_raise_clear_errors(store, tmp_path):
    with pytest.raises(ValueError, match=r"--protocol 'last': must be one of best, final, median20"):
        build_report(store.spec_path, tracking_uri=store.uri, out_dir=tmp_path, protocol="last")
    with pytest.raises(ValueError, match=r"no such file at .*missing\.db"):
        build_report(store.spec_path, tracking_uri=f"sqlite:///{tmp_path / 'missing.db'}", out_dir=tmp_path)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(ValueError, match=r"experiment 'nope': not found at .*; experiments there: .*rep"):
        build_report(store.spec_path, tracking_uri=store.uri, out_dir=tmp_path, experiment_name="nope")
    with pytest.raises(ValueError, match=r"spec '.*absent\.yaml': file not found"):
        build_report(tmp_path / "absent.yaml", tracking_uri=store.uri, out_dir=tmp_path)


@pytest.mark.slow   # a fresh interpreter: ~3-7 s of imports on 2 cores
def test_reports_need_neither_ray_nor_orchestration_beyond_its_layout_contract(store, tmp_path):
    # orchestration/__init__.py imports nothing; the contract only the trainer's leaf modules it documents
    leaves = ('mutexmatch', *TRAINER_MODULES)
    code = ("import sys\n"
            "from reports.build import main\n"
            f"argv = [{str(store.spec_path)!r}, '--tracking-uri', {store.uri!r}, '--out', {str(tmp_path)!r}]\n"
            "assert main(argv) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch')\n"
            "             or m.startswith('orchestration.') and not m.startswith('orchestration.contract')\n"
            f"             or m.startswith('mutexmatch.') and m not in {leaves!r})\n"
            "assert not bad, bad\n"
            "assert 'orchestration.contract' in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "dis.png").is_file() and (tmp_path / "main.tex").is_file()


def test_experiment_without_finished_runs_is_an_error(store, tmp_path, capsys):
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=store.uri).create_experiment("rep-empty",
                                                           artifact_location=(tmp_path / "a").as_uri())
    spec = tmp_path / "empty.yaml"
    spec.write_text(store.spec_path.read_text().replace("name: rep\n", "name: rep-empty\n", 1))
    assert main([str(spec), "--tracking-uri", store.uri, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"experiment 'rep-empty' at {store.uri}: no FINISHED grid trial run of this YAML's cells" in err
    assert "experiments there: " in err and "rep," in err
    assert not (tmp_path / "out").exists()


def test_the_summary_says_where_the_pdf_is_or_how_to_make_it(tmp_path, monkeypatch):
    """Issue 34: ``make quickstart`` ended with no PDF and no word about one; the summary's second line now says."""
    import reports.build as build

    tex = tmp_path / "report.tex"
    made = build.BuildResult(out_dir=tmp_path, index=tmp_path / "index.md", files=[tex], pdf=tmp_path / "report.pdf")
    assert build._summary(made).splitlines()[1] == f"PDF: {tmp_path / 'report.pdf'}"
    not_asked = build.BuildResult(out_dir=tmp_path, index=tmp_path / "index.md", files=[tex])
    monkeypatch.setattr(build.shutil, "which", lambda exe: "/usr/bin/pdflatex")
    assert build._summary(not_asked).splitlines()[1] == \
        f"no PDF: add pdf to --format (e.g. --format md,tex,png,pdf) to compile {tex}"
    monkeypatch.setattr(build.shutil, "which", lambda exe: None)
    assert build._summary(not_asked).splitlines()[1].endswith(f"{tex}; it needs pdflatex: {build.TEX_INSTALL}")
    assert len(build._summary(build.BuildResult(out_dir=tmp_path, index=tmp_path / "i.md")).splitlines()) == 1
