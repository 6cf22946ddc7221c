"""AdaMatch (mutexmatch/algorithms/adamatch.py): the relative threshold reads the labeled batch, the pseudo-labels
and the threshold read the aligned weak predictions, the alignment's EMAs are its checkpointed state. Equality with
USB step for step: usb/test_adamatch_lockstep.py."""
from __future__ import annotations

import torch
from torch import nn

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm
from mutexmatch.selection import relative_confidence_mask


class Heads(nn.Module):
    """The features are the logits (a linear TPC that is the identity)."""

    def tpc(self, feats):
        return feats


def _inputs(lb, w, s, step=0):
    feats = torch.cat([lb, w, s]).requires_grad_()
    return StepInputs(feats=feats, num_lb=len(lb), num_ulb=len(w), targets_lb=lb.argmax(1), step=step,
                      ulb_idx=torch.arange(len(w)))


def test_threshold_is_relative_to_the_labeled_confidence_on_aligned_predictions() -> None:
    g = torch.Generator().manual_seed(0)
    lb, w = 3 * torch.randn(4, 5, generator=g), 3 * torch.randn(16, 5, generator=g)
    alg = build_algorithm("adamatch", {"tau": 0.9}, TrainContext.synthetic(5, 16))
    out = alg.compute(Heads(), _inputs(lb, w, torch.randn(16, 5, generator=g)))
    p_lb, p_w = torch.softmax(lb, 1), torch.softmax(w, 1)
    # first step: p_model = this batch's mean, p_target = 0.999 uniform + 0.001 labeled mean
    target = 0.999 * torch.full((5,), 0.2) + 0.001 * p_lb.mean(0)
    aligned = p_w * target / p_w.mean(0)
    aligned = aligned / aligned.sum(1, keepdim=True)
    torch.testing.assert_close(out.mask, relative_confidence_mask(p_lb, aligned, 0.9))
    assert torch.equal(out.pseudo_label, aligned.argmax(1))
    assert 0 < out.mask.mean() < 1


def test_alignment_state_round_trips() -> None:
    g = torch.Generator().manual_seed(1)
    a = build_algorithm("adamatch", {}, TrainContext.synthetic(5, 16))
    for step in range(3):
        a.compute(Heads(), _inputs(torch.randn(4, 5, generator=g), torch.randn(16, 5, generator=g),
                                   torch.randn(16, 5, generator=g), step))
    b = build_algorithm("adamatch", {}, TrainContext.synthetic(5, 16))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.dist_align.running_mean, b.dist_align.running_mean)
    assert torch.equal(a.dist_align.target(), b.dist_align.target())
    assert not torch.allclose(a.dist_align.target(), torch.full((5,), 0.2))
