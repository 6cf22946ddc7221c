"""MixMatch's pieces against the paper's equations (the step-for-step equality with USB, ReMixMatch's too, is
tests/mutexmatch/algorithms/usb/test_mixmatch_lockstep.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mutexmatch.algorithms.mixmatch import draw_mixup, mixup, sharpen


def test_sharpen_is_eq7():
    p = torch.tensor([[0.6, 0.3, 0.1]])
    raw = [0.36, 0.09, 0.01]
    assert sharpen(p, 0.5)[0].tolist() == pytest.approx([r / sum(raw) for r in raw])
    assert torch.allclose(sharpen(p, 1.0), p)


def test_mixup_draws_are_the_global_generators_and_keep_each_row_closer_to_itself():
    np.random.seed(0)
    torch.manual_seed(0)
    lams = [draw_mixup(6, 0.75)[0] for _ in range(200)]
    assert min(lams) >= 0.5 and max(lams) <= 1.0 and len(set(lams)) > 100
    np.random.seed(1)
    torch.manual_seed(1)
    lam, perm = draw_mixup(6, 0.75)
    np.random.seed(1)
    torch.manual_seed(1)
    raw = np.random.beta(0.75, 0.75)                     # USB's mixup_one_target, the same generators and order
    assert lam == max(raw, 1 - raw) and torch.equal(perm, torch.randperm(6))
    x, y = torch.randn(6, 3), torch.eye(6)
    mx, my = mixup(x, y, lam, perm)
    for i in range(6):
        assert torch.allclose(mx[i], lam * x[i] + (1 - lam) * x[perm[i]])
        assert torch.allclose(my[i], lam * y[i] + (1 - lam) * y[perm[i]])
