"""The Makefile's targets as `make -n` resolves them (nothing is run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _dry_run(target: str, path: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run([make, "-n", "-C", str(REPO), target], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_quickstart_compiles_the_pdf_where_latex_is_installed(tmp_path):
    """Issue 34: `make quickstart` wrote no report.pdf even with TeX Live installed; now it asks for one exactly when
    pdflatex and TeX Live's recommended packages (kpsewhich finds booktabs.sty) are there."""
    for exe, script in (("pdflatex", "exit 0"), ("kpsewhich", "echo /tex/booktabs.sty")):
        (tmp_path / exe).write_text(f"#!/bin/sh\n{script}\n")
        (tmp_path / exe).chmod(0o755)
    (build,) = [ln for ln in _dry_run("quickstart", str(tmp_path)) if "-m reports.build" in ln]
    assert build.endswith(" --format md,tex,png,pdf")
    (tmp_path / "kpsewhich").write_text("#!/bin/sh\nexit 1\n")     # pdflatex without the packages the report uses
    (build,) = [ln for ln in _dry_run("quickstart", str(tmp_path)) if "-m reports.build" in ln]
    assert build.endswith(" --format md,tex,png")
    empty = tmp_path / "empty"
    empty.mkdir()
    (build,) = [ln for ln in _dry_run("quickstart", str(empty)) if "-m reports.build" in ln]
    assert build.endswith(" --format md,tex,png")
