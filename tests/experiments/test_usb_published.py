"""USB's published column of ``experiments/usb_classic_cv.yaml`` is USB's ``results/classic_cv.csv``, converted.

``usb_classic_cv_4499503.csv`` is that file as github.com/microsoft/Semi-supervised-learning stores it at commit
44995033c13f1831e572d2c4d470addc84e1aa3a ("[Update] Convert results to csv"; unchanged at HEAD
1ef4cbebcc0b368158315aeb425053858cf6c845), byte for byte (sha256 b30bcc20...8943, its UTF-8 byte-order mark kept):

    git --git-dir=<mirror of microsoft/Semi-supervised-learning> show 4499503:results/classic_cv.csv

It holds the best top-1 error rate, mean±std over 3 seeds; the YAML prints 100 - error with the same std, two
decimals. Every quoted cell must be that conversion of its row (MixMatch's CIFAR-100 level reads ``mixmatch``), and
every algorithm the YAML runs that has a row in the CSV must be quoted (issue 43 item 3: CRMatch)."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CSV = HERE / "usb_classic_cv_4499503.csv"
YAML = HERE.parents[1] / "experiments" / "usb_classic_cv.yaml"
CSV_ROW = {"mixmatch_cifar100": "mixmatch"}   # a level whose numbers are another CSV row's


def _usb_rows() -> dict[str, dict[str, str]]:
    """CSV row name -> {setting as the YAML names it (cifar10-40): 'error±std'}."""
    header, *rows = list(csv.reader(CSV.read_text(encoding="utf-8-sig").splitlines()))
    settings = [c.replace("_", "-") for c in header[1:]]
    return {row[0]: dict(zip(settings, row[1:])) for row in rows if row}


def _accuracy(error_std: str) -> str:
    error, std = error_std.split("±")
    return f"{Decimal(100) - Decimal(error):.2f}±{Decimal(std):.2f}"


def test_every_quoted_usb_cell_is_its_csv_row_converted() -> None:
    (table,) = yaml.safe_load(YAML.read_text())["tables"]
    usb = _usb_rows()
    wrong = [(level, setting, value, _accuracy(usb[CSV_ROW.get(level, level)][setting]))
             for level, cells in table["published"].items() for setting, value in cells.items()
             if value != _accuracy(usb[CSV_ROW.get(level, level)][setting])]
    assert not wrong, f"(level, setting, quoted, USB's CSV converted): {wrong}"


def test_every_run_algorithm_with_a_csv_row_is_quoted() -> None:
    raw = yaml.safe_load(YAML.read_text())
    names = {level["algorithm"]["name"] for level in raw["axes"]["method"].values()}
    quoted = {CSV_ROW.get(level, level) for level in raw["tables"][0]["published"]}
    assert names & set(_usb_rows()) <= quoted and "crmatch" in quoted
