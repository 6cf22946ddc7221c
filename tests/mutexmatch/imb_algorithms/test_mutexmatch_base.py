"""MutexMatch as the base of ABC (issue 41 item 4): ``algorithm: {name: mutexmatch}`` + ``imb_algorithm: {name: abc}``.

No USB reference exists for this row (USB has no MutexMatch), so the composition is checked against its
definition, L = L_MutexMatch + lambda_abc (L_abc^lb + L_abc^ulb): on one step of a model with its TNC and ABC's head,
the composed step's MutexMatch terms, masks, pseudo- and complementary labels and the TNC's gradient are plain
MutexMatch's; its ABC term is the one written out here from the features of MutexMatch's own views (its Bernoulli
draws from the same generator state), with the loss weight; every gradient is the sum of the two losses'. The
config accepts the pair, and the official form keeps its BatchNorm tie beside ABC's evaluated head. A digits run
of the pair (terms logged, ABC's head evaluated, stopped and resumed bit-identical) is test_registry.py's."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mutexmatch.algorithms import ALGORITHMS, TrainContext
from mutexmatch.config import parse_config
from mutexmatch.imb_algorithms import IMB_ALGORITHMS, algorithm_class, compose
from mutexmatch.models import build_model
from mutexmatch.training.extended_step import features_forward, step_inputs

COUNTS = torch.tensor([8, 4, 2, 1])          # a long-tailed labeled set: ABC's class weights min / N_c
ABC_PARAMS = {"tau": 0.5, "lambda_abc": 0.5, "epoch_steps": 10}
STEP, TOTAL = 55, 100                        # epoch 5 of 10: the unlabeled mask half-way to the labeled one


def _context() -> TrainContext:
    return TrainContext(num_classes=4, unlabeled=torch.arange(32), labeled=torch.arange(int(COUNTS.sum())),
                        labeled_counts=COUNTS, total_steps=TOTAL, steps_per_epoch=8)


def test_the_config_takes_mutexmatch_as_abcs_base():
    raw = {"data": {"dataset": "digits", "num_labels": 20, "fold": 1}, "model": {"backbone": "small_cnn"},
           "algorithm": {"name": "mutexmatch"}, "imb_algorithm": {"name": "abc"}, "train": {"iterations": 4}}
    cls = algorithm_class(parse_config(raw))
    assert issubclass(cls, ALGORITHMS["mutexmatch"]) and issubclass(cls, IMB_ALGORITHMS["abc"])
    assert cls.terms == ("sup", "sep", "p", "n", "abc") and cls.uses_tnc


def _expected_abc(head, feats: dict[str, torch.Tensor], y_lb: torch.Tensor) -> torch.Tensor:
    """L_abc^lb + L_abc^ulb written out (docs/longtail.md, ABC), the Bernoulli draws labeled first, in float64."""
    weights = (COUNTS.min() / COUNTS).double()
    mask_lb = torch.bernoulli(weights[y_lb]).float()
    lb = (F.cross_entropy(head(feats["lb"]), y_lb, reduction="none") * mask_lb).mean()
    conf, pseudo = torch.softmax(head(feats["weak"]).detach(), dim=1).max(dim=1)
    progress = (STEP // ABC_PARAMS["epoch_steps"]) / (TOTAL // ABC_PARAMS["epoch_steps"])
    mask_ulb = conf.ge(ABC_PARAMS["tau"]).float() * torch.bernoulli((1 - progress * (1 - weights))[pseudo]).float()
    return lb + (F.cross_entropy(head(feats["strong"]), pseudo, reduction="none") * mask_ulb).mean()


def _step(cls, params: dict, model, x: torch.Tensor, y_lb: torch.Tensor):
    model.zero_grad()
    inp = step_inputs(cls.step, x, num_lb=4, num_ulb=8, features=features_forward(model, model), teacher=None,
                      step=STEP, targets_lb=y_lb, ulb_idx=torch.arange(8))
    torch.manual_seed(7)
    out = cls(params, _context()).compute(model, inp)
    return out, inp


@pytest.mark.parametrize("form", ["paper", "official"])
def test_the_composed_step_is_mutexmatch_plus_abc(form):
    params = {"form": form, "tau": 0.5}
    composed, plain = compose("abc", "mutexmatch", ABC_PARAMS), ALGORITHMS["mutexmatch"]
    torch.manual_seed(0)
    model = build_model("small_cnn", num_classes=4, in_channels=1, image_size=8, with_tnc=True)
    model.add_heads(composed.heads(composed.Params.parse(params, "mutexmatch", 4), model.feat_dim, 4))
    model.eval()                               # BatchNorm by running statistics: three forwards see one model
    with torch.no_grad():                      # confident rows and unconfident ones at tau = 0.5, both heads
        for head in (model.backbone.classifier, model.heads["abc"]):
            head.weight.mul_(30)
    x, y_lb = torch.randn(4 + 2 * 8, 1, 8, 8), torch.tensor([0, 1, 2, 3])

    out, _ = _step(composed, params, model, x, y_lb)
    out.loss.backward()
    grads_c = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    ref, inp = _step(plain, params, model, x, y_lb)
    ref.loss.backward(retain_graph=True)       # its features feed the written-out ABC term below
    grads_m = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    torch.manual_seed(7)
    feats = dict(zip(("lb", "weak", "strong"), inp.feats.split([4, 8, 8])))
    abc = _expected_abc(model.heads["abc"], feats, y_lb)
    (ABC_PARAMS["lambda_abc"] * abc).backward()
    grads_a = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    assert out.terms.keys() == {*plain.terms, "abc"} and all(torch.equal(out.terms[t], ref.terms[t])
                                                              for t in plain.terms)
    for f in ("mask", "conf", "pseudo_label", "comp_label"):
        assert torch.equal(getattr(out, f), getattr(ref, f)), f
    for mask in (out.mask, out.extra["abc_mask"]):     # confident and unconfident rows in both heads' masks
        assert 0 < mask.sum() < len(mask)
    assert torch.allclose(out.terms["abc"], abc, atol=1e-6, rtol=0)
    assert torch.allclose(out.loss, ref.loss + ABC_PARAMS["lambda_abc"] * abc, atol=1e-6, rtol=0)
    assert not any(n.startswith("heads.abc.") for n in grads_m) and all(n.startswith(("heads.abc.", "backbone."))
                                                                      for n in grads_a)
    assert grads_c.keys() == grads_m.keys() | grads_a.keys()
    for n, g in grads_c.items():
        expected = grads_m.get(n, 0) + grads_a.get(n, 0)
        assert torch.allclose(g, expected, atol=1e-6, rtol=1e-5), n


def test_the_official_forms_batchnorm_tie_survives_abcs_evaluated_head():
    composed = compose("abc", "mutexmatch", {})
    params = composed.Params.parse({"form": "official"}, "mutexmatch", 10)
    tied, plain, untouched = (build_model("wrn28_2", num_classes=10, image_size=32) for _ in range(3))
    tied.add_heads(composed.heads(params, tied.feat_dim, 10))
    composed.setup_model(params, tied, 0.99)
    ALGORITHMS["mutexmatch"].setup_model(params, plain, 0.99)
    bn = [[m.momentum for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)] for net in (tied, plain, untouched)]
    assert bn[0] == bn[1] != bn[2]
    assert tied.evaluated_head == "abc" and plain.evaluated_head is None
