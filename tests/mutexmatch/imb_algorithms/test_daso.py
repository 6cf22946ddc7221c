"""DASO in the trainer past its start (the lockstep test, tests/mutexmatch/algorithms/usb/test_daso_lockstep.py, is
its reference): on a long-tailed digits split the run uses the trainer's EMA model (its ``ema_model``), the queue
holds features of the classes it has seen (a prototype is 0 exactly for a class not seen yet), the
alignment term is logged once DASO starts, and a run stopped after the start and resumed is bit-identical in both
forms (the queue, the pseudo-label distribution and the usb form's previous semantic labels are checkpointed)."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.config import parse_config
from mutexmatch.training import Trainer


def _raw(tmp_path, name: str, form: str) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 36, "fold": 1,
                     "imbalance": {"labeled_head": 10, "labeled_ratio": 10, "unlabeled_head": 100,
                                   "unlabeled_ratio": 10}},
            "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
            "imb_algorithm": {"name": "daso", "form": form, "num_pretrain_iter": 3, "num_pl_dist_iter": 2,
                              "queue_len": 4},
            "train": {"iterations": 8, "eval_interval": 4, "batch_size": 4, "mu": 2, "num_threads": 1,
                      "progress": False, "keep_checkpoints": 10}, "output_dir": str(tmp_path / name)}


@pytest.mark.parametrize("form", ["usb", "fixed"])
def test_daso_starts_and_resumes_bit_identical(tmp_path, form):
    full = Trainer(parse_config(_raw(tmp_path, "full", form)))
    full.fit()
    alg = full.algorithm
    assert alg.ctx.ema_model is full.ema.module
    assert bool((alg.daso_fill > 0).any()) and bool(alg.daso_dist.sum() > 0)
    filled = alg.daso_fill.bool()
    norms = alg.daso_prototypes.norm(dim=1)
    assert bool((norms[filled] > 0).all()) and bool((norms[~filled] == 0).all())
    half = Trainer(parse_config(_raw(tmp_path, "half", form)))
    half.fit(stop_at=5)
    resumed = Trainer(parse_config(_raw(tmp_path, "half", form)), resume=True)
    resumed.fit()
    a, b = alg.state_dict()["imb_algorithm"], resumed.algorithm.state_dict()["imb_algorithm"]
    assert a.keys() == b.keys() and all((a[k] is None and b[k] is None) or torch.equal(a[k], b[k]) for k in a)
    assert (a["sim"] is None) == (form == "fixed")
    assert all(torch.equal(v, resumed.model.state_dict()[k]) for k, v in full.model.state_dict().items())
    lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    assert '"train/daso"' in lines[-1]
