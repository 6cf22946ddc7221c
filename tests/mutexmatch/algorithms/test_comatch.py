"""CoMatch's pieces against the paper's equations worked element by element (the step-for-step equality with USB is
tests/mutexmatch/algorithms/usb/test_comatch_lockstep.py)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm
from mutexmatch.algorithms.comatch import (CoMatch, MemoryBank, ProjectionHead, graph_contrastive_loss, l2_normalize,
                                           memory_smoothed_probs, pseudo_label_graph)


def _unit(rows: int, dim: int, seed: int) -> torch.Tensor:
    return l2_normalize(torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed)))


def _probs(rows: int, classes: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return torch.softmax(scale * torch.randn(rows, classes, generator=torch.Generator().manual_seed(seed)), 1)


def test_memory_smoothing_is_eq5_element_by_element():
    probs, z, bank_z, bank_p = _probs(3, 4, 0), _unit(3, 5, 1), _unit(6, 5, 2), _probs(6, 4, 3)
    got = memory_smoothed_probs(probs, z, bank_z, bank_p, alpha=0.9, temperature=0.2)
    for b in range(3):
        a = [math.exp(float(z[b] @ bank_z[k]) / 0.2) for k in range(6)]
        smoothed = [sum(a[k] / sum(a) * float(bank_p[k, c]) for k in range(6)) for c in range(4)]
        expected = [0.9 * float(probs[b, c]) + 0.1 * smoothed[c] for c in range(4)]
        assert got[b].tolist() == pytest.approx(expected, rel=1e-5)
    assert torch.allclose(got.sum(1), torch.ones(3))
    assert torch.equal(memory_smoothed_probs(probs, z, bank_z, bank_p, alpha=1.0, temperature=0.2), probs)


def test_pseudo_label_graph_has_self_loops_drops_weak_edges_and_normalises_rows():
    q = torch.tensor([[0.9, 0.1], [0.85, 0.15], [0.1, 0.9], [0.5, 0.5]])
    w = pseudo_label_graph(q, threshold=0.7)
    raw = q @ q.t()
    for b in range(4):
        kept = [1.0 if c == b else (float(raw[b, c]) if raw[b, c] >= 0.7 else 0.0) for c in range(4)]
        assert w[b].tolist() == pytest.approx([k / sum(kept) for k in kept])
    assert w[3].tolist() == pytest.approx([0.0, 0.0, 0.0, 1.0])      # 0.5 . q < 0.7 everywhere: itself only
    assert w[0, 1] > 0 and w[0, 2] == 0


def test_graph_contrastive_loss_is_eq10_and_trains_the_embeddings_only():
    z0, z1 = _unit(4, 6, 5).requires_grad_(), _unit(4, 6, 6).requires_grad_()
    graph = pseudo_label_graph(_probs(4, 3, 7), threshold=0.3)
    loss = graph_contrastive_loss(z0, z1, graph, temperature=0.5)
    expected, a, b_ = 0.0, z0.detach(), z1.detach()
    for b in range(4):
        e = [math.exp(float(a[b] @ b_[c]) / 0.5) for c in range(4)]
        expected -= sum(float(graph[b, c]) * math.log(e[c] / sum(e) + 1e-7) for c in range(4)) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert z0.grad.abs().sum() > 0 and z1.grad.abs().sum() > 0 and not graph.requires_grad
    # aligned views of a graph of self-loops only: the loss is lower than for shuffled views
    eye, z = torch.eye(4), _unit(4, 6, 8)
    assert graph_contrastive_loss(z, z, eye, 0.1) < graph_contrastive_loss(z, z.flip(0), eye, 0.1)


def test_memory_bank_is_a_ring_of_queue_batch_steps_and_round_trips():
    bank = MemoryBank(queue_batch=2, dim=3, num_classes=2)
    assert bank.size == 0
    pushes = [(torch.full((3, 3), float(i)), torch.full((3, 2), float(i))) for i in range(3)]
    bank.push(*pushes[0])
    assert bank.size == 6 and bank.ptr == 3 and bank.emb[:3].eq(0).all() and bank.emb[3:].eq(0).all()
    bank.push(*pushes[1])
    bank.push(*pushes[2])                        # wraps: overwrites the first step's rows
    assert bank.ptr == 3 and bank.emb[:3].eq(2).all() and bank.emb[3:].eq(1).all()
    fresh = MemoryBank(queue_batch=2, dim=3, num_classes=2)
    fresh.load_state_dict(bank.state_dict())
    assert torch.equal(fresh.emb, bank.emb) and torch.equal(fresh.probs, bank.probs) and fresh.ptr == bank.ptr
    with pytest.raises(ValueError, match=r"memory bank state: shapes .* proj_dim"):
        MemoryBank(queue_batch=2, dim=4, num_classes=2).load_state_dict(bank.state_dict())
    with pytest.raises(ValueError, match="7 rows pushed at once, more than its 6"):
        bank.push(torch.zeros(7, 3), torch.zeros(7, 2))


def test_projection_head_gives_unit_embeddings_with_either_activation():
    torch.manual_seed(0)
    x = torch.randn(5, 8)
    for act, module in (("leaky_relu", torch.nn.LeakyReLU), ("relu", torch.nn.ReLU)):
        head = ProjectionHead(8, 4, act)
        assert isinstance(head.act, module)
        assert torch.allclose(head(x).norm(dim=1), torch.ones(5))
    assert ProjectionHead(8, 4).act.negative_slope == 0.1
    default = CoMatch.heads(CoMatch.Params(), 8, 4)["proj"]      # the released code's head, d = 64
    assert isinstance(default.act, torch.nn.LeakyReLU) and default.fc2.out_features == 64
    with pytest.raises(ValueError, match="activation='gelu': must be one of leaky_relu, relu"):
        ProjectionHead(8, 4, "gelu")


# ---------------------------------------------------------------------------------------------------------------------
# The algorithm's step.
# ---------------------------------------------------------------------------------------------------------------------
B, U, D, C = 3, 5, 6, 4


class HeadNet(nn.Module):
    """A TPC and CoMatch's projection head on given features."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tpc = nn.Linear(D, C)
        self.heads = nn.ModuleDict({"proj": ProjectionHead(D, 4)})


def _inputs(step: int, seed: int = 1) -> StepInputs:
    g = torch.Generator().manual_seed(seed)
    feats = (3 * torch.randn(B + 3 * U, D, generator=g)).requires_grad_()
    return StepInputs(feats=feats, num_lb=B, num_ulb=U, targets_lb=torch.randint(C, (B,), generator=g),
                      ulb_idx=torch.arange(U), step=step)


def _comatch(**params) -> CoMatch:
    return build_algorithm("comatch", {"proj_dim": 4, "tau": 0.5, **params},
                           TrainContext.synthetic(C, U, steps_per_epoch=4))


@pytest.mark.parametrize("rule,epoch,first", [("queue_full", 1024, 3), ("usb", 4, 4), ("usb", 0, 4)],
                         ids=["queue_full", "usb-epoch-4", "usb-pool-pass"])
def test_memory_smoothing_starts_once_the_bank_is_full_or_with_usb_in_the_second_epoch(rule, epoch, first):
    """``epoch_steps`` 0: the context's pass over the pool (4 steps here), the rule before issue 32."""
    alg, net = _comatch(queue_batch=2, smoothing_start=rule, epoch_steps=epoch), HeadNet()
    assert [s for s in range(8) if alg.smoothing_on(s)] == list(range(first, 8))
    for step in range(first + 1):
        out = alg.compute(net, _inputs(step, seed=step))
        start = (alg.bank.ptr - B - U) % alg.bank.size
        unsmoothed = alg.bank.probs[start:start + U]   # this step's aligned p^w, as the bank got it
        assert torch.allclose(out.soft_target, unsmoothed) == (step < first), step


def test_usbs_start_waits_usbs_epoch_of_1024_steps_by_default():
    """USB's classic-CV epoch (num_train_iter // epoch = 1024), not the trainer's pass over the pool (issue 32)."""
    alg = _comatch(queue_batch=2, smoothing_start="usb")
    assert alg.params.epoch_steps == 1024 and alg.ctx.steps_per_epoch == 4
    assert (alg.smoothing_on(1023), alg.smoothing_on(1024)) == (False, True)


def test_the_bank_gets_the_aligned_unsmoothed_weak_probabilities_and_one_hot_labels():
    alg, net = _comatch(queue_batch=3), HeadNet()
    inp = _inputs(0)
    out = alg.compute(net, inp)
    w = inp.feats[B:B + U].detach()
    assert alg.bank.size == 3 * (B + U) and alg.bank.ptr == B + U
    assert torch.allclose(alg.bank.probs[:U], out.soft_target)   # step 0: not smoothed yet
    assert torch.equal(alg.bank.probs[U:U + B], torch.eye(C)[inp.targets_lb])
    assert torch.allclose(alg.bank.emb[:U], net.heads["proj"](w))
    assert alg.bank.emb[B + U:].eq(0).all()


def test_loss_is_the_weighted_sum_and_the_weak_view_gets_no_gradient():
    alg, net = _comatch(lambda_p=0.7, lambda_c=2.0), HeadNet()
    inp = _inputs(0)
    out = alg.compute(net, inp)
    t = out.terms
    assert tuple(t) == ("sup", "p", "c")
    assert torch.allclose(out.loss, t["sup"] + 0.7 * t["p"] + 2.0 * t["c"])
    out.loss.backward()
    grad = inp.feats.grad
    assert grad[B:B + U].abs().sum() == 0                      # weak view: targets only (stop-gradient)
    assert grad[:B].abs().sum() > 0 and grad[B + U:].abs().sum(1).gt(0).all()   # labeled, both strong views


def test_state_round_trips_and_refuses_another_shape():
    alg, net = _comatch(queue_batch=2), HeadNet()
    for step in range(3):
        alg.compute(net, _inputs(step, seed=step))
    fresh = _comatch(queue_batch=2)
    fresh.load_state_dict(alg.state_dict())
    assert torch.equal(fresh.bank.emb, alg.bank.emb) and fresh.bank.ptr == alg.bank.ptr
    assert torch.equal(fresh.dist_align.running_mean, alg.dist_align.running_mean)
    with pytest.raises(ValueError, match="proj_dim"):
        build_algorithm("comatch", {"proj_dim": 5}, TrainContext.synthetic(C, U)).load_state_dict(alg.state_dict())


def test_default_alignment_is_the_released_codes_prob_list_over_32_batches():
    """salesforce/CoMatch: prob_list of the last 32 batch means (the current one included), p / mean, renormalised;
    our default (da_window 32, ratio filled, target uniform) gives the same before and after the list is full."""
    alg, prob_list = _comatch(), []
    g = torch.Generator().manual_seed(3)
    for _ in range(40):
        probs = torch.softmax(3 * torch.randn(U, C, generator=g), 1)
        prob_list.append(probs.mean(0))
        if len(prob_list) > 32:
            prob_list.pop(0)
        expected = probs / torch.stack(prob_list).mean(0)
        expected = expected / expected.sum(1, keepdim=True)
        torch.testing.assert_close(alg.dist_align(probs), expected)
