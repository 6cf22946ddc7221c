"""The files a run writes into its folder besides checkpoints and metrics (names: :mod:`.runfolder`): the resolved
config, the split, the marker ``run.json`` and the dataset facts; and what a resumed run checks of them.
"""

from __future__ import annotations

import json
import warnings

import numpy as np

from mutexmatch.atomic import atomic_write
from mutexmatch.config import RunConfig, config_hash
from mutexmatch.data.load import DatasetBundle
from mutexmatch.data.splits import Split
from mutexmatch.training.runfolder import RunFolder
from mutexmatch.yamlfile import dump_yaml

__all__ = ["marker", "dataset_facts", "write_run_files", "check_resumed_files"]


def marker(cfg: RunConfig, split: Split) -> dict:
    """``run.json``: what makes the folder a run, and which configuration and split it trains."""
    return {"mutexmatch_run": 1, "config_hash": config_hash(cfg), "split_digest": split.digest()}


def per_class_counts(train_labels: np.ndarray, split: Split, num_classes: int) -> dict[str, list[int]]:
    """Labeled and unlabeled train images of each class (the unlabeled pool's extra images, whose classes are
    unknown, left out: ``images.extra_unlabeled``); what a long-tailed split (``data.imbalance``) shapes."""
    pool = split.unlabeled[split.unlabeled < len(train_labels)]
    return {"labeled_per_class": np.bincount(train_labels[split.labeled], minlength=num_classes).tolist(),
            "unlabeled_per_class": np.bincount(train_labels[pool], minlength=num_classes).tolist()}


def dataset_facts(cfg: RunConfig, bundle: DatasetBundle, split: Split) -> dict:
    """What the run's images were: classes, sizes and the normalisation actually applied."""
    b = bundle
    return {
        "dataset": b.info.name, "normalization": cfg.data.normalization, "mean": list(b.info.mean),
        "std": list(b.info.std), "image_size": b.info.image_size, "num_classes": b.info.num_classes,
        "classes": list(b.classes) if b.classes else None,
        "images": {"train": len(b.train), "test": len(b.test), "val": len(b.val) if b.val else len(split.val),
                   "extra_unlabeled": len(b.extra_unlabeled) if b.extra_unlabeled else 0},
        **per_class_counts(b.train.y.numpy(), split, b.info.num_classes),
    }


def write_run_files(run: RunFolder, cfg: RunConfig, bundle: DatasetBundle, split: Split) -> None:
    """A fresh run's files (and no metrics log yet)."""
    atomic_write(run.config, dump_yaml(cfg.to_dict()).encode())
    split.save(run.split)
    atomic_write(run.marker, json.dumps(marker(cfg, split), indent=2).encode())
    atomic_write(run.dataset, json.dumps(dataset_facts(cfg, bundle, split), indent=2).encode())
    run.metrics.unlink(missing_ok=True)


def check_resumed_files(run: RunFolder, cfg: RunConfig, split: Split, step: int) -> None:
    """After a checkpoint of step ``step`` loaded (it proved config and split): a ``run.json`` that is not this
    run's marker is rewritten, and evaluations missing from ``metrics.jsonl`` are said, both with a warning (they
    were accepted silently)."""
    try:
        found = json.loads(run.marker.read_text())
    except (OSError, ValueError):
        found = None
    if found != marker(cfg, split):
        warnings.warn(f"{run.marker}: not this run's marker (unreadable or changed); rewritten from the "
                      f"checkpoint, which holds the run's config hash and split", RuntimeWarning, stacklevel=3)
        atomic_write(run.marker, json.dumps(marker(cfg, split), indent=2).encode())
    logged = {row["step"] for row in run.read_metrics()}
    interval = cfg.train.eval_interval
    missing = [s for s in range(interval, step + 1, interval) if s not in logged]
    if missing:
        warnings.warn(f"{run.metrics}: the evaluations of {len(missing)} step(s) up to {step} are not "
                      f"in it (first: step {missing[0]}; emptied, cut or deleted?); they are not redone, so the "
                      "run's metrics have a gap there", RuntimeWarning, stacklevel=3)
