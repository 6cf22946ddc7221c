"""mutexmatch.losses: values against hand formulas (plain-Python math), gradient routing, weights, the confidence mask
(the threshold seam) against the former float-tau computation, input checks."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.losses import (complementary_label, confidence_mask, fixmatch_loss, mutexmatch_loss,
                               negative_consistency, top_k_indicator)

torch.set_num_threads(1)

# A hand example: B = 2 labeled rows, muB = 3 unlabeled rows, C = 4 classes, tau = 0.9.
LOGITS_LB = [[1.0, 0.0, -1.0, 0.5], [0.2, 0.3, 0.1, -0.4]]
TARGETS_LB = [0, 2]
# Row 0: max p^w = e^5 / (e^5 + 1 + e^-1 + e^.5) = 0.980 >= 0.9, argmax 0, argmin 2.
# Row 1: max p^w < 0.9, argmin 3.  Row 2: max p^w < 0.9, argmin 1.
LOGITS_W = [[5.0, 0.0, -1.0, 0.5], [0.4, 0.9, 0.1, -0.2], [0.0, -0.5, 0.3, 0.6]]
LOGITS_S = [[2.0, 0.5, -0.5, 0.0], [0.1, 0.2, 0.3, 0.4], [-0.3, 0.8, 0.0, 0.2]]
# TNC weak: top-2 of r^w is {0, 3} in row 0, {0, 2} in row 1, {1, 3} in row 2.
TNC_W = [[0.3, 0.1, -0.2, 0.4], [2.0, -1.0, 1.0, 0.0], [-0.5, 1.5, 0.0, 1.0]]
TNC_S = [[0.5, -0.5, 0.2, 0.1], [1.0, 2.5, -0.5, 0.3], [0.7, 0.2, -1.2, 1.8]]
HIGH, LOW = [0], [1, 2]
ARGMAX_W, ARGMIN_W = {0: 0}, {0: 2, 1: 3, 2: 1}
TOP2 = {0: (0, 3), 1: (0, 2), 2: (1, 3)}
TAU, C, MU_B = 0.9, 4, 3


def softmax(row: list[float]) -> list[float]:
    z = sum(math.exp(x) for x in row)
    return [math.exp(x) / z for x in row]


def ce(row: list[float], label: int) -> float:
    return -math.log(softmax(row)[label])


def t(rows: list[list[float]], grad: bool = False) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64, requires_grad=grad)


def inputs(**over: object) -> dict[str, object]:
    kw = dict(logits_lb=t(LOGITS_LB), targets_lb=torch.tensor(TARGETS_LB), logits_w=t(LOGITS_W),
              logits_s=t(LOGITS_S), tnc_logits_w=t(TNC_W), tnc_logits_s=t(TNC_S),
              mask=confidence_mask(torch.softmax(t(LOGITS_W), 1), TAU), k=C)
    kw.update(over)
    return kw


def hand_sup() -> float:
    return sum(ce(LOGITS_LB[i], TARGETS_LB[i]) for i in range(2)) / 2


def hand_p() -> float:
    return sum(ce(LOGITS_S[i], ARGMAX_W[i]) for i in HIGH) / MU_B


def hand_sep_paper() -> float:
    return sum(ce(TNC_W[i], ARGMIN_W[i]) for i in range(MU_B)) / MU_B


def hand_n_full() -> float:
    """H(r^w, r^s) on the low rows, / muB (paper k = C; also the official form at k = C)."""
    total = 0.0
    for i in LOW:
        r_w, r_s = softmax(TNC_W[i]), softmax(TNC_S[i])
        total += -sum(r_w[c] * math.log(r_s[c]) for c in range(C))
    return total / MU_B


def test_hand_example_is_what_the_comments_say() -> None:
    conf = [max(softmax(r)) for r in LOGITS_W]
    assert conf[0] >= TAU and conf[1] < TAU and conf[2] < TAU
    for i, row in enumerate(TNC_W):
        assert set(TOP2[i]) == set(sorted(range(C), key=lambda c: -row[c])[:2])


@pytest.mark.parametrize("form", ["paper", "official"])
def test_k_equals_c_against_hand_formulas(form: str) -> None:
    extra = {}
    if form == "official":  # official L_sep reads the sep_* rows; give it the weak rows to compare with the paper
        extra = dict(sep_logits=t(LOGITS_W), sep_tnc_logits=t(TNC_W))
    out = mutexmatch_loss(**inputs(form=form, **extra))
    assert out["sup"].item() == pytest.approx(hand_sup(), rel=1e-12)
    assert out["sep"].item() == pytest.approx(hand_sep_paper(), rel=1e-12)
    assert out["p"].item() == pytest.approx(hand_p(), rel=1e-12)
    assert out["n"].item() == pytest.approx(hand_n_full(), rel=1e-12)
    assert out["loss"].item() == pytest.approx(hand_sup() + hand_sep_paper() + hand_p() + hand_n_full(), rel=1e-12)
    assert out["mask"].tolist() == [1.0, 0.0, 0.0]
    assert out["mask_ratio"].item() == pytest.approx(1 / 3)
    assert out["comp_label"].tolist() == [ARGMIN_W[i] for i in range(MU_B)]
    assert out["pseudo_label"][0].item() == 0
    assert out["tnc_comp_label"].tolist() == [3, 0, 1]
    assert out["conf"][0].item() == pytest.approx(max(softmax(LOGITS_W[0])), rel=1e-12)


def test_paper_k_less_than_c_uses_top_k_and_one_over_k() -> None:
    out = mutexmatch_loss(**inputs(k=2))
    expected = 0.0
    for i in LOW:
        r_w, r_s = softmax(TNC_W[i]), softmax(TNC_S[i])  # full softmax for r^s
        expected += -(1 / 2) * sum(r_w[c] * math.log(r_s[c]) for c in TOP2[i])
    assert out["n"].item() == pytest.approx(expected / MU_B, rel=1e-12)
    # The other terms do not depend on k.
    assert out["sep"].item() == pytest.approx(hand_sep_paper(), rel=1e-12)


def test_paper_k_equals_c_has_no_one_over_k() -> None:
    """At k = C the paper replaces the bracket by H(r^w, r^s): no 1/C."""
    n_c = mutexmatch_loss(**inputs(k=C))["n"].item()
    assert n_c == pytest.approx(hand_n_full(), rel=1e-12)
    assert n_c != pytest.approx(hand_n_full() / C, rel=1e-3)


def test_official_k_less_than_c_zeroes_logits_and_has_no_one_over_k() -> None:
    sep_logits = LOGITS_LB + LOGITS_W + LOGITS_S                     # all rows [lb | w | s]
    sep_tnc = [[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.5, -1.0]] + TNC_W + TNC_S
    out = mutexmatch_loss(**inputs(k=2, form="official", sep_logits=t(sep_logits), sep_tnc_logits=t(sep_tnc)))
    expected_n = 0.0
    for i in LOW:
        r_w = softmax(TNC_W[i])
        z = [TNC_S[i][c] if c in TOP2[i] else 0.0 for c in range(C)]  # outside top-k: the constant 0
        log_r = [math.log(v) for v in softmax(z)]
        expected_n += -sum(r_w[c] * log_r[c] for c in TOP2[i])        # not renormalised, no 1/k
    assert out["n"].item() == pytest.approx(expected_n / MU_B, rel=1e-12)
    # L_sep over all 8 rows, complementary label = argmin of each row's TPC softmax.
    argmins = [min(range(C), key=lambda c: row[c]) for row in sep_logits]
    assert argmins == [2, 3] + [ARGMIN_W[i] for i in range(MU_B)] + [2, 0, 0]
    expected_sep = sum(ce(sep_tnc[i], argmins[i]) for i in range(8)) / 8
    assert out["sep"].item() == pytest.approx(expected_sep, rel=1e-12)
    assert out["p"].item() == pytest.approx(hand_p(), rel=1e-12)


def test_official_zeroing_is_out_of_place_and_blocks_gradient_of_dropped_logits() -> None:
    tnc_s = t(TNC_S, grad=True)
    before = tnc_s.detach().clone()
    out = mutexmatch_loss(**inputs(k=2, form="official", tnc_logits_s=tnc_s, sep_logits=t(LOGITS_W),
                                   sep_tnc_logits=t(TNC_W)))
    out["n"].backward()
    assert torch.equal(tnc_s.detach(), before)
    for i in LOW:
        for c in range(C):
            assert (tnc_s.grad[i, c] != 0) == (c in TOP2[i])
    assert torch.all(tnc_s.grad[HIGH] == 0)


def test_official_k_zero_means_c() -> None:
    kw = dict(form="official", sep_logits=t(LOGITS_W), sep_tnc_logits=t(TNC_W))
    assert mutexmatch_loss(**inputs(k=0, **kw))["n"].item() == pytest.approx(hand_n_full(), rel=1e-12)


def test_negative_consistency_hard_target() -> None:
    r_w = torch.softmax(t(TNC_W), 1)
    ell = negative_consistency(r_w, t(TNC_S), k=2, form="paper", hard=True)
    for i in range(MU_B):
        expected = -(1 / 2) * sum(math.log(softmax(TNC_S[i])[c]) for c in TOP2[i])
        assert ell[i].item() == pytest.approx(expected, rel=1e-12)


def test_helpers() -> None:
    probs = torch.softmax(t(LOGITS_W), 1)
    assert torch.equal(complementary_label(probs, 1), probs.argmin(1))
    assert complementary_label(probs, 2).tolist() == [1, 2, 0]
    assert complementary_label(probs, C).tolist() == probs.argmax(1).tolist()
    g = top_k_indicator(torch.softmax(t(TNC_W), 1), 2)
    assert [tuple(torch.nonzero(row).flatten().tolist()) for row in g] == [tuple(sorted(TOP2[i])) for i in range(3)]


def test_fixmatch_loss_matches_hand_and_mutexmatch_without_tnc_terms() -> None:
    out = fixmatch_loss(logits_lb=t(LOGITS_LB), targets_lb=torch.tensor(TARGETS_LB), logits_w=t(LOGITS_W),
                        logits_s=t(LOGITS_S), mask=inputs()["mask"], lambda_p=0.5)
    assert out["loss"].item() == pytest.approx(hand_sup() + 0.5 * hand_p(), rel=1e-12)
    mm = mutexmatch_loss(**inputs(lambda_p=0.5, lambda_sep=0.0, lambda_n=0.0))
    assert out["loss"].item() == mm["loss"].item()


def test_probs_w_override_drives_mask_and_labels() -> None:
    probs = torch.tensor([[0.05, 0.05, 0.05, 0.85], [0.02, 0.03, 0.9, 0.05], [0.1, 0.2, 0.3, 0.4]],
                         dtype=torch.float64)
    out = mutexmatch_loss(**inputs(probs_w=probs, mask=confidence_mask(probs, 0.9)))
    assert out["mask"].tolist() == [0.0, 1.0, 0.0]
    assert out["pseudo_label"].tolist()[1] == 2
    assert out["comp_label"].tolist() == [0, 0, 0]
    assert out["p"].item() == pytest.approx(ce(LOGITS_S[1], 2) / MU_B, rel=1e-12)


@pytest.mark.parametrize("term,lam", [("sep", "lambda_sep"), ("p", "lambda_p"), ("n", "lambda_n")])
@pytest.mark.parametrize("weight", [0.5, 2.0])
def test_lambda_scales_exactly_its_term(term: str, lam: str, weight: float) -> None:
    off = mutexmatch_loss(**inputs(**{lam: 0.0}))
    on = mutexmatch_loss(**inputs(**{lam: weight}))
    assert (on["loss"] - off["loss"]).item() == pytest.approx(weight * on[term].item(), rel=1e-12)
    for other in ("sup", "sep", "p", "n"):
        assert on[other].item() == off[other].item()


# ---------------------------------------------------------------------------------------------------------------------
# Gradient routing through a tiny model: Linear backbone, Linear TPC, Linear TNC.
# ---------------------------------------------------------------------------------------------------------------------
class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone, self.tpc, self.tnc = nn.Linear(5, 6), nn.Linear(6, C), nn.Linear(6, C)


def routed(form: str) -> tuple[Tiny, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Tiny()
    b, u = 3, 6
    feats = model.backbone(torch.randn(b + 2 * u, 5) * 3)
    logits = model.tpc(feats)
    lb, w, s = logits.split([b, u, u])
    conf = torch.softmax(w.detach(), 1).max(1).values.sort().values
    tau = float(conf[u // 2])                    # half the rows above tau, half below
    tnc_detached = model.tnc(feats.detach())
    tensors = dict(logits_lb=lb, targets_lb=torch.randint(C, (b,)), logits_w=w, logits_s=s,
                   tnc_logits_w=tnc_detached[b:b + u], tnc_logits_s=model.tnc(feats[b + u:]))
    if form == "official":
        tensors.update(sep_logits=logits, sep_tnc_logits=tnc_detached)
    return model, tensors, mutexmatch_loss(**tensors, mask=confidence_mask(torch.softmax(w.detach(), 1), tau), k=2,
                                           form=form)


def grads(model: Tiny, loss: torch.Tensor) -> dict[str, float]:
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    return {name: sum(0.0 if p.grad is None else p.grad.abs().sum().item() for p in getattr(model, name).parameters())
            for name in ("backbone", "tpc", "tnc")}


@pytest.mark.parametrize("form", ["paper", "official"])
def test_gradient_routing(form: str) -> None:
    model, tensors, out = routed(form)
    assert 0 < out["mask"].sum() < len(out["mask"])
    sep, p, n, sup = (grads(model, out[x]) for x in ("sep", "p", "n", "sup"))
    assert sep["tnc"] > 0 and sep["backbone"] == 0 and sep["tpc"] == 0        # L_sep: TNC only
    assert n["tnc"] > 0 and n["backbone"] > 0 and n["tpc"] == 0               # L_n: TNC and backbone
    assert p["tpc"] > 0 and p["backbone"] > 0 and p["tnc"] == 0               # L_p: TPC and backbone
    assert sup["tpc"] > 0 and sup["backbone"] > 0 and sup["tnc"] == 0
    # Pseudo-labels / masks come from the detached weak view, r^w from detached TNC logits.
    assert torch.autograd.grad(out["p"], tensors["logits_w"], retain_graph=True, allow_unused=True)[0] is None
    assert torch.autograd.grad(out["n"], tensors["tnc_logits_w"], retain_graph=True, allow_unused=True)[0] is None
    assert torch.autograd.grad(out["n"], tensors["logits_w"], retain_graph=True, allow_unused=True)[0] is None
    for key in ("mask", "pseudo_label", "comp_label", "conf", "tnc_comp_label", "mask_ratio"):
        assert not out[key].requires_grad, key


# ---------------------------------------------------------------------------------------------------------------------
# Validation.
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over,match", [
    (dict(form="fancy"), r"form='fancy': must be one of \('paper', 'official'\)"),
    (dict(form="official"), r"sep_logits and sep_tnc_logits: required by form='official'"),
    (dict(sep_logits=t(LOGITS_W), sep_tnc_logits=t(TNC_W)), r"only used by form='official'"),
    (dict(form="official", sep_logits=t(LOGITS_W), sep_tnc_logits=t(TNC_S[:2])), r"sep_tnc_logits: shape \(2, 4\)"),
    (dict(logits_s=t(LOGITS_S[:2])), r"logits_s: shape \(2, 4\)"),
    (dict(tnc_logits_s=t([r[:3] for r in TNC_S])), r"tnc_logits_s: shape \(3, 3\)"),
    (dict(targets_lb=torch.tensor([0.0, 2.0])), r"targets_lb: must be an int64 tensor of shape \(2,\)"),
    (dict(targets_lb=torch.tensor([0, 1, 2])), r"targets_lb"),
    (dict(logits_w=torch.zeros(3, 4, dtype=torch.long)), r"logits_w: must be a 2-D floating-point tensor"),
    (dict(mask=torch.tensor([True, False, False])), r"mask: must be a floating-point tensor of shape \(3,\)"),
    (dict(mask=t([[1.0, 0.0]])[0]), r"mask: must be a floating-point tensor of shape \(3,\).*\(2,\)"),
    (dict(mask=0.9), r"mask: .* got float"),
])
def test_bad_input_raises_naming_the_argument(over: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mutexmatch_loss(**inputs(**over))


def _float_tau_loss(tau: float, k: int, form: str, lambdas: tuple[float, float, float], **kw: torch.Tensor) -> dict:
    """The former computation with a float tau inside the loss (before the threshold seam), written out."""
    p_w = torch.softmax(kw["logits_w"], dim=1).detach()
    conf, pseudo_label = p_w.max(dim=1)
    high = (conf >= tau).to(p_w.dtype)
    r_w = torch.softmax(kw["tnc_logits_w"].detach(), dim=1)
    sup = F.cross_entropy(kw["logits_lb"], kw["targets_lb"])
    if form == "paper":
        sep = F.cross_entropy(kw["tnc_logits_w"], p_w.argmin(dim=1))
    else:
        sep = F.cross_entropy(kw["sep_tnc_logits"], torch.softmax(kw["sep_logits"].detach(), 1).argmin(1))
    p = (F.cross_entropy(kw["logits_s"], pseudo_label, reduction="none") * high).mean()
    n = ((1.0 - high) * negative_consistency(r_w, kw["tnc_logits_s"], k=k, form=form)).mean()
    lam_sep, lam_p, lam_n = lambdas
    return {"loss": sup + lam_sep * sep + lam_p * p + lam_n * n, "sup": sup, "sep": sep, "p": p, "n": n, "mask": high}


@pytest.mark.parametrize("form", ["paper", "official"])
@pytest.mark.parametrize("k", [2, C])
def test_fixed_threshold_mask_equals_the_former_float_tau_computation(form: str, k: int) -> None:
    """Bit for bit, values and gradients: the loss given confidence_mask(p^w, tau) is the loss that took tau."""
    results = []
    for seam in (True, False):
        model, tensors, _ = routed(form)
        tau = float(torch.softmax(tensors["logits_w"].detach(), 1).max(1).values.median())
        lambdas = (0.5, 2.0, 0.7)
        if seam:
            mask = confidence_mask(torch.softmax(tensors["logits_w"].detach(), 1), tau)
            out = mutexmatch_loss(**tensors, mask=mask, k=k, form=form, lambda_sep=lambdas[0],
                                  lambda_p=lambdas[1], lambda_n=lambdas[2])
        else:
            out = _float_tau_loss(tau, k, form, lambdas, **tensors)
        model.zero_grad(set_to_none=True)
        out["loss"].backward()
        results.append((out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (new, new_grads), (old, old_grads) = results
    assert 0 < old["mask"].sum() < len(old["mask"])
    for key in ("loss", "sup", "sep", "p", "n", "mask"):
        assert torch.equal(new[key], old[key]), key
    assert new_grads.keys() == old_grads.keys() and all(torch.equal(new_grads[n], old_grads[n]) for n in new_grads)
    assert torch.equal(confidence_mask(torch.softmax(t(LOGITS_W), 1), TAU), torch.tensor([1.0, 0.0, 0.0],
                                                                                           dtype=torch.float64))
