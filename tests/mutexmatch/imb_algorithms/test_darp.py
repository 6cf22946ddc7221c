"""DARP in the trainer past its warm-up (the lockstep test, tests/mutexmatch/algorithms/usb/test_darp_lockstep.py, is
its reference): on a long-tailed digits split the refined pool's columns sum to the target class sizes
m_c = N_u p_lb(c) and its rows to 1 (the projection's constraints), and a run stopped between refinements and
resumed is bit-identical (the saved and refined pools are checkpointed)."""
from __future__ import annotations

import torch

from mutexmatch.config import parse_config
from mutexmatch.training import Trainer


def _raw(tmp_path, name: str) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 36, "fold": 1,
                     "imbalance": {"labeled_head": 10, "labeled_ratio": 10, "unlabeled_head": 100,
                                   "unlabeled_ratio": 10}},
            "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
            "imb_algorithm": {"name": "darp", "warmup_epochs": 0, "epoch_steps": 2, "num_refine_iter": 3},
            "train": {"iterations": 8, "eval_interval": 4, "batch_size": 4, "mu": 2, "num_threads": 1,
                      "progress": False, "keep_checkpoints": 10}, "output_dir": str(tmp_path / name)}


def test_refined_pool_meets_the_target_sizes_and_resumes_bit_identical(tmp_path):
    full = Trainer(parse_config(_raw(tmp_path, "full")))
    full.fit()
    alg = full.algorithm
    counts = alg.ctx.labeled_counts.double()
    torch.testing.assert_close(alg.darp_target, counts / counts.sum() * alg.ctx.num_unlabeled)
    assert not torch.allclose(alg.darp_refined, torch.full_like(alg.darp_refined, 0.1))     # refined (steps 3, 6)
    torch.testing.assert_close(alg.darp_refined.sum(0).double(), alg.darp_target, rtol=0.02, atol=0.5)
    torch.testing.assert_close(alg.darp_refined.sum(1), torch.ones(alg.ctx.num_unlabeled), rtol=0.02, atol=0.02)
    half = Trainer(parse_config(_raw(tmp_path, "half")))
    half.fit(stop_at=5)
    resumed = Trainer(parse_config(_raw(tmp_path, "half")), resume=True)
    resumed.fit()
    a, b = alg.state_dict()["imb_algorithm"], resumed.algorithm.state_dict()["imb_algorithm"]
    assert all(torch.equal(a[k], b[k]) for k in ("orig", "refined"))
    assert all(torch.equal(v, resumed.model.state_dict()[k]) for k, v in full.model.state_dict().items())
