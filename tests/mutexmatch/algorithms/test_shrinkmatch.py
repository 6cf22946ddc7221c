"""ShrinkMatch equals its official CIFAR code (LiheYoung/ShrinkMatch), and its shrunk class space is the brute-force
one.

``golden/shrinkmatch.pt`` was made once by ``golden/make_shrinkmatch.py`` (its docstring: the official ``train`` and
model, imported from a checkout, on a tiny encoder with fixed weights and views; the commit and the command are in
the file): 12 steps in 3 epochs of 4, once without and once with ``--DA``. Here ours replays them on the same
weights and views, step by step (after each step both sides take the official step's SGD update and BatchNorm
statistics, so every step is compared on the official weights): the losses the official meters logged (L_x, L_u,
L_shrink / muB, its re-weighted value in the total), the soft pseudo-labels (after DA), the mask, the removed-class
index of every uncertain sample, every gradient (encoder, classifier, auxiliary head) and the BatchNorm statistics,
each within 1e-6. The confident-ratio EMA restarts at steps 4 and 8 (its weight in the total is checked each step).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mutexmatch.algorithms import TrainContext, build_algorithm
from mutexmatch.algorithms.shrinkmatch import ShrinkMatch, shrunk_space
from mutexmatch.training.extended_step import features_forward, step_inputs

GOLDEN = torch.load(Path(__file__).with_name("golden") / "shrinkmatch.pt", weights_only=True)
CFG = GOLDEN["config"]
CLOSE = {"atol": 1e-6, "rtol": 1e-6}


def official_name(ours: str) -> str:
    for mine, theirs in (("body.", "net.body."), ("tpc.", "fc."), ("heads.aux.", "head_aux.")):
        if ours.startswith(mine):
            return theirs + ours[len(mine):]
    raise AssertionError(ours)


def load_official(model: nn.Module, state: dict) -> None:
    model.load_state_dict({n: state[official_name(n)] for n in model.state_dict()})


@pytest.mark.parametrize("form", ["plain", "da"])
def test_shrinkmatch_equals_the_official_code_step_by_step(form, official_step, one_thread, golden_net):
    run, views, tau, lr = GOLDEN[form], GOLDEN["views"], CFG["tau"], CFG["lr"]
    b, u = CFG["batch"], CFG["batch"] * CFG["mu"]
    torch.manual_seed(0)
    params = ShrinkMatch.Params.parse({}, "shrinkmatch", CFG["num_classes"])
    model = golden_net(CFG, heads=nn.ModuleDict(ShrinkMatch.heads(params, CFG["width"], CFG["num_classes"])))
    load_official(model, run["initial_state"])
    ctx = TrainContext.synthetic(CFG["num_classes"], 64)
    alg = build_algorithm("shrinkmatch", {"tau": tau, "dist_align": form == "da", "epoch_steps": CFG["epoch"]}, ctx)
    meters = run["meters"]
    resets = 0
    for t in range(CFG["steps"]):
        at = f"{form}, step {t}"
        x = torch.cat([views["x_lb"][t], views["x_w"][t], views["x_s"][t]])
        inp = step_inputs(alg.step, x, num_lb=b, num_ulb=u, features=features_forward(model, model), teacher=None,
                          targets_lb=views["y_lb"][t], ulb_idx=torch.arange(u), step=t)
        out = alg.compute(model, inp)
        out.loss.backward()
        targets = run["pseudo_label"][t]
        torch.testing.assert_close(out.soft_target, targets, **CLOSE, msg=lambda m: f"{at}: pseudo-labels\n{m}")
        assert torch.equal(out.mask, (targets.max(dim=1).values >= tau).float()), f"{at}: mask"
        uncertain = out.mask == 0
        assert alg.last_first_kept[uncertain].tolist() == run["removed"][t], f"{at}: removed-class indices"
        for ours, key in (("sup", "Loss x"), ("p", "Loss u"), ("shrink", "Loss shrink")):
            torch.testing.assert_close(out.terms[ours].item(), meters[f"meter/{key}"][t], **CLOSE,
                                       msg=lambda m: f"{at}: {ours} vs the official {key}\n{m}")
        total = meters["meter/Loss x"][t] + meters["meter/Loss u"][t] + meters["meter/Loss shrink re-weighted"][t]
        torch.testing.assert_close(out.loss.item(), total, **CLOSE, msg=lambda m: f"{at}: loss\n{m}")
        resets += t % CFG["epoch"] == 0 and torch.equal(alg.certain_ratio, out.mask.mean())
        official_step(model, run, t, official_name, lr, at)
    assert resets == CFG["steps"] // CFG["epoch"]
    for name, p in model.state_dict().items():
        torch.testing.assert_close(p, run["final_state"][official_name(name)], **CLOSE)


def brute_force_first_kept(row: list[float], tau: float) -> int:
    """The official loop, on one sorted row: the first c in 2 .. C-1 whose share reaches tau, else C - 1."""
    for c in range(2, len(row)):
        if row[0] / (row[0] + sum(row[c:])) >= tau or c == len(row) - 1:
            return c
    raise AssertionError("unreachable for C >= 3")


@pytest.mark.parametrize("num_classes", [3, 4, 10, 17])
def test_shrunk_class_space_is_the_brute_force_one(num_classes):
    g = torch.Generator().manual_seed(num_classes)
    for tau in (0.5, 0.7, 0.95):
        logits = 4 * torch.randn(200, num_classes, generator=g, dtype=torch.float64)
        probs = logits.softmax(dim=1).sort(dim=1, descending=True).values
        first, reached = shrunk_space(probs, tau)
        for row, c, hit in zip(probs.tolist(), first.tolist(), reached.tolist()):
            assert c == brute_force_first_kept(row, tau), (num_classes, tau, row)
            assert hit == (row[0] / (row[0] + sum(row[c:])) >= tau)
            # minimal: removing fewer top ranks leaves the top class's share below tau
            assert all(row[0] / (row[0] + sum(row[k:])) < tau for k in range(2, c))


def test_two_classes_leave_no_space_to_shrink():
    with pytest.raises(ValueError, match="at least 3 classes"):
        build_algorithm("shrinkmatch", {}, TrainContext.synthetic(2, 8))
