"""RDA equals its official code (NJUyued/RDA4RobustSSL), and ``data.imbalance.rule: ceil`` is its split rule for
DARP's protocol.

``golden/rda.pt`` was made once by ``golden/make_rda.py`` (its docstring: the official ``RDA.train`` and
``consistency_loss_rda``, imported from a checkout, on a tiny feature extractor with fixed weights and views; the
commit and the command are in the file): 132 steps, so its distribution queues of 128 batches wrap. Here ours
replays them on the same weights and views, step by step (after each step ours takes the official step's SGD update
and BatchNorm statistics, so every step is compared on the official weights), with the complementary labels the
official step drew (numpy's draw; ours draws with torch): its four losses and the total, the hard pseudo-labels of
L_cd, the soft targets of L_ca, every gradient (extractor, DC, CC) and the BatchNorm statistics, each within 1e-6.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from mutexmatch.algorithms import TrainContext, build_algorithm
from mutexmatch.data.longtail import imbalance_counts
from mutexmatch.training.extended_step import features_forward, step_inputs

GOLDEN = torch.load(Path(__file__).with_name("golden") / "rda.pt", weights_only=True)
CFG, RUN = GOLDEN["config"], GOLDEN["train"]
CLOSE = {"atol": 1e-6, "rtol": 1e-6}
OFFICIAL = (("body.", "feature_extractor.body."), ("tpc.", "feature_extractor.fc."),
            ("tnc.", "classifier_reverse.fc."))


def official_name(ours: str) -> str:
    for mine, theirs in OFFICIAL:
        if ours.startswith(mine):
            return theirs + ours[len(mine):]
    raise AssertionError(ours)


def test_rda_equals_the_official_code_step_by_step(one_thread, official_step, golden_net):
    views, losses, lr = GOLDEN["views"], RUN["losses"], CFG["lr"]
    b, u = CFG["batch"], CFG["batch"] * CFG["mu"]
    model = golden_net(CFG, tnc=nn.Linear(CFG["width"], CFG["num_classes"]))   # the CC, by our name
    model.load_state_dict({n: RUN["initial_state"][official_name(n)] for n in model.state_dict()})
    alg = build_algorithm("rda", {"lambda_u": CFG["lambda_u"]}, TrainContext.synthetic(CFG["num_classes"], 64))
    for t in range(CFG["steps"]):
        at = f"step {t}"
        alg.complementary_labels = lambda targets, t=t: RUN["comp_label"][t]   # the official numpy draw
        x = torch.cat([views["x_lb"][t], views["x_w"][t], views["x_s"][t]])
        inp = step_inputs(alg.step, x, num_lb=b, num_ulb=u, features=features_forward(model, model), teacher=None,
                          targets_lb=views["y_lb"][t], ulb_idx=torch.arange(u), step=t)
        out = alg.compute(model, inp)
        out.loss.backward()
        assert torch.equal(out.pseudo_label, RUN["pseudo_label"][t]), f"{at}: pseudo-labels of L_cd"
        torch.testing.assert_close(out.soft_target, RUN["ca_target"][t], **CLOSE,
                                   msg=lambda m: f"{at}: L_ca's aligned complementary targets\n{m}")
        assert torch.equal(out.mask, torch.ones(u)), f"{at}: RDA uses every unlabeled sample"
        assert torch.equal(out.comp_label, RUN["ca_target"][t].argmax(dim=1)), f"{at}: L_ca's top class"
        for ours, theirs in (("sup", "sup_loss"), ("rev", "reverse_loss"), ("cd", "unsup_loss_cd"),
                             ("ca", "unsup_loss_ca")):
            torch.testing.assert_close(out.terms[ours].item(), losses[f"train/{theirs}"][t].item(), **CLOSE,
                                       msg=lambda m: f"{at}: {ours} vs the official {theirs}\n{m}")
        torch.testing.assert_close(out.loss.item(), losses["train/total_loss"][t].item(), **CLOSE,
                                   msg=lambda m: f"{at}: total loss\n{m}")
        official_step(model, RUN, t, official_name, lr, at)
    assert alg.queues["dc"].count == CFG["steps"] > len(alg.queues["dc"].rows), "the queues wrapped"
    for name, p in model.state_dict().items():
        torch.testing.assert_close(p, RUN["final_state"][official_name(name)], **CLOSE)


def test_complementary_labels_are_uniform_over_the_other_classes():
    num_classes, rows = 5, 40_000
    alg = build_algorithm("rda", {}, TrainContext.synthetic(num_classes, 8))
    targets = torch.arange(rows) % num_classes
    torch.manual_seed(0)
    comp = alg.complementary_labels(targets)
    assert not (comp == targets).any()
    pairs = torch.bincount(targets * num_classes + comp, minlength=num_classes ** 2).view(num_classes, num_classes)
    expected = rows / num_classes / (num_classes - 1)   # each (y, ybar != y) pair
    off = pairs[~torch.eye(num_classes, dtype=torch.bool)].float()
    assert (off - expected).abs().max() < 5 * math.sqrt(expected), pairs   # 5 sigma


DARP = [s for s in GOLDEN["splits"] if s["mismatch"] in ("darp", "darp_reversed")]
HEADS = {10: (1500, 3000), 100: (150, 300)}   # DARP's protocol in RDA's code: N_1 and M_1 of CIFAR-10 / CIFAR-100


@pytest.mark.parametrize("rule", ["ceil", "int"])
def test_the_ceil_rule_is_rdas_split_of_darps_protocol(rule):
    """``rule: ceil`` gives the counts of RDA's ``split_ssl_data`` for ``--mismatch darp`` (gamma_l = n0, gamma_u =
    gamma) and ``darp_reversed`` (our negative unlabeled ratio), on CIFAR-10's and CIFAR-100's label vectors; USB's
    ``int`` does not (e.g. 899 instead of 900 images of class 1 at gamma_l = 100)."""
    differs = []
    for s in DARP:
        num_classes = len(s["labeled"])
        n1, m1 = HEADS[num_classes]
        ratio = s["gamma"] if s["mismatch"] == "darp" else -s["gamma"]
        ours = (imbalance_counts(n1, s["n0"], num_classes, rule), imbalance_counts(m1, ratio, num_classes, rule))
        if ours != (s["labeled"], s["unlabeled"]):
            differs.append((s["dataset"], s["mismatch"], s["n0"], s["gamma"]))
    assert len(DARP) == 134
    if rule == "ceil":
        assert differs == []
    else:
        assert len(differs) > 100, differs


def test_rdas_own_protocol_is_the_ceil_rule_reversed_capped_by_the_class():
    """``--mismatch rda`` with gamma: the unlabeled counts are ceil's reversed long tail from 5,000 (CIFAR-10) or
    500 (CIFAR-100), taking all of a class's images left after the labeled draw where the tail asks for more; its
    labeled counts come from a search over gamma_l (``get_mismatched_imbalance_samples``), not from this rule."""
    cases = [s for s in GOLDEN["splits"] if s["mismatch"] == "rda" and s["gamma"]]
    assert len(cases) == 4
    for s in cases:
        num_classes = len(s["labeled"])
        per_class = 50_000 // num_classes
        tail = imbalance_counts(per_class, -s["gamma"], num_classes, "ceil")
        assert s["unlabeled"] == [min(n, per_class - lb) for n, lb in zip(tail, s["labeled"])], s
