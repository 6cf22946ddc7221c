"""The quoted rows of ``experiments/usb_cv.yaml`` are USB's ``results/usb_cv.csv``, converted (issue 42 item 4).

``usb_cv_3314042.csv`` is that file as github.com/microsoft/Semi-supervised-learning stores it at commit
3314042817ada8dad2ad0a546a78cf2978ae9e8e (2023-07-19, "[Update] Hugo schmutz/DeFixmatch (#129)", the last commit that
touched it; unchanged at HEAD 1ef4cbebcc0b368158315aeb425053858cf6c845), byte for byte (sha256 6abf9743...6a72):

    git --git-dir=<mirror of microsoft/Semi-supervised-learning> show 3314042:results/usb_cv.csv

It holds the best top-1 error rate, mean±std over 3 seeds (``None`` where USB has no number); the YAML prints
100 - error with the same std, two decimals, ``-`` for ``None``. Every CSV row is quoted, on every setting the YAML
runs (Semi-Aves, which it does not, is left out), and each algorithm the YAML runs is its row's ``level``."""

from __future__ import annotations

import csv
import hashlib
from decimal import Decimal
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CSV = HERE / "usb_cv_3314042.csv"
YAML = HERE.parents[1] / "experiments" / "usb_cv.yaml"
NOT_HERE = {"semi-aves-3959"}   # USB-CV's Semi-Aves: no such dataset here


def _usb_rows() -> dict[str, dict[str, str]]:
    """CSV row name -> {setting as the YAML names it (cifar100-200): 'error±std' or 'None'}."""
    header, *rows = list(csv.reader(CSV.read_text(encoding="utf-8-sig").splitlines()))
    settings = [c.replace("_", "-") for c in header[1:]]
    return {row[0]: dict(zip(settings, row[1:])) for row in rows if row}


def _accuracy(error_std: str) -> str:
    if error_std == "None":
        return "-"
    error, std = error_std.split("±")
    return f"{Decimal(100) - Decimal(error):.2f}±{Decimal(std):.2f}"


def _table() -> tuple[dict, dict]:
    raw = yaml.safe_load(YAML.read_text())
    (table,) = raw["tables"]
    return raw, table


def test_the_csv_copy_is_usbs_file() -> None:
    assert hashlib.sha256(CSV.read_bytes()).hexdigest() == (
        "6abf9743fc9cab5a7104cb8cd69662a126094ffc01c0e4f5021f30b954f66a72")


def _csv_name(row: dict) -> str:
    """The CSV row a quoted row is: its run level, else its label lower-cased without spaces, dashes and Π."""
    return row.get("level") or row["label"].lower().replace("-", "").replace(" ", "").replace("π", "pi")


def test_every_csv_row_is_quoted_converted_on_every_setting_run() -> None:
    raw, table = _table()
    usb, settings = _usb_rows(), list(raw["axes"]["setting"])
    assert set(next(iter(usb.values()))) - NOT_HERE == set(settings)
    quoted = {_csv_name(row): row["values"] for row in table["quoted_rows"]}
    assert len(quoted) == len(table["quoted_rows"]) and set(quoted) == set(usb), set(quoted) ^ set(usb)
    wrong = [(name, s, quoted[name].get(s), _accuracy(v)) for name, cells in usb.items() for s, v in cells.items()
             if s not in NOT_HERE and quoted[name].get(s) != _accuracy(v)]
    assert not wrong, f"(row, setting, quoted, USB's CSV converted): {wrong}"


def test_every_run_algorithm_is_its_quoted_rows_level() -> None:
    raw, table = _table()
    run = {level: cell["algorithm"]["name"] for level, cell in raw["axes"]["method"].items()}
    levels = {row["level"] for row in table["quoted_rows"] if row.get("level")}
    assert levels == set(run) and all(level == name for level, name in run.items())
