"""mutexmatch.algorithms: registry, every algorithm trains, each ablation changes only its term, DA, validation,
the threshold seam (tests/mutexmatch/conftest.py registers a FlexMatch-style algorithm that the registry-wide tests
run too)."""
from __future__ import annotations

import dataclasses
import io
import math
import pickle
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pydantic import create_model

from mutexmatch.algorithms import (ALGORITHMS, Algorithm, DistributionAlignment, StepInputs, StepOutput, TrainContext,
                                   build_algorithm, register_algorithm)
from mutexmatch.algorithms.tnc_schemes import random_complementary_label
from mutexmatch.training.extended_step import features_forward, step_inputs, teacher_forward
from mutexmatch.losses import confidence_mask, mutexmatch_loss
from mutexmatch.params import AlgorithmParams

torch.set_num_threads(1)
B, U, D_IN, D, C = 4, 8, 5, 6, 4


class FakeNet(nn.Module):
    """Stands in for MutexNet: a Linear "backbone" giving the features, Linear TPC and (optional) TNC heads."""

    def __init__(self, tnc: bool = True, seed: int = 0, heads: dict[str, nn.Module] | None = None) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = nn.Linear(D_IN, D)
        self.tpc = nn.Linear(D, C)
        self.tnc = nn.Linear(D, C) if tnc else None
        self.heads = nn.ModuleDict(heads or {})   # an algorithm's extra heads (Algorithm.heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)


def batch(model: FakeNet, algo: type[Algorithm] | Algorithm, seed: int = 1, scale: float = 4.0) -> StepInputs:
    """The step inputs of the algorithm's declared step (its views; features of their concatenation, or the views
    with the forward functions), made as the trainer makes them (mutexmatch.training.extended_step.step_inputs); the default
    step's inputs are [lb | weak | strong] rows of random "images"."""
    gen = torch.Generator().manual_seed(seed)
    u = U if algo.uses_unlabeled else 0
    x = torch.randn(sum(algo.step.rows(B, u)), D_IN, generator=gen) * scale
    targets = torch.randint(C, (B,), generator=gen)
    rot = torch.randint(4, (u,), generator=gen) if "rotated" in algo.step.views else None
    teacher = FakeNet(tnc=model.tnc is not None, seed=seed + 100) if algo.step.teacher else None   # the EMA model
    return step_inputs(algo.step, x, num_lb=B, num_ulb=u, features=features_forward(model, model),
                       teacher=teacher and teacher_forward(teacher), targets_lb=targets, ulb_idx=torch.arange(u), step=0,
                       rot_label=rot, lb_pos=torch.arange(B))   # TrainContext.synthetic(C): C = B labeled images


def tau_between(model: FakeNet, inp: StepInputs) -> float:
    """A threshold with about half the unlabeled rows above it and half below."""
    w = model.tpc(inp.feats[B:B + U]).detach()
    return float(torch.softmax(w, 1).max(1).values.sort().values[U // 2])


def run(name: str, params: dict | None = None, seed: int = 1) -> tuple[Algorithm, FakeNet, StepInputs, StepOutput]:
    cls = ALGORITHMS[name]
    model = FakeNet(tnc=cls.uses_tnc)
    inp = batch(model, cls, seed=seed)
    params = dict(params or {})
    if "tau" in cls.Params.model_fields and "tau" not in params:
        params["tau"] = tau_between(model, inp)
    algo = cls(params, TrainContext.synthetic(C, U))
    return algo, model, inp, algo.compute(model, inp)


def grad_sum(model: FakeNet, loss: torch.Tensor) -> dict[str, float]:
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    return {n: sum(0.0 if p.grad is None else p.grad.abs().sum().item() for p in m.parameters())
            for n, m in (("backbone", model.backbone), ("tpc", model.tpc), ("tnc", model.tnc)) if m is not None}


# ---------------------------------------------------------------------------------------------------------------------
# Registry-wide.
# ---------------------------------------------------------------------------------------------------------------------
def test_every_module_of_the_package_registers_and_every_name_is_its_class() -> None:
    """Importing the package registers every algorithm module in it (no list to maintain): each module other than
    the contract and the pieces registers at least one algorithm, under the name its class carries."""
    import pkgutil

    import mutexmatch.algorithms as package

    assert all(cls.name == name for name, cls in ALGORITHMS.items())
    modules = {cls.__module__ for cls in ALGORITHMS.values()}
    pieces = {"base", "alignment"}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in pieces and not info.name.startswith("_"):
            assert f"{package.__name__}.{info.name}" in modules, info.name
    assert not ALGORITHMS["supervised"].uses_unlabeled and not ALGORITHMS["supervised"].uses_tnc
    assert not ALGORITHMS["fixmatch"].uses_tnc and ALGORITHMS["mutexmatch"].uses_tnc


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_trains_and_round_trips_state(name: str) -> None:
    cls = ALGORITHMS[name]
    params = {"dist_align": True} if "dist_align" in cls.Params.model_fields else {}
    model = FakeNet(tnc=cls.uses_tnc, heads=cls.heads(cls.Params.parse(params, name, C), D, C))
    algo = build_algorithm(name, params, TrainContext.synthetic(C, U))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(3):
        out = algo.compute(model, batch(model, cls, seed=step))
        assert torch.isfinite(out.loss) and out.loss.dim() == 0
        assert tuple(out.terms) == cls.terms and set(algo.term_weights()) == set(cls.terms)   # its declared terms
        assert all(t.dim() == 0 for t in out.terms.values())
        opt.zero_grad()
        out.loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        opt.step()
    for field in dataclasses.fields(out):
        value = getattr(out, field.name)
        if field.name not in ("loss", "terms") and isinstance(value, torch.Tensor):
            assert not value.requires_grad, field.name
    buffer = io.BytesIO()
    torch.save(algo.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = build_algorithm(name, params, TrainContext.synthetic(C, U))
    fresh.load_state_dict(state)
    assert fresh.state_dict().keys() == algo.state_dict().keys()
    for key, value in algo.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(fresh.state_dict()[key], value), key
    assert pickle.loads(pickle.dumps(algo.params)) == algo.params
    if "dist_align" in cls.Params.model_fields:
        assert fresh.state_dict()["dist_align"]["count"] == 3
        assert torch.equal(fresh.state_dict()["dist_align"]["history"], algo.state_dict()["dist_align"]["history"])
        probs = torch.softmax(torch.randn(5, C), 1)
        assert torch.equal(fresh.dist_align(probs), algo.dist_align(probs))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_rejects_unknown_params(name: str) -> None:
    with pytest.raises(ValueError, match=r"algorithm\.bogus: not a parameter of algorithm"):
        build_algorithm(name, {"bogus": 1}, TrainContext.synthetic(C))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_switch_pinned_off_takes_the_settings_it_governs(name: str) -> None:
    """A parameter nothing reads is none: an algorithm that pins dist_align off (SoftMatch's and AdaMatch's own
    alignment, FreeMatch, Dash, Pseudo-Label) carries no da_* setting, and one with the switch keeps them all."""
    params = ALGORITHMS[name].Params
    for switch, governed in params.GOVERNED.items():
        if params.pinned.get(switch) is False:
            assert not set(governed) & set(params.model_fields), name
        elif switch in params.model_fields:
            assert set(governed) <= set(params.model_fields), name


def test_load_state_rejects_mismatch() -> None:
    with pytest.raises(ValueError, match="dist_align"):
        build_algorithm("fixmatch", {}, TrainContext.synthetic(C)).load_state_dict({"dist_align": {}})


def test_register_rejects_duplicates_and_undeclared_params() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.name='fixmatch': already registered"):
        register_algorithm("fixmatch")(type("X", (Algorithm,), {}))
    with pytest.raises(ValueError, match=r"Y\.Params: must be a mutexmatch\.params\.AlgorithmParams model"):
        register_algorithm("gamma_algo")(type("Y", (Algorithm,), {"Params": {"gamma": 1.0}}))
    assert "gamma_algo" not in ALGORITHMS
    with pytest.raises(ValueError, match=r"^Z\.terms=\(\): must be a non-empty tuple of the loss terms it computes"):
        register_algorithm("no_terms")(type("Z", (Algorithm,), {}))
    with pytest.raises(ValueError, match=r"^Z\.terms: 'Sup' is not a term name.*\nZ\.terms: 'mask_ratio' would be "
                                         r"logged as 'train/mask_ratio', a metric the trainer logs already\n"
                                         r"Z\.terms: 'p' given twice$"):
        register_algorithm("bad_terms")(type("Z", (Algorithm,), {"terms": ("Sup", "p", "mask_ratio", "p")}))
    assert not {"no_terms", "bad_terms"} & set(ALGORITHMS)
    with pytest.raises(ValueError, match=r"algorithm\.name='nope': must be one of"):
        build_algorithm("nope", {}, TrainContext.synthetic(C))


# ---------------------------------------------------------------------------------------------------------------------
# Methods.
# ---------------------------------------------------------------------------------------------------------------------
def test_supervised_needs_no_unlabeled_rows() -> None:
    algo, model, inp, out = run("supervised")
    assert inp.num_ulb == 0
    expected = F.cross_entropy(model.tpc(inp.feats), inp.targets_lb)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.terms == {"sup": out.loss} and out.mask is None and out.pseudo_label is None


def test_fixmatch_equals_mutexmatch_without_tnc_terms() -> None:
    model = FakeNet(tnc=True)
    inp = batch(model, ALGORITHMS["mutexmatch"])
    tau = tau_between(model, inp)
    fm = ALGORITHMS["fixmatch"]({"tau": tau}, TrainContext.synthetic(C)).compute(model, inp)
    mm = ALGORITHMS["mutexmatch"]({"tau": tau, "lambda_sep": 0.0, "lambda_n": 0.0}, TrainContext.synthetic(C)).compute(model, inp)
    assert 0 < fm.mask.sum() < U
    assert fm.loss.item() == mm.loss.item()
    assert torch.equal(fm.mask, mm.mask) and torch.equal(fm.pseudo_label, mm.pseudo_label)


@pytest.mark.parametrize("form", ["paper", "official"])
def test_mutexmatch_is_the_loss_function_on_the_model_outputs(form: str) -> None:
    algo, model, inp, out = run("mutexmatch", {"form": form, "k": 2})
    feats = inp.feats
    logits = model.tpc(feats)
    lb, w, s = logits.split([B, U, U])
    tnc_det = model.tnc(feats.detach())
    extra = dict(sep_logits=logits, sep_tnc_logits=tnc_det) if form == "official" else {}
    ref = mutexmatch_loss(logits_lb=lb, targets_lb=inp.targets_lb, logits_w=w, logits_s=s,
                          tnc_logits_w=tnc_det[B:B + U], tnc_logits_s=model.tnc(feats[B + U:]),
                          mask=confidence_mask(torch.softmax(w.detach(), 1), algo.params.tau), k=2, form=form,
                          **extra)
    assert torch.equal(out.loss, ref["loss"])   # the loss function's own weighted total, not re-weighted
    for key in ("sup", "sep", "p", "n"):
        assert out.terms[key].item() == pytest.approx(ref[key].item(), rel=1e-6), key


def test_official_sep_covers_all_rows() -> None:
    _, model, inp, out = run("mutexmatch", {"form": "official"})
    feats = inp.feats.detach()
    comp = torch.softmax(model.tpc(feats), 1).argmin(1)
    expected = F.cross_entropy(model.tnc(feats), comp)
    weak_only = F.cross_entropy(model.tnc(feats[B:B + U]), comp[B:B + U])
    assert out.terms["sep"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.terms["sep"].item() != pytest.approx(weak_only.item(), rel=1e-4)


def test_mutexmatch_gradient_routing_and_stop_grad_knob() -> None:
    _, model, _, out = run("mutexmatch", {"k": 2})
    assert 0 < out.mask.sum() < U
    sep, n, p = grad_sum(model, out.terms["sep"]), grad_sum(model, out.terms["n"]), grad_sum(model, out.terms["p"])
    assert sep["tnc"] > 0 and sep["backbone"] == 0 and sep["tpc"] == 0
    assert n["tnc"] > 0 and n["backbone"] > 0 and n["tpc"] == 0
    assert p["tpc"] > 0 and p["backbone"] > 0 and p["tnc"] == 0
    # sep_stop_grad=False (Table "ab" rows (i), (ii)): same value, now reaching the backbone.
    for form in ("paper", "official"):
        _, model2, _, out2 = run("mutexmatch", {"k": 2, "sep_stop_grad": False, "form": form})
        _, _, _, ref = run("mutexmatch", {"k": 2, "form": form})
        assert out2.terms["sep"].item() == pytest.approx(ref.terms["sep"].item(), rel=1e-6)
        assert grad_sum(model2, out2.terms["sep"])["backbone"] > 0


def test_missing_tnc_head_and_bad_step_inputs() -> None:
    algo = build_algorithm("mutexmatch", {}, TrainContext.synthetic(C))
    model = FakeNet(tnc=False)
    with pytest.raises(ValueError, match=r"model\.tnc is None"):
        algo.compute(model, batch(model, algo))
    inp = batch(model, algo)
    inp.num_ulb = U - 1
    with pytest.raises(ValueError, match=r"StepInputs\.feats: shape \(20, 6\)"):
        build_algorithm("fixmatch", {}, TrainContext.synthetic(C)).compute(model, inp)
    inp = batch(model, algo)
    inp.targets_lb = inp.targets_lb.int()
    with pytest.raises(ValueError, match=r"StepInputs\.targets_lb"):
        build_algorithm("fixmatch", {}, TrainContext.synthetic(C)).compute(model, inp)


# ---------------------------------------------------------------------------------------------------------------------
# Ablation variants: each changes exactly its term against default MutexMatch on the same batch.
# ---------------------------------------------------------------------------------------------------------------------
def unchanged(a: StepOutput, b: StepOutput, keys: tuple[str, ...]) -> None:
    for key in keys:
        assert a.terms[key].item() == pytest.approx(b.terms[key].item(), rel=1e-6), key


def r_w_and_low(model: FakeNet, inp: StepInputs, out: StepOutput) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.softmax(model.tnc(inp.feats[B:B + U]).detach(), 1), 1.0 - out.mask


def test_hard_hard_changes_only_the_tnc_consistency() -> None:
    _, model, inp, out = run("mutexmatch_hard_hard")
    _, _, _, ref = run("mutexmatch")
    unchanged(out, ref, ("sup", "sep", "p"))
    r_w, low = r_w_and_low(model, inp, out)
    tnc_s = model.tnc(inp.feats[B + U:])
    expected = (low * F.cross_entropy(tnc_s, r_w.argmax(1), reduction="none")).mean()
    assert out.terms["n"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.terms["n"].item() != pytest.approx(ref.terms["n"].item(), rel=1e-3)
    # It is the paper form's hard target at k = 1.
    _, _, _, hard_k1 = run("mutexmatch", {"k": 1, "tnc_target": "hard"})
    assert out.terms["n"].item() == pytest.approx(hard_k1.terms["n"].item(), rel=1e-6)
    with pytest.raises(ValueError, match=r"algorithm\.k"):
        build_algorithm("mutexmatch_hard_hard", {"k": 2}, TrainContext.synthetic(C))


def test_rand_soft_changes_only_sep() -> None:
    torch.manual_seed(5)
    _, model, inp, out = run("mutexmatch_rand_soft")
    _, _, _, ref = run("mutexmatch")
    unchanged(out, ref, ("sup", "p", "n"))
    probs = torch.softmax(model.tpc(inp.feats[B:B + U]), 1)
    assert torch.all(out.comp_label != probs.argmax(1))
    expected = F.cross_entropy(model.tnc(inp.feats[B:B + U]), out.comp_label)
    assert out.terms["sep"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_random_complementary_label_is_uniform_over_non_argmax() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([[0.1, 0.6, 0.2, 0.1]]).repeat(6000, 1)
    counts = torch.bincount(random_complementary_label(probs), minlength=C)
    assert counts[1] == 0
    assert all(abs(c / 6000 - 1 / 3) < 0.03 for c in counts[[0, 2, 3]].tolist())


def test_rev_norm_drops_sep_and_uses_normalised_reverse_target() -> None:
    algo, model, inp, out = run("mutexmatch_rev_norm")
    _, _, _, ref = run("mutexmatch")
    unchanged(out, ref, ("sup", "p"))
    assert "sep" not in out.terms and ALGORITHMS["mutexmatch_rev_norm"].terms == ("sup", "p", "n")
    r_w, low = r_w_and_low(model, inp, out)
    q = (1 - r_w) / (C - 1)
    log_r_s = torch.log_softmax(model.tnc(inp.feats[B + U:]), 1)
    expected_n = (low * -(q * log_r_s).sum(1)).mean()
    assert out.terms["n"].item() == pytest.approx(expected_n.item(), rel=1e-6)
    assert out.loss.item() == pytest.approx((out.terms["sup"] + out.terms["p"] + out.terms["n"]).item(), rel=1e-6)
    assert grad_sum(model, out.loss)["tnc"] > 0
    for removed in ("lambda_sep", "form", "k"):
        with pytest.raises(ValueError, match=rf"algorithm\.{removed}: not a parameter"):
            build_algorithm("mutexmatch_rev_norm", {removed: 1}, TrainContext.synthetic(C))


def test_tnc_consistency_on_all_samples_changes_only_n() -> None:
    _, model, inp, out = run("mutexmatch", {"tnc_consistency": "all"})
    _, _, _, ref = run("mutexmatch")
    unchanged(out, ref, ("sup", "sep", "p"))
    r_w, low = r_w_and_low(model, inp, out)
    ell = -(r_w * torch.log_softmax(model.tnc(inp.feats[B + U:]), 1)).sum(1)   # k = C: H(r^w, r^s)
    assert out.terms["n"].item() == pytest.approx(ell.mean().item(), rel=1e-6)
    assert ref.terms["n"].item() == pytest.approx((low * ell).mean().item(), rel=1e-6)


def test_hard_tnc_target_changes_only_n() -> None:
    _, model, inp, out = run("mutexmatch", {"tnc_target": "hard", "k": 2})
    _, _, _, ref = run("mutexmatch", {"k": 2})
    unchanged(out, ref, ("sup", "sep", "p"))
    r_w, low = r_w_and_low(model, inp, out)
    log_r_s = torch.log_softmax(model.tnc(inp.feats[B + U:]), 1)
    top2 = r_w.topk(2, 1).indices
    expected = (low * -(log_r_s.gather(1, top2).sum(1)) / 2).mean()   # -(1/k) sum_{top-k} 1 * log r^s
    assert out.terms["n"].item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("form", ["paper", "official"])
def test_comp_rank_changes_only_sep(form: str) -> None:
    _, model, inp, out = run("mutexmatch", {"comp_rank": 2, "form": form})
    _, _, _, ref = run("mutexmatch", {"form": form})
    unchanged(out, ref, ("sup", "p", "n"))
    rows = slice(B, B + U) if form == "paper" else slice(None)
    feats = inp.feats.detach()[rows]
    second = torch.softmax(model.tpc(feats), 1).sort(1).indices[:, 1]
    assert out.terms["sep"].item() == pytest.approx(F.cross_entropy(model.tnc(feats), second).item(), rel=1e-6)
    assert torch.equal(out.comp_label, torch.softmax(model.tpc(inp.feats[B:B + U]), 1).sort(1).indices[:, 1])


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_lowconf_variants_add_only_ab1(lam: float) -> None:
    _, model, inp, fm = run("fixmatch")
    w, s = model.tpc(inp.feats[B:]).split([U, U])
    p_w = torch.softmax(w.detach(), 1)
    low = 1.0 - fm.mask
    per_row = {
        "lowconf_full": F.cross_entropy(s, p_w.argmax(1), reduction="none"),
        "lowconf_soft": -(p_w * torch.log_softmax(s, 1)).sum(1),
        "lowconf_mse": ((inp.feats[B:B + U] - inp.feats[B + U:]) ** 2).mean(1),
    }
    for name, ell in per_row.items():
        _, _, _, out = run(name, {"lambda_ab1": lam})
        unchanged(out, fm, ("sup", "p"))
        assert out.terms["ab1"].item() == pytest.approx((low * ell).mean().item(), rel=1e-6)
        assert out.loss.item() == pytest.approx((fm.loss + lam * out.terms["ab1"]).item(), rel=1e-6)


@pytest.mark.parametrize("variant", [1, 2, 3])
def test_fixmatch_nce_variants(variant: int) -> None:
    tau_n = 0.15
    algo, model, inp, out = run("fixmatch_nce", {"nce_variant": variant, "tau_n": tau_n})
    assert algo.threshold == {1: 0.95, 2: 0.7, 3: 0.95}[variant]
    w, s = model.tpc(inp.feats[B:]).split([U, U])
    p_w = torch.softmax(w, 1)
    neg = (p_w.detach() <= tau_n).double()
    assert 0 < neg.sum() < neg.numel()
    q = p_w if variant in (1, 2) else torch.softmax(s, 1)
    expected = 0.0
    for i in range(U):
        s_i = neg[i].sum().item()
        if s_i:
            expected += -sum(math.log(1 - q[i, c].item()) for c in range(C) if neg[i, c]) / s_i
    assert out.terms["nce"].item() == pytest.approx(expected / U, rel=1e-5)
    assert out.mask.tolist() == (p_w.detach().max(1).values >= algo.threshold).float().tolist()
    grads = grad_sum(model, out.terms["nce"])
    assert grads["tpc"] > 0 and grads["backbone"] > 0
    # Variant (iv) learns on the weak view itself; (v) only through the strong view.
    w_grad = torch.autograd.grad(out.terms["nce"], inp.feats, retain_graph=True)[0][B:B + U]
    assert (w_grad.abs().sum() > 0) == (variant in (1, 2))


# ---------------------------------------------------------------------------------------------------------------------
# Distribution alignment.
# ---------------------------------------------------------------------------------------------------------------------
def test_distribution_alignment_values_and_state() -> None:
    da = DistributionAlignment(C, window=2)
    skewed = torch.softmax(torch.randn(16, C, generator=torch.Generator().manual_seed(0)) +
                           torch.tensor([2.0, 0.0, 0.0, -1.0]), 1)
    aligned = da(skewed)
    assert torch.allclose(aligned.sum(1), torch.ones(16))
    uniform = torch.full((C,), 1 / C)
    assert (aligned.mean(0) - uniform).abs().sum() < 0.5 * (skewed.mean(0) - uniform).abs().sum()
    expected = skewed / skewed.mean(0)
    assert torch.allclose(aligned, expected / expected.sum(1, keepdim=True), atol=1e-6)
    # The running mean is over the last `window` batches.
    second = torch.softmax(torch.randn(16, C), 1)
    da(second)
    da(second)
    assert torch.allclose(da.running_mean, second.mean(0), atol=1e-6)
    fresh = DistributionAlignment(C, window=2)
    fresh.load_state_dict(da.state_dict())
    assert torch.equal(fresh(skewed), da(skewed))
    with pytest.raises(ValueError, match=r"history of shape \(2, 4\)"):
        DistributionAlignment(C, window=3).load_state_dict(da.state_dict())


def test_dist_align_feeds_threshold_and_labels() -> None:
    algo, model, inp, out = run("mutexmatch", {"dist_align": True, "form": "official"})
    p_w = torch.softmax(model.tpc(inp.feats[B:B + U]).detach(), 1)
    aligned = p_w / p_w.mean(0)
    aligned = aligned / aligned.sum(1, keepdim=True)
    assert torch.allclose(out.conf, aligned.max(1).values, atol=1e-6)
    assert torch.equal(out.comp_label, aligned.argmin(1))
    # Official L_sep's weak rows use the aligned complementary labels too.
    feats = inp.feats.detach()
    comp = torch.softmax(model.tpc(feats), 1).argmin(1)
    comp[B:B + U] = aligned.argmin(1)
    assert out.terms["sep"].item() == pytest.approx(F.cross_entropy(model.tnc(feats), comp).item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# Parameter validation.
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,params,match", [
    ("mutexmatch", {"tau": 1.5}, r"algorithm\.tau=1\.5: must be in \(0, 1\]"),
    ("mutexmatch", {"tau": 0.0}, r"algorithm\.tau=0\.0: must be in \(0, 1\]"),
    ("mutexmatch", {"tau": float("nan")}, r"algorithm\.tau=nan: must be in \(0, 1\]"),
    ("mutexmatch", {"tau": "0.9"}, r"algorithm\.tau='0\.9': Input should be a valid number"),
    ("mutexmatch", {"k": 0}, r"algorithm\.k=0: must be >= 1"),
    ("mutexmatch", {"k": 0, "form": "official"}, r"algorithm\.k=0: must be >= 1"),
    ("mutexmatch", {"k": 5, "form": "official"}, r"algorithm\.k=5: must be in \[1, 4\] \(the number of classes\)"),
    ("mutexmatch", {"k": 2.0}, r"algorithm\.k=2\.0: must be an integer, `C` or a fraction like `0\.6C`"),
    ("mutexmatch", {"k": "1.5C"}, r"algorithm\.k='1\.5C': fraction of C must be in \(0, 1\]"),
    ("mutexmatch", {"form": "both"}, r"algorithm\.form='both': Input should be 'paper' or 'official'"),
    ("mutexmatch", {"lambda_n": -0.1}, r"algorithm\.lambda_n=-0\.1: must be in \[0, inf\)"),
    ("mutexmatch", {"lambda_n": float("inf")}, r"algorithm\.lambda_n=inf: must be in \[0, inf\)"),
    ("mutexmatch", {"lambda_p": True}, r"algorithm\.lambda_p=True: Input should be a valid number"),
    ("mutexmatch", {"sep_stop_grad": 1}, r"algorithm\.sep_stop_grad=1: Input should be a valid boolean"),
    ("mutexmatch", {"tnc_consistency": "high"}, r"algorithm\.tnc_consistency='high'"),
    ("mutexmatch", {"tnc_target": "top1"}, r"algorithm\.tnc_target='top1'"),
    ("mutexmatch", {"comp_rank": 5}, r"algorithm\.comp_rank=5: must be in \[1, 4\] \(the number of classes\)"),
    ("mutexmatch", {"comp_rank": 0}, r"algorithm\.comp_rank=0: must be >= 1"),
    ("mutexmatch", {"tau": 2.0, "lambda_sep": -1.0}, r"algorithm\.tau=2\.0: .*\nalgorithm\.lambda_sep=-1\.0: "),
    ("fixmatch", {"dist_align": "yes"}, r"algorithm\.dist_align='yes'"),
    ("fixmatch", {"k": 2}, r"algorithm\.k: not a parameter of algorithm 'fixmatch'"),
    ("lowconf_soft", {"lambda_ab1": -1}, r"algorithm\.lambda_ab1=-1"),
    ("fixmatch_nce", {"nce_variant": 4}, r"algorithm\.nce_variant=4: must be 1, 2 or 3"),
    ("fixmatch_nce", {"tau_n": 1.0}, r"algorithm\.tau_n=1\.0: must be in \(0, 1\)"),
    ("fixmatch_nce", {"tau_p": 0.0}, r"algorithm\.tau_p=0\.0"),
    ("supervised", {"tau": 0.9}, r"algorithm\.tau: not a parameter of algorithm 'supervised' \(accepted: none\)"),
    ("mutexmatch_hard_hard", {"tnc_target": "soft"}, r"algorithm\.tnc_target: not a parameter"),
])
def test_bad_params_raise_naming_the_field(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_algorithm(name, params, TrainContext.synthetic(C))


def test_defaults_resolve() -> None:
    algo = build_algorithm("mutexmatch", {}, TrainContext.synthetic(10))
    assert algo.k == 10 and algo.params.form == "paper" and algo.dist_align is None
    assert build_algorithm("mutexmatch", {"k": "0.6C"}, TrainContext.synthetic(10)).k == 6
    assert build_algorithm("mutexmatch", {"k": 3, "form": "official"}, TrainContext.synthetic(10)).k == 3
    rev_norm = build_algorithm("mutexmatch_rev_norm", {}, TrainContext.synthetic(10))
    assert rev_norm.params.lambda_sep == 0.0 and rev_norm.params.form == "paper" and rev_norm.k == 10
    assert ALGORITHMS["mutexmatch"].Params.model_fields["k"].default == "C"
    with pytest.raises(ValueError, match=r"num_classes=1"):
        build_algorithm("fixmatch", {}, TrainContext.synthetic(1))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_algorithm_owns_its_config_section(name: str) -> None:
    """``algorithm: {name, <its own parameters>}`` resolved to its model's defaults, round-tripping with the same
    hash; the generated docs list each parameter with its default; another algorithm's parameter and an unknown key
    are refused in one line naming the algorithm and the parameters it takes."""
    from mutexmatch.config import ConfigError, config_hash, config_markdown, parse_config

    own = ALGORITHMS[name].Params.model_fields
    cfg = parse_config({"algorithm": {"name": name}})
    section = cfg.to_dict()["algorithm"]
    assert list(section) == ["name", *own]
    assert ALGORITHMS[name].params_from(cfg.algorithm) == {f: field.default for f, field in own.items()}
    again = parse_config(cfg.to_dict())
    assert again.to_dict()["algorithm"] == section and config_hash(again) == config_hash(cfg)
    doc = config_markdown()
    assert f"| `{name}` |" in doc and all(f"`{f}` = `{field.default!r}`" in doc for f, field in own.items())
    takes = re.escape(", ".join(own) or "no parameters")
    pinned = ALGORITHMS[name].Params.pinned  # a shared parameter this algorithm fixes: "fixed at", not "not used"
    foreign = [(f, field.default, other) for other, cls in sorted(ALGORITHMS.items())
               for f, field in cls.Params.model_fields.items() if f not in own]
    for f, default, other in [c for c in foreign if c[0] not in pinned][:1]:
        with pytest.raises(ConfigError, match=rf"^algorithm\.{f}={re.escape(repr(default))}: not used by "
                           rf"algorithm '{name}' \(a parameter of [^)]*{other}[^)]*\); '{name}' takes: {takes}$"):
            parse_config({"algorithm": {"name": name, f: default}})
    for f, default, _ in [c for c in foreign if c[0] in pinned and c[1] != pinned[c[0]]][:1]:
        with pytest.raises(ConfigError, match=rf"^algorithm\.{f}={re.escape(repr(default))}: fixed at "
                           rf"{re.escape(repr(pinned[f]))} by algorithm '{name}'; leave it out; '{name}' takes: {takes}$"):
            parse_config({"algorithm": {"name": name, f: default}})
    with pytest.raises(ConfigError, match=rf"^algorithm\.bogus_key: unknown key \(no algorithm has it\); "
                       rf"'{name}' takes: {takes}$"):
        parse_config({"algorithm": {"name": name, "bogus_key": 1}})


def test_a_parameter_value_is_validated_by_its_algorithm_and_changes_only_its_hash() -> None:
    """The conftest algorithm's own parameter: validated by its model, in its config hash."""
    from mutexmatch.config import ConfigError, config_hash, parse_config

    cls = ALGORITHMS["flexmatch_demo"]
    own = [f for f in cls.Params.model_fields if f not in ALGORITHMS["fixmatch"].Params.model_fields]
    cfg = parse_config({"algorithm": {"name": "flexmatch_demo"}})
    flipped = parse_config({"algorithm": {"name": "flexmatch_demo", own[0]: True}})
    assert config_hash(flipped) != config_hash(cfg) and getattr(flipped.algorithm, own[0]) is True
    with pytest.raises(ConfigError, match=rf"algorithm\.{own[0]}=1: Input should be a valid bool"):
        parse_config({"algorithm": {"name": "flexmatch_demo", own[0]: 1}})


# ---------------------------------------------------------------------------------------------------------------------
# The threshold seam.
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fixmatch", "mutexmatch", "lowconf_soft", "fixmatch_nce"])
def test_fixed_threshold_is_the_former_float_tau_mask(name: str) -> None:
    """The default seam is 1(max p^w >= tau) bit for bit, and the loss is computed on it."""
    algo, model, inp, out = run(name)
    p_w = torch.softmax(model.tpc(inp.feats[B:B + U]).detach(), 1)
    former = (p_w.max(dim=1).values >= algo.threshold).to(p_w.dtype)
    assert torch.equal(algo.confidence_mask(p_w, inp), former) and torch.equal(out.mask, former)
    assert 0 < former.sum() < U or name == "fixmatch_nce"


def test_per_class_thresholds_through_the_seam() -> None:
    """The conftest's FlexMatch-style algorithm: thresholds M(beta(c)) tau from its per-sample state, which it
    updates from the unlabeled indices and which round-trips through state_dict."""
    cls = ALGORITHMS["flexmatch_demo"]
    model = FakeNet(tnc=False)
    algo = cls({"tau": 0.5}, TrainContext.synthetic(C, 2 * U))
    probs = torch.tensor([[0.9, 0.05, 0.03, 0.02]] * 4 + [[0.1, 0.6, 0.2, 0.1]] * 2 + [[0.3, 0.3, 0.2, 0.2]] * 2)
    inp = batch(model, cls)
    inp.ulb_idx = torch.arange(U, 2 * U)
    assert torch.equal(algo.confidence_mask(probs, inp), torch.ones(U))        # beta = 0: every row passes
    assert algo.state_dict()["selected"].tolist() == [-1] * U + [0] * 4 + [1] * 2 + [-1] * 2
    # sigma = (4, 2, 0, 0): beta = (1, 0.5, 0, 0); T(c) = beta / (2 - beta) * 0.5
    thresholds = torch.tensor([1.0, 0.5 / 1.5, 0.0, 0.0]) * 0.5
    probs2 = torch.tensor([[0.12, 0.08, 0.4, 0.4], [0.2, 0.1, 0.3, 0.4]] * 4).T.softmax(0).T
    inp.ulb_idx = torch.arange(U)
    expected = (probs2.max(1).values >= thresholds[probs2.argmax(1)]).float()
    assert torch.equal(algo.confidence_mask(probs2, inp), expected)
    fresh = cls({"tau": 0.5}, TrainContext.synthetic(C, 2 * U))
    fresh.load_state_dict(algo.state_dict())
    assert torch.equal(fresh.selected, algo.selected)


def _da_inputs(steps: int, rows: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.softmax(3 * torch.randn(rows, C, generator=g), 1), torch.softmax(torch.randn(4, C, generator=g), 1))
            for _ in range(steps)]


@pytest.mark.parametrize("estimate", ["queue", "ema"])
@pytest.mark.parametrize("ratio", ["filled", "usb"])
@pytest.mark.parametrize("target", ["uniform", "labeled", "model"])
def test_distribution_alignment_forms_follow_their_formulas(estimate, ratio, target) -> None:
    """Each form of p^w * p(y) / p~(y), written out by hand from the module docstring: the queue's mean over its
    filled slots (ours) or all slots (USB), an EMA that starts at the first batch, and the three targets."""
    window, m = 3, 0.9
    counts = torch.arange(1, C + 1)
    da = DistributionAlignment(C, window, estimate=estimate, momentum=m, target=target, ratio=ratio,
                               labeled_prior=counts)
    rows, lb_rows = [], []
    lb_ema = torch.full((C,), 1.0 / C)
    for step, (p, p_lb) in enumerate(_da_inputs(5)):
        rows.append(p.mean(0))
        lb_rows.append(p_lb.mean(0))
        lb_ema = lb_ema * m + p_lb.mean(0) * (1 - m)
        if estimate == "queue":
            recent, recent_lb = torch.stack(rows[-window:]), torch.stack(lb_rows[-window:])
            p_model = recent.sum(0) / (window if ratio == "usb" else len(recent))
            p_lb_run = recent_lb.sum(0) / (window if ratio == "usb" else len(recent_lb))
        else:
            p_model = rows[0] if step == 0 else p_model * m + rows[-1] * (1 - m)
            p_lb_run = lb_ema
        p_target = {"uniform": torch.full((C,), 1.0 / C), "labeled": counts / counts.sum(), "model": p_lb_run}[target]
        eps = 1e-6 if ratio == "usb" else 0.0
        expected = p * (p_target + eps) / (p_model + eps)
        torch.testing.assert_close(da(p, p_lb), expected / expected.sum(1, keepdim=True))


def test_distribution_alignment_forms_agree_once_the_queue_is_full_and_not_before() -> None:
    """The two named forms of the queue (issue 22): far apart in the first steps, when a class's mean probability is
    below 1e-6 * window (an untrained model), and within ~1e-7 once such batches have left the full queue."""
    ours, usb = (DistributionAlignment(C, 4, ratio=r) for r in ("filled", "usb"))
    g = torch.Generator().manual_seed(3)
    gaps = []
    for step in range(9):
        skew = torch.tensor([0.0, 0.0, -14.0 if step < 2 else 0.0, 0.0])
        p = torch.softmax(2 * torch.randn(8, C, generator=g) + skew, 1)
        gaps.append((ours(p) - usb(p)).abs().max().item())
    assert gaps[0] > 0.1 and max(gaps[6:]) < 1e-5, gaps
