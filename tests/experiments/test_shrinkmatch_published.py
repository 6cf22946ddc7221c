"""The published cells of ``experiments/shrinkmatch_published.yaml`` are ShrinkMatch's README and the paper's Table 1.

``shrinkmatch_readme_c4339b8.txt`` is README.md of github.com/LiheYoung/ShrinkMatch at commit
c4339b8109fcfe64b188edfca5180d2743c4bd0f, byte for byte (sha256 52e40efa...3af5), the commit whose CIFAR code made
``tests/mutexmatch/algorithms/golden/shrinkmatch.pt``:

    git --git-dir=<mirror of LiheYoung/ShrinkMatch> show c4339b8:README.md

Its "Results" tables print one accuracy per seed and their mean, no std. A quoted cell is "<the printed mean>±<the
sample std (n - 1) of the printed seeds, two decimals>", and the printed mean is the seeds' mean to within its last
digit (the README truncates: SimMatch's CIFAR-10 seeds average 94.398, printed 94.39). The MutexMatch row is the
paper's Table 1, as ``experiments/table1_cifar_svhn.yaml`` quotes it."""

from __future__ import annotations

import hashlib
import re
import statistics
from decimal import Decimal
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
README = HERE / "shrinkmatch_readme_c4339b8.txt"
EXPERIMENTS = HERE.parents[1] / "experiments"
YAML = EXPERIMENTS / "shrinkmatch_published.yaml"
SECTIONS = {"cifar10-40": "CIFAR-10 @40 labels", "cifar100-400": "CIFAR-100 @400 labels"}


def _readme_rows() -> dict[tuple[str, str], tuple[list[str], str]]:
    """(method level, setting) -> (the printed per-seed accuracies, the printed mean) of the README's tables."""
    text = README.read_text(encoding="utf-8")
    rows = {}
    for setting, title in SECTIONS.items():
        table = text.split(f"### {title}", 1)[1].split("###", 1)[0]
        for line in table.splitlines():
            cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
            if len(cells) > 2 and re.fullmatch(r"\d+\.\d\d", cells[1]):
                rows[(cells[0].lower(), setting)] = (cells[1:-1], cells[-1])
    return rows


def _table() -> dict:
    (table,) = yaml.safe_load(YAML.read_text())["tables"]
    return table


def test_the_readme_copy_is_the_pinned_file() -> None:
    assert hashlib.sha256(README.read_bytes()).hexdigest() == \
        "52e40efa8867623b22eb8a4b949215ac09b3a29c2f1fd66b889b47eea5353af5"


def test_every_readme_cell_is_quoted_as_mean_and_seed_std() -> None:
    rows = _readme_rows()
    assert set(rows) == {(m, s) for m in ("simmatch", "shrinkmatch") for s in SECTIONS}, sorted(rows)
    published = _table()["published"]
    for (level, setting), (seeds, mean) in rows.items():
        values = [Decimal(v) for v in seeds]
        std = Decimal(statistics.stdev(float(v) for v in values)).quantize(Decimal("0.01"))
        assert published[level][setting] == f"{mean}±{std}", (level, setting)
        assert abs(sum(values) / len(values) - Decimal(mean)) <= Decimal("0.01"), (level, setting, mean)


def test_the_mutexmatch_row_is_table_1s() -> None:
    (table1,) = [t for t in yaml.safe_load((EXPERIMENTS / "table1_cifar_svhn.yaml").read_text())["tables"]
                 if "mutexmatch" in t.get("published", {})]
    assert _table()["published"]["mutexmatch"] == {s: table1["published"]["mutexmatch"][s] for s in SECTIONS}


def test_the_simmatch_level_is_usb_classic_cvs() -> None:
    axes = yaml.safe_load(YAML.read_text())["axes"]["method"]
    usb = yaml.safe_load((EXPERIMENTS / "usb_classic_cv.yaml").read_text())["axes"]["method"]
    assert axes["simmatch"] == usb["simmatch"]


def test_the_mutexmatch_trials_are_table_1s(spec_imagefolders, tmp_path) -> None:
    """Every MutexMatch trial here is a Table 1 trial (same config hash), so a launch reuses table1's finished runs;
    the CIFAR-100 ShrinkMatch trials keep the official code's weight decay 1e-3."""
    from orchestration.overrides import load_sweep, plan_sweep

    (tmp_path / "data").mkdir()
    spec_imagefolders(tmp_path)
    plans = {p: plan_sweep(load_sweep(EXPERIMENTS / p, tmp_path), tmp_path)
             for p in ("shrinkmatch_published.yaml", "table1_cifar_svhn.yaml")}
    ours = {t.config_hash for t in plans["shrinkmatch_published.yaml"].grid
            if t.kind == "grid" and t.cell.as_dict()["method"] == "mutexmatch"}
    assert len(ours) == 10 and ours <= {t.config_hash for t in plans["table1_cifar_svhn.yaml"].grid}
