"""SimMatch's label propagation and labeled bank against the paper's definitions worked by hand (the step-for-step
equality with USB is tests/mutexmatch/algorithms/usb/test_simmatch_lockstep.py)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mutexmatch.algorithms.simmatch import LabeledBank, propagate


def test_unfolding_and_aggregation_follow_the_definitions():
    bank = LabeledBank(3, 2)
    bank.emb = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    bank.labels = torch.tensor([0, 1, 1])
    probs = torch.tensor([[0.7, 0.3]])
    z = torch.tensor([[0.8, 0.6]])
    unfolded, aggregated = propagate(probs, z, bank, temperature=0.5, alpha=0.9)
    e = [math.exp(float(z[0] @ bank.emb[k]) / 0.5) for k in range(3)]
    q = [x / sum(e) for x in e]
    raw = [q[0] * 0.7, q[1] * 0.3, q[2] * 0.3]
    assert unfolded[0].tolist() == pytest.approx([r / sum(raw) for r in raw], rel=1e-5)
    assert aggregated[0].tolist() == pytest.approx([0.9 * 0.7 + 0.1 * q[0], 0.9 * 0.3 + 0.1 * (q[1] + q[2])],
                                                   rel=1e-5)


def test_bank_update_normalises_each_embedding_by_default_and_across_the_batch_as_usb():
    """Our default keeps unit rows; ``usb`` is USB 0.3.2's F.normalize(0.7 B[:, idx] + 0.3 k^T) with the default
    dim 1 of the (d, batch) matrix: unit across the batch, not per embedding (the named deviation)."""
    pos, emb = torch.tensor([1, 4, 5]), F.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))
    ours, usb = LabeledBank(6, 4), LabeledBank(6, 4)
    before = usb.emb.clone()
    ours.update(pos, emb, torch.tensor([0, 1, 2]), 0.7)
    usb.update(pos, emb, torch.tensor([0, 1, 2]), 0.7, "usb")
    torch.testing.assert_close(ours.emb.norm(dim=1), torch.ones(6))
    usb_formula = F.normalize(0.7 * before.t()[:, pos] + 0.3 * emb.t())    # USB's update_bank, its layout
    torch.testing.assert_close(usb.emb[pos], usb_formula.t())
    assert not torch.allclose(usb.emb[pos].norm(dim=1), torch.ones(3))
    assert torch.equal(ours.labels[pos], torch.tensor([0, 1, 2])) and ours.labels[0] == 0
    fresh = LabeledBank(6, 4)
    fresh.load_state_dict(ours.state_dict())
    assert torch.equal(fresh.emb, ours.emb)
    with pytest.raises(ValueError, match="labeled bank state"):
        LabeledBank(7, 4).load_state_dict(ours.state_dict())
