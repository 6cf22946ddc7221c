"""A long-tailed run (issue 41 item 1): the trainer draws ``data.imbalance``'s split and its run folder records the
per-class counts (``dataset.json``) and the setting (``split.json``)."""

from __future__ import annotations

import json

import numpy as np

from mutexmatch.config import parse_config
from mutexmatch.data.longtail import imbalance_counts
from mutexmatch.data.splits import make_split
from mutexmatch.training import Trainer
from mutexmatch.training.run_files import per_class_counts


def test_long_tailed_run_records_its_per_class_counts(tmp_path):
    labeled, unlabeled = imbalance_counts(20, 10, 10), imbalance_counts(60, -10, 10)
    cfg = parse_config({
        "data": {"dataset": "digits", "num_labels": sum(labeled), "fold": 2,
                 "imbalance": {"labeled_head": 20, "labeled_ratio": 10, "unlabeled_head": 60,
                               "unlabeled_ratio": -10}},
        "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
        "train": {"iterations": 1, "eval_interval": 1, "batch_size": 4, "mu": 2, "num_threads": 1,
                  "progress": False},
        "output_dir": str(tmp_path / "run")})
    trainer = Trainer(cfg)
    facts = json.loads((tmp_path / "run" / "dataset.json").read_text())
    assert facts["labeled_per_class"] == labeled
    # the pool: the labeled images (USB's include_lb_to_ulb), then the drawn unlabeled ones
    assert facts["unlabeled_per_class"] == [a + b for a, b in zip(labeled, unlabeled)]
    meta = json.loads((tmp_path / "run" / "split.json").read_text())["meta"]
    assert meta["seed"] == 2 and meta["unlabeled_per_class"] == unlabeled and meta["rule"] == "longtail"
    assert len(trainer.split.unlabeled) == sum(labeled) + sum(unlabeled)


def test_balanced_counts():
    labels = np.repeat(np.arange(4), 30)
    split = make_split(labels, dataset="x", num_labels=8, num_classes=4, fold=0)
    assert per_class_counts(labels, split, 4) == {"labeled_per_class": [2] * 4, "unlabeled_per_class": [30] * 4}
