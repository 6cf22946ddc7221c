"""TRAS's ``form: official`` equals the authors' released code (Stomach-ache/TRAS, ``train.py``) step for step: the
golden record tests/mutexmatch/algorithms/golden/tras_official.pt (its commit and command inside; made by
make_tras_official.py beside it) holds the official ``train`` driven for 10 steps on a tiny model, and ours,
FixMatch + TRAS (form official) on the same weights, views and long-tailed labels, gives the same L_x, L_u and TRAS
loss, the mask and target the official KL receives, and every gradient (the body, the TPC and the auxiliary head).
USB's form (the inverse prior, the head's own weak logits as the teacher) does not: the forms differ there."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from mutexmatch.algorithms import TrainContext
from mutexmatch.imb_algorithms import compose
from mutexmatch.training.extended_step import features_forward, step_inputs

GOLDEN = Path(__file__).parents[1] / "algorithms" / "golden" / "tras_official.pt"


class Scaled(nn.Module):
    def __init__(self, d_in: int, d_out: int, scale: float) -> None:
        super().__init__()
        self.lin, self.scale = nn.Linear(d_in, d_out), scale

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * self.lin(x)


class Ours(nn.Module):
    """The golden's model (features Linear + tanh, heads x scale) in our interface: ``tpc`` and ``heads['tras']``."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.body = nn.Linear(cfg["d_in"], cfg["width"])
        self.fc = Scaled(cfg["width"], cfg["num_classes"], cfg["scale"])
        self.heads = nn.ModuleDict({"tras": Scaled(cfg["width"], cfg["num_classes"], cfg["scale"])})

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.body(x))

    def tpc(self, feats: Tensor) -> Tensor:
        return self.fc(feats)


NAMES = {"body.weight": "body.weight", "body.bias": "body.bias", "fc.lin.weight": "fc.weight",
         "fc.lin.bias": "fc.bias", "heads.tras.lin.weight": "fc2.weight", "heads.tras.lin.bias": "fc2.bias"}


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(GOLDEN, weights_only=True)


def _run(golden: dict, form: str) -> list[dict]:
    cfg, v, ref = golden["config"], golden["views"], golden["train"]
    counts = torch.tensor(cfg["counts"])
    ctx = TrainContext.synthetic(cfg["num_classes"], cfg["batch"], total_steps=1000, steps_per_epoch=100)
    ctx = dataclasses.replace(ctx, labeled=torch.arange(int(counts.sum())), labeled_counts=counts)
    alg = compose("tras", "fixmatch", {"form": form, "warmup_epochs": 0, "a": float(cfg["A"]), "b": float(cfg["B"]),
                                       "tro": cfg["tro"]})({"tau": cfg["tau"]}, ctx)
    model = Ours(cfg)
    model.load_state_dict({ours: ref["initial_state"][theirs] for ours, theirs in NAMES.items()})
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    steps = []
    for t in range(cfg["steps"]):
        x = torch.cat([v["x_lb"][t], v["x_w"][t], v["x_s"][t]])
        b = len(v["y_lb"][t])
        inp = step_inputs(alg.step, x, num_lb=b, num_ulb=b, features=features_forward(model, model), teacher=None,
                          targets_lb=v["y_lb"][t], ulb_idx=torch.arange(b), step=t)
        opt.zero_grad()
        out = alg.compute(model, inp)
        out.loss.backward()
        steps.append({"out": out, "grads": {n: p.grad.clone() for n, p in model.named_parameters()}})
        opt.step()
    return steps


def test_the_official_form_equals_the_official_code_step_for_step(golden):
    ref = golden["train"]
    assert golden["commit"].startswith("c62ec019")
    steps = _run(golden, "official")
    for t, s in enumerate(steps):
        terms = {k: v.detach() for k, v in s["out"].terms.items()}
        assert float(terms["sup"]) == pytest.approx(float(ref["losses"]["lx"][t]), abs=1e-6), t
        assert float(terms["p"]) == pytest.approx(float(ref["losses"]["lu"][t]), abs=1e-6), t
        assert float(terms["tras"]) == pytest.approx(float(ref["losses"]["tras"][t]), abs=1e-6), t
        b = len(s["out"].extra["tras_mask"])      # the official doubles its rows (two strong views, the same here)
        assert torch.equal(s["out"].extra["tras_mask"], ref["kl_mask"][t][:b]), t
        for ours, theirs in NAMES.items():
            torch.testing.assert_close(s["grads"][ours], ref["grads"][theirs][t], atol=1e-6, rtol=1e-5,
                                       msg=lambda m: f"step {t} {ours}: {m}")
    assert bool(ref["kl_mask"].any()) and not bool(ref["kl_mask"].all())      # masks mix: the test can fail there


def test_usb_form_differs_from_the_official_code(golden):
    """USB's prior is the inverse frequency (sign-reversed adjustments): its TRAS loss differs at the first step."""
    first = {k: v.detach() for k, v in _run(golden, "usb")[0]["out"].terms.items()}
    assert abs(float(first["tras"]) - float(golden["train"]["losses"]["tras"][0])) > 1e-2


def test_the_adjustments_favour_the_tail_in_the_official_form_and_the_head_in_usbs():
    counts = torch.tensor([50, 20, 8, 2])
    ctx = dataclasses.replace(TrainContext.synthetic(4, 8), labeled=torch.arange(80), labeled_counts=counts)
    la = {f: compose("tras", "fixmatch", {"form": f})({}, ctx).tras_la for f in ("usb", "official")}
    torch.testing.assert_close(la["official"], torch.log(counts.double() / 80 + 1e-12))
    # softmax(z - la): equal logits give the tail class (official) or the head class (usb) the most probability
    assert int(torch.softmax(-la["official"], 0).argmax()) == 3 and int(torch.softmax(-la["usb"], 0).argmax()) == 0
