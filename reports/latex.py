"""``report.tex`` (every LaTeX table and figure in one document) and its compilation to ``report.pdf``.

What venues ask of a PDF, and how the document gives it:

- vector fonts only: T1 text with Latin Modern when ``lmodern`` is installed (Debian ``lmodern``, which
  ``make system-deps`` installs); without it the default OT1 Computer Modern, also vector — T1 without lmodern would
  fall back to bitmap (Type 3) EC fonts. Figures are PDFs with TrueType fonts (:mod:`reports.figures`);
- no blank pages from floats: the title goes to the running head, so the first table can start page 1 however tall
  it is, and the float fractions let a large table or figure share a page with text instead of waiting for a float
  page of its own;
- a build that runs pdflatex as often as it asks (the per-fold ``longtable`` needs a second run to settle its column
  widths): :func:`compile_pdf` reruns until the log stops asking, at most :data:`MAX_RUNS` times.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from reports.tables_latex import latex_escape

__all__ = ["MAX_RUNS", "PACKAGES", "TEX_INSTALL", "latex_document", "pdflatex", "compile_pdf"]

MAX_RUNS = 4
PACKAGES = ("geometry", "booktabs", "longtable", "graphicx")
TEX_INSTALL = "`make system-deps` (Debian/Ubuntu packages: TEX_DEBS in the Makefile)"
_TIMEOUT_S = 300
_RERUN = re.compile(r"Rerun (LaTeX|to get)|Table widths have changed")
_FLOATS = [r"\renewcommand{\topfraction}{0.9}", r"\renewcommand{\bottomfraction}{0.8}",
           r"\renewcommand{\textfraction}{0.07}", r"\renewcommand{\floatpagefraction}{0.8}",
           r"\setcounter{topnumber}{3}", r"\setcounter{totalnumber}{5}"]


# A figure file at its own size, shrunk to the text width only when wider (graphicx alone: no extra package).
_FIGURE_FILE = (r"\newcommand{\figurefile}[1]{\sbox0{\includegraphics{#1}}"
                r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi}")


def latex_document(title: str, table_ids: Sequence[str], figures: Sequence[tuple[str, str]],
                   sections: Sequence[str] = ()) -> str:
    """The standalone document: ``\\input`` of each ``<id>.tex`` table, then each figure (file stem, caption), then
    each ``<section>.tex`` (the searches' tables, :mod:`reports.search`), then the per-fold tables
    (``<id>_folds.tex``) in an appendix."""
    lines = [r"\documentclass[10pt]{article}",
             r"\IfFileExists{lmodern.sty}{\usepackage[T1]{fontenc}\usepackage{lmodern}}{}",
             r"\usepackage[utf8]{inputenc}", r"\usepackage[margin=2cm]{geometry}",
             # captions a size below the text, as venues set them (LaTeX's own \caption is \normalsize, larger
             # than the footnotesize tables under it); caption.sty is in TeX Live's latex-recommended
             r"\IfFileExists{caption.sty}{\usepackage[font=small,labelfont=bf,skip=4pt]{caption}}{}",
             *(rf"\usepackage{{{p}}}" for p in PACKAGES if p != "geometry"), *_FLOATS, _FIGURE_FILE,
             r"\begin{document}",
             # the title in the running head, not above the first table: a table nearly a page tall could not
             # follow a heading on page 1 and would leave that page empty
             r"\pagestyle{myheadings}", rf"\markright{{{latex_escape(title)}}}"]
    lines += [rf"\input{{{t}.tex}}" for t in table_ids]
    for stem, caption in figures:
        # no extension: pdflatex takes the vector .pdf before the .png. At its own size (one column, 3.3 in, or the
        # text width, 6.8 in: reports.figures), so its 8 pt text stays 8 pt; only what is wider than the page shrinks.
        lines += [r"\begin{figure}[htbp]", r"\centering",
                  rf"\figurefile{{{stem}}}",
                  rf"\caption{{{latex_escape(caption)}}}", r"\end{figure}"]
    lines += [rf"\input{{{s}.tex}}" for s in sections]
    if table_ids:
        lines += [r"\clearpage", r"\appendix", r"\section*{Appendix: per-fold values}"]
        lines += [rf"\input{{{t}_folds.tex}}" for t in table_ids]
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"


def pdflatex() -> str:
    """The pdflatex executable; ``ValueError`` saying how to install it when it is not on PATH."""
    exe = shutil.which("pdflatex")
    if exe is None:
        raise ValueError(f"--format pdf: pdflatex is not installed (it compiles report.tex); install it with "
                         f"{TEX_INSTALL}, or leave pdf out of --format")
    return exe


def compile_pdf(tex: Path) -> Path:
    """Compile ``tex`` in its folder until pdflatex stops asking for a rerun; the PDF. ``ValueError`` with the
    first LaTeX error line and the log's path when it fails."""
    exe = pdflatex()
    log = tex.with_suffix(".log")
    for _ in range(MAX_RUNS):
        try:
            proc = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tex.parent,
                                  capture_output=True, text=True, errors="replace", timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ValueError(f"{tex}: pdflatex ran longer than {_TIMEOUT_S} s; see {log}") from None
        text = log.read_text(errors="replace") if log.is_file() else proc.stdout
        if proc.returncode != 0:
            first = next((ln for ln in text.splitlines() if ln.startswith("!")), f"exit code {proc.returncode}")
            fix = ("; replace that character in the YAML's captions and labels, or leave pdf out of --format"
                   if "Unicode character" in first else "")   # pdflatex's fonts lack emoji, Hebrew… (issue 33)
            raise ValueError(f"{tex}: pdflatex failed ({first.lstrip('! ')}); see {log}{fix}")
        if not _RERUN.search(text):
            break
    for ext in (".aux", ".out"):       # working files; report.log stays for its warnings
        tex.with_suffix(ext).unlink(missing_ok=True)
    return tex.with_suffix(".pdf")
