"""CoSSL in the trainer (the lockstep test, tests/mutexmatch/algorithms/usb/test_cossl_lockstep.py, is its reference
for the step and the warm-up): on a long-tailed digits split the warm-up runs at the first step of epoch
``warm_epoch`` on the trainer's EMA model and the teacher streams (mutexmatch.training.teacher_streams), the teacher
head is evaluated from then on, ``train/tea`` is logged, the teacher's own optimiser steps after the trainer's, and a
run stopped before or after the warm-up and resumed is bit-identical (mixup_prob, the teacher optimiser's state and
the evaluated head come back; a reversed labeled tail, so the usb form mixes too); the teacher optimiser updates as
USB's ``get_optimizer`` on the teacher head."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mutexmatch.config import parse_config
from mutexmatch.data.longtail import imbalance_counts
from mutexmatch.imb_algorithms.cossl import HEAD, CoSSLParams
from mutexmatch.training import Trainer
from mutexmatch.training.teacher_streams import teacher_optimizer

WARM_STEP = 3     # warm_epoch 1 of 3-step epochs


def _raw(tmp_path, name: str, form: str = "usb") -> dict:
    return {"data": {"dataset": "digits", "num_labels": 36, "fold": 1,
                     "imbalance": {"labeled_head": 10, "labeled_ratio": -10, "unlabeled_head": 100,
                                   "unlabeled_ratio": -10}},
            "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
            "imb_algorithm": {"name": "cossl", "form": form, "warm_epoch": 1, "epoch_steps": WARM_STEP,
                              "tfe_warm_epoch": 1, "tfe_warm_bs": 8},
            "train": {"iterations": 7, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                      "progress": False, "keep_checkpoints": 10}, "output_dir": str(tmp_path / name)}


def _tensors(trainer: Trainer) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in trainer.model.state_dict().items()}
    out.update({f"ema.{k}": v for k, v in trainer.ema.state_dict().items()})
    return out


def _same(a: Trainer, b: Trainer) -> None:
    x, y = _tensors(a), _tensors(b)
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    sa, sb = a.algorithm.state_dict()["imb_algorithm"], b.algorithm.state_dict()["imb_algorithm"]
    assert sa["mixup_prob"] == sb["mixup_prob"]
    for k, v in sa["tfe_optimizer"]["state"].items():
        assert torch.equal(v["momentum_buffer"], sb["tfe_optimizer"]["state"][k]["momentum_buffer"])


@pytest.mark.parametrize("form", ["usb", "fixed"])
def test_cossl_warms_up_teaches_and_resumes_bit_identical(tmp_path, form):
    full = Trainer(parse_config(_raw(tmp_path, "full", form)))
    init = full.model.heads[HEAD].weight.detach().clone()
    full.fit()
    alg = full.algorithm
    counts = alg.counts
    assert alg.mixup_prob == [(max(counts) - n) / max(counts) for n in counts] and counts[0] < counts[-1]
    assert full.ema.module.evaluated_head == HEAD and full.model.evaluated_head == HEAD
    assert not torch.equal(full.model.heads[HEAD].weight, init)
    assert alg.tfe_optimizer.state_dict()["state"], "the teacher's own optimiser stepped"
    held = {id(p) for g in full.optimizer.param_groups for p in g["params"]}
    assert all(id(p) in held for p in full.model.heads[HEAD].parameters())   # applied twice, as USB
    lines = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    tea = [x["train/tea"] for x in lines if "train/tea" in x]
    assert tea[0] == 0 and tea[-1] > 0      # 0 until the warm-up (steps 0-2), then the teacher term
    for stop in (2, 5):                     # before the warm-up and after it
        half = Trainer(parse_config(_raw(tmp_path, f"half{stop}", form)))
        half.fit(stop_at=stop)
        resumed = Trainer(parse_config(_raw(tmp_path, f"half{stop}", form)), resume=True)
        assert resumed.step == stop
        if stop > WARM_STEP:
            assert resumed.ema.module.evaluated_head == HEAD
        resumed.fit()
        _same(full, resumed)


def test_a_run_before_its_warm_up_evaluates_the_tpc(tmp_path):
    raw = _raw(tmp_path, "early")
    raw["train"]["iterations"] = WARM_STEP
    trainer = Trainer(parse_config(raw))
    trainer.fit()
    assert trainer.algorithm.mixup_prob is None and trainer.ema.module.evaluated_head is None
    assert not trainer.algorithm.tfe_optimizer.state_dict()["state"]


def test_teacher_optimizer_updates_as_usbs(usb_get_optimizer):
    """Ours on a teacher head vs USB's get_optimizer(teacher_classifier, 'SGD', tfe_warm_lr, 0.9, tfe_warm_wd), the
    same gradients, three steps."""
    torch.manual_seed(0)
    ours, theirs = nn.Linear(5, 3), nn.Linear(5, 3)
    theirs.load_state_dict(ours.state_dict())
    params = CoSSLParams()
    opt_ours = teacher_optimizer(ours, params, "sgd", 0.9, True)
    opt_usb = usb_get_optimizer(theirs, "SGD", params.tfe_warm_lr, 0.9, params.tfe_warm_wd, 1.0)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in ours.parameters()]
        for model, opt in ((ours, opt_ours), (theirs, opt_usb)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(ours.weight, nn.Linear(5, 3).weight)


@pytest.fixture
def usb_get_optimizer():
    from tests.mutexmatch.algorithms.usb.conftest import _require_semilearn
    _require_semilearn()
    from semilearn.core.utils import get_optimizer
    return get_optimizer


def test_teacher_streams_balance_the_classes_and_pass_over_the_pool(tmp_path):
    """The labeled stream draws every class about equally (USB's WeightedRandomSampler at rates 1/N_c) from a
    long-tailed labeled set, each step its own draw; the unlabeled stream visits pool images without repeats within a
    pass (USB's shuffle), a new order each pass; both of the right sizes."""
    trainer = Trainer(parse_config(_raw(tmp_path, "streams")))
    streams, alg = trainer.algorithm.teacher_batches, trainer.algorithm
    b = trainer.cfg.train.batch_size
    batches = [streams(step) for step in range(400)]
    assert all(x.y.tolist() == list(x.labels) and len(x.labels) == b and len(x.u) == b for x in batches)
    assert sum(batches[i].labels != batches[i + 1].labels for i in range(100)) > 90    # a draw a step
    freq = torch.bincount(torch.tensor([y for x in batches for y in x.labels]), minlength=len(alg.counts)).float()
    freq /= freq.sum()
    assert max(alg.counts) >= 5 * min(alg.counts) and float(freq.min()) > 0.5 / len(alg.counts)
    assert float(freq.max()) < 1.5 / len(alg.counts)
    per_pass = len(streams.pool) // streams.u_batch
    first = torch.cat([streams.pool[streams.pool_positions(s)] for s in range(per_pass)])
    assert len(first.unique()) == len(first) == per_pass * streams.u_batch
    assert not torch.equal(streams.pool_positions(0), streams.pool_positions(per_pass))



def test_a_class_without_a_labeled_image_is_refused_before_the_first_step(tmp_path):
    """labeled_head 10, ratio 11: the tail class gets int(10 / 11) = 0 labeled images, which CoSSL's warm-up (weight
    imprinting, TFE) cannot use; refused when the trainer is built, naming the class, the split and the way out,
    where USB would fail at the warm-up. rule 'ceil' gives it one image and builds."""
    raw = _raw(tmp_path, "empty")
    imb = raw["data"]["imbalance"]
    imb["labeled_ratio"] = 11
    raw["data"]["num_labels"] = sum(imbalance_counts(10, 11, 10))
    with pytest.raises(ValueError, match=r"imb_algorithm.name='cossl': class 9 has no labeled image in this split "
                                         r"\(data.imbalance: labeled_head=10, labeled_ratio=11(\.0)?, rule='int'\)"):
        Trainer(parse_config(raw))
    assert not (tmp_path / "empty" / "metrics.jsonl").exists()
    imb["rule"] = "ceil"
    raw["data"]["num_labels"] = sum(imbalance_counts(10, 11, 10, "ceil"))
    raw["output_dir"] = str(tmp_path / "ceil")
    assert min(Trainer(parse_config(raw)).algorithm.counts) == 1
