"""``python -m mutexmatch.datasets check NAME --imbalance MAPPING``: a long-tailed split's images per class before
training (issue 41 item 1), the counts of the split the trainer draws, and bad values in one line."""

from __future__ import annotations

import numpy as np

from mutexmatch.data.longtail import imbalance_counts
from mutexmatch.data.load import load_dataset
from mutexmatch.data.splits import make_split
from mutexmatch.datasets import main

SETTING = "{labeled_head: 20, labeled_ratio: 10, unlabeled_head: 100, unlabeled_ratio: -10}"


def _rows(out: str) -> dict[str, list[int]]:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("long-tailed split")) + 2
    rows = {}
    for ln in lines[start:]:
        cells = ln.split()
        rows[cells[0]] = [int(c.replace(",", "")) for c in cells[1:]]
        if cells[0] == "total":
            return rows
    raise AssertionError(out)


def test_check_shows_the_long_tailed_split_per_class(tmp_path, capsys):
    assert main(["check", "digits", "--root", str(tmp_path), "--imbalance", SETTING, "--fold", "1"]) == 0
    out = capsys.readouterr().out
    labeled = imbalance_counts(20, 10, 10)
    assert f"long-tailed split, fold 1 (seed 1): data.num_labels: {sum(labeled)}" in out
    rows = _rows(out)
    assert [rows[str(c)][0] for c in range(10)] == labeled
    # the drawn unlabeled images: the reversed setting, except where a class has fewer than asked
    y = load_dataset("digits", str(tmp_path)).train.y.numpy()
    imb = type("I", (), dict(labeled_head=20, labeled_ratio=10, unlabeled_head=100, unlabeled_ratio=-10,
                             rule="int"))
    split = make_split(y, dataset="digits", num_labels=sum(labeled), num_classes=10, fold=1, imbalance=imb,
                       unlabeled_includes_labeled=False)
    assert [rows[str(c)][1] for c in range(10)] == np.bincount(y[split.unlabeled], minlength=10).tolist()
    assert rows["total"] == [sum(labeled), sum(imbalance_counts(100, -10, 10))]


def test_bad_setting_is_one_line(tmp_path, capsys):
    assert main(["check", "digits", "--root", str(tmp_path), "--imbalance", "{labeled_head: 20, gamma: 3}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "data.imbalance.gamma: unknown key; allowed keys: labeled_head, labeled_ratio" in err
    assert main(["check", "digits", "--root", str(tmp_path), "--imbalance", "{labeled_head: 20}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: data.imbalance.labeled_ratio: missing; data.imbalance needs at least labeled_head "
                   "(N_1) and labeled_ratio (gamma_l)")
