"""USB's epoch boundary in the trainer for the imbalance algorithms that read the unlabeled pool's logits there
(``EpochNeeds(pool_logits=True)``: Adsh, SAW): the EMA model's logits on every pool image, in the pool's order, reach
``on_epoch_end`` after the last step of each of USB's epochs (``epoch_steps``), the state they set is checkpointed,
and a run stopped mid-epoch and resumed is bit-identical to one that was not."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.config import parse_config
from mutexmatch.imb_algorithms import IMB_ALGORITHMS
from mutexmatch.training import Trainer

POOL = sorted(n for n, c in IMB_ALGORITHMS.items() if c.epoch_needs.pool_logits)


def _raw(imb: str, tmp_path, name: str) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 20, "fold": 1}, "model": {"backbone": "small_cnn"},
            "algorithm": {"name": IMB_ALGORITHMS[imb].bases[0]}, "imb_algorithm": {"name": imb, "epoch_steps": 2},
            "train": {"iterations": 6, "eval_interval": 3, "batch_size": 4, "mu": 2, "num_threads": 1,
                      "progress": False, "keep_checkpoints": 10}, "output_dir": str(tmp_path / name)}


def test_pool_logits_are_the_ema_models_in_pool_order(tmp_path):
    trainer = Trainer(parse_config(_raw(POOL[0], tmp_path, "run")))
    ema, idx = trainer.ema.module, torch.from_numpy(trainer.split.unlabeled)
    got = trainer.evaluator.pool_logits(ema)
    assert got.shape == (len(idx), trainer.num_classes) and got.dtype == torch.float32
    x, y = trainer.bundle.train.x[idx], trainer.bundle.train.y[idx]
    expected = torch.cat([logits for logits, _ in trainer.evaluator.logits(ema, x, y)])
    torch.testing.assert_close(got, expected.float())
    one = torch.cat([logits for logits, _ in trainer.evaluator.logits(ema, x[5:6], y[5:6])])
    torch.testing.assert_close(got[5:6], one.float())


@pytest.mark.parametrize("imb", POOL)
def test_epoch_ends_reach_the_algorithm_and_resume_bit_identical(tmp_path, imb, monkeypatch):
    cls, calls = IMB_ALGORITHMS[imb], []
    real = cls.on_epoch_end

    def spy(self, pool_logits):
        calls.append(pool_logits.clone())
        real(self, pool_logits)
    monkeypatch.setattr(cls, "on_epoch_end", spy)
    full = Trainer(parse_config(_raw(imb, tmp_path, "full")))
    full.fit()
    assert len(calls) == 3 and all(c.shape == (len(full.split.unlabeled), full.num_classes) for c in calls)
    torch.testing.assert_close(calls[-1], full.evaluator.pool_logits(full.ema.module))   # the last step's EMA
    half = Trainer(parse_config(_raw(imb, tmp_path, "half")))
    half.fit(stop_at=3)                                   # mid-epoch: the boundary after step 2 is in the checkpoint
    resumed = Trainer(parse_config(_raw(imb, tmp_path, "half")), resume=True)
    resumed.fit()
    a, b = full.algorithm.state_dict()["imb_algorithm"], resumed.algorithm.state_dict()["imb_algorithm"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = _fresh_state(full)
    assert any(not torch.equal(a[k], start[k]) for k in a)          # the boundaries moved the state
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def _fresh_state(trainer: Trainer) -> dict:
    """The state the algorithm starts with (before any epoch boundary)."""
    return type(trainer.algorithm)({}, trainer.algorithm.ctx).state_dict()["imb_algorithm"]
