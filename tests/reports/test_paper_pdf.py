"""The quickstart's report as a paper would take it (issue 18): ``--format md,tex,pdf,png`` from a real MLflow store
→ a PDF with vector fonts only and no blank page, every figure as PNG, PDF and SVG, curve panels on one y-range."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from reports.build import build_report
from reports.drawing import all_cells
from reports.latex import TEX_INSTALL, compile_pdf, latex_document
from orchestration.contract.layout import cell_id, validate_report
from reports.specfile import load_spec
from reports.tables import build_table_data
from reports.tables_latex import render_folds_latex, render_latex

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("pdflatex") is None,
                                reason=f"pdflatex is not installed; {TEX_INSTALL}")


def _poppler(tool: str) -> str:
    exe = shutil.which(tool)
    assert exe, f"{tool} (poppler-utils) checks the PDF; install it with make system-deps"
    return exe


@pytest.fixture(scope="module")
def paper(quickstart_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart-report")
    return build_report(quickstart_store.spec_path, tracking_uri=quickstart_store.uri, out_dir=out,
                        formats=["md", "tex", "pdf", "png"])


def _fonts(pdf) -> list[list[str]]:
    lines = subprocess.run([_poppler("pdffonts"), str(pdf)], capture_output=True, text=True, check=True,
                           timeout=60).stdout.splitlines()
    return [line.split() for line in lines[2:]]       # two header lines


def test_pdf_has_vector_fonts_only(paper):
    assert paper.pdf == paper.out_dir / "report.pdf" and paper.pdf.stat().st_size > 10_000
    fonts = _fonts(paper.pdf)
    assert fonts, "pdffonts lists no font"
    assert not [f for f in fonts if "Type" in f and f[f.index("Type") + 1] == "3"], fonts
    assert all(f[-5] == "yes" for f in fonts), fonts            # every font embedded


def _blank_pages(pdf: Path, title: str) -> list[int]:
    """Pages with nothing but the running head (the title) and the page number."""
    pages = int(next(line.split()[-1] for line in subprocess.run(
        [_poppler("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True,
        timeout=60).stdout.splitlines() if line.startswith("Pages:")))
    blank = []
    for page in range(1, pages + 1):
        words = subprocess.run([_poppler("pdftotext"), "-f", str(page), "-l", str(page), str(pdf), "-"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.split()
        if not set(words) - set(title.split()) - {str(page)}:
            blank.append(page)
    return blank


def test_no_blank_page(paper):
    assert _blank_pages(paper.pdf, "Report: quickstart") == []


def test_a_table_nearly_a_page_tall_starts_on_page_one(tmp_path):
    """The paper's Table 1 (three stacked blocks and their paired comparisons) left page 1 blank under a heading."""
    layout = validate_report(load_spec(REPO / "experiments" / "table1_cifar_svhn.yaml"))
    rows = [{"cell": cell_id(c, layout.axes), "fold": f, "value": 50.0 + i % 40, "run_id": f"r{i}-{f}",
             "split_digest": str(f)} for i, c in enumerate(all_cells(layout)) for f in layout.folds]
    for t in layout.tables:
        data = build_table_data(t, layout.axes, layout.folds, pd.DataFrame(rows), t.protocol)
        (tmp_path / f"{t.id}.tex").write_text(render_latex(data))
        (tmp_path / f"{t.id}_folds.tex").write_text(render_folds_latex(data))
    (tmp_path / "report.tex").write_text(latex_document("Report: table1", [t.id for t in layout.tables], []))
    pdf = compile_pdf(tmp_path / "report.tex")
    assert _blank_pages(pdf, "Report: table1") == []
    assert not [f for f in _fonts(pdf) if "Type" in f and f[f.index("Type") + 1] == "3"]


def test_each_figure_in_png_pdf_svg_with_one_y_range(paper, quickstart_store):
    assert paper.figures and not paper.skipped_figures
    for fid, drawn in paper.figures.items():
        assert sorted(p.name for p in drawn.files) == sorted(f"{fid}.{ext}" for ext in ("pdf", "png", "svg"))
        assert all(p.is_file() and p.stat().st_size > 1000 for p in drawn.files)
        assert drawn.panels, fid
        assert {p.ylim for p in drawn.panels} == {drawn.panels[0].ylim}, fid
        assert all(set(p.points.values()) == {len(quickstart_store.steps)} for p in drawn.panels)


def test_index_lists_markdown_latex_and_pdf(paper):
    index = paper.index.read_text()
    for link in ("(main.md)", "(main.tex)", "(report.tex)", "(report.pdf)", "(curves-main.png)",
                 "(curves-main.pdf)", "(curves-main.svg)"):
        assert link in index, link
    assert "None: every table cell has at least one finished run." in index
    assert "split rule: not logged." in (paper.out_dir / "main.md").read_text()   # the fixture logs no params
    tex = (paper.out_dir / "report.tex").read_text()
    assert r"\figurefile{curves-main}" in tex  # at its own (paper) size, shrunk only when wider than the text


def test_a_character_pdflatex_cannot_set_says_what_to_do(tmp_path, monkeypatch):
    """Issue 33 (uni-row-labels-pdf): a caption with 🚀 failed with LaTeX's error and the log's path only."""
    tex = tmp_path / "report.tex"
    tex.write_text("x")
    log = "! LaTeX Error: Unicode character 🚀 (U+1F680)\n"
    monkeypatch.setattr("reports.latex.pdflatex", lambda: "pdflatex")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (tex.with_suffix(".log").write_text(log),
                                                            subprocess.CompletedProcess(a, 1, "", ""))[1])
    with pytest.raises(ValueError, match=r"pdflatex failed \(LaTeX Error: Unicode character 🚀 \(U\+1F680\)\); see "
                                         r".*report.log; replace that character in the YAML's captions and labels, or "
                                         r"leave pdf out of --format$"):
        compile_pdf(tex)
