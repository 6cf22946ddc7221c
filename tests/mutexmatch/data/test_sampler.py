from __future__ import annotations

import pytest
import torch

from mutexmatch.data.sampler import SSLSampler


def test_draws_from_the_right_pools_with_replacement():
    lb = torch.tensor([3, 7])
    ulb = torch.arange(100, 110)
    s = SSLSampler(lb, ulb, batch_size=8, mu=3, seed=0)
    b = s.next()
    assert b.lb.shape == (8,) and set(b.lb.tolist()) <= {3, 7}
    assert b.ulb.shape == (24,) and set(b.ulb.tolist()) <= set(range(100, 110))
    assert torch.equal(ulb[b.ulb_pos], b.ulb)   # positions in the pool, the index of per-sample state
    assert torch.equal(lb[b.lb_pos], b.lb)     # positions in the labeled set (SimMatch's bank index)
    assert len(set(b.lb.tolist())) < 8  # with replacement: 8 draws from 2 images repeat


def test_state_restores_the_exact_order():
    s = SSLSampler(torch.arange(10), torch.arange(50), batch_size=4, mu=2, seed=1)
    s.next()
    state = s.state_dict()
    expected = [s.next() for _ in range(3)]
    t = SSLSampler(torch.arange(10), torch.arange(50), batch_size=4, mu=2, seed=99)
    t.load_state_dict(state)
    for e in expected:
        g = t.next()
        assert torch.equal(e.lb, g.lb) and torch.equal(e.ulb, g.ulb)


def test_supervised_needs_no_unlabeled():
    s = SSLSampler(torch.arange(4), torch.empty(0, dtype=torch.long), batch_size=2, mu=7, seed=0,
                   with_unlabeled=False)
    assert s.next().ulb.numel() == 0


def test_empty_pools_rejected():
    with pytest.raises(ValueError, match="labeled set is empty"):
        SSLSampler(torch.empty(0, dtype=torch.long), torch.arange(3), batch_size=2, mu=1, seed=0)
    with pytest.raises(ValueError, match="unlabeled pool is empty"):
        SSLSampler(torch.arange(3), torch.empty(0, dtype=torch.long), batch_size=2, mu=1, seed=0)
