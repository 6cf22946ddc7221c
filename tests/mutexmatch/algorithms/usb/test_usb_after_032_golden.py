"""Algorithms USB added after semilearn 0.3.2 (not on PyPI) equal its code, by a golden record:
``golden/usb_after_032.pt`` was made once by ``golden/make_usb_after_032.py`` (the commit of
microsoft/Semi-supervised-learning and the command are in the file) through this harness's own pieces: USB's
``train_step`` on the harness's ``TinyNet`` (with BatchNorm) over fixed weights and views, plain SGD, 10 steps.

Ours replays each run on the same weights and views, step by step (after each step taking USB's recorded SGD update
and BatchNorm statistics, so every step is compared on USB's weights): the loss, each logged term (and the term USB
does not log, from the loss), the mask, the pseudo-labels, every gradient and the BatchNorm statistics, within 1e-6.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mutexmatch.training.extended_step import features_forward, step_inputs

GOLDEN = torch.load(Path(__file__).parents[1] / "golden" / "usb_after_032.pt", weights_only=True)
CLOSE = {"atol": 1e-6, "rtol": 1e-6}
# Ours' parameters for each recorded run (USB's are in the file), ours' term -> USB's log key, and the terms USB does
# not log with their weights (what the loss holds beyond the logged terms).
LOGGED = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
OURS = {"refixmatch": ({"tau": 0.8, "lambda_p": 0.7}, LOGGED, {"refix": 0.7}),
        "sequencematch": ({"tau": 0.8, "lambda_p": 0.7, "temperature": 0.5, "thresh_warmup": True}, LOGGED,
                          {"mw": 0.7, "sm": 0.7, "sw": 0.7})}


@pytest.mark.parametrize("name", sorted(OURS))
def test_equals_usb_code_after_0_3_2(name, usb_harness):
    h, run = usb_harness, GOLDEN[name]
    cfg, views = run["config"], run["views"]
    params, logged, unlogged = OURS[name]
    model = h.TinyNet(cfg["d_in"], cfg["width"], cfg["num_classes"], cfg["scale"], batchnorm=True)
    model.load_state_dict(run["initial_state"])
    alg = h.build_ours(name, params, num_classes=cfg["num_classes"], ulb_size=cfg["ulb_size"],
                       lb_size=cfg["lb_size"], total_steps=cfg["steps"], steps_per_epoch=cfg["steps"])
    if "initial_selected" in run:   # FlexMatch's thresholds mid-run, as USB's were set before its first step
        alg.cpl.selected = run["initial_selected"].clone()
        alg.cpl._update_beta()
    for t in range(cfg["steps"]):
        at = f"{name}, step {t}"
        x = torch.cat([views[h.VIEW_SOURCE[v]][t] for v in alg.step.views])
        inp = step_inputs(alg.step, x, num_lb=len(views["y_lb"][t]), num_ulb=len(views["idx_ulb"][t]),
                          features=features_forward(model, model), teacher=None, targets_lb=views["y_lb"][t],
                          ulb_idx=views["idx_ulb"][t], step=t, lb_pos=views["idx_lb"][t])
        out = alg.compute(model, inp)
        out.loss.backward()
        torch.testing.assert_close(out.loss, run["loss"][t], **CLOSE, msg=lambda m: f"{at}: loss\n{m}")
        torch.testing.assert_close(out.mask, run["mask"][t], **CLOSE, msg=lambda m: f"{at}: mask\n{m}")
        assert torch.equal(out.pseudo_label, run["pseudo_label"][t]), f"{at}: pseudo-labels"
        for ours, key in logged.items():
            torch.testing.assert_close(out.terms[ours].item(), run["log"][key][t], **CLOSE,
                                       msg=lambda m: f"{at}: {ours} vs USB's {key}\n{m}")
        rest = run["loss"][t].item() - sum(alg.term_weights()[o] * run["log"][k][t] for o, k in logged.items())
        torch.testing.assert_close(sum(w * out.terms[u].item() for u, w in unlogged.items()), rest, **CLOSE,
                                   msg=lambda m: f"{at}: {sorted(unlogged)} (USB's loss less its logged terms)\n{m}")
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, run["grads"][n][t], **CLOSE, msg=lambda m: f"{at}: gradient of {n}\n{m}")
        for n, b in model.named_buffers():
            torch.testing.assert_close(b, run["buffers"][n][t], **CLOSE, msg=lambda m: f"{at}: {n}\n{m}")
        with torch.no_grad():   # USB's step: the next one starts on its weights
            for n, p in model.named_parameters():
                p.add_(run["grads"][n][t], alpha=-cfg["lr"])
                p.grad = None
            for n, b in model.named_buffers():
                b.copy_(run["buffers"][n][t])
    for n, p in model.state_dict().items():
        torch.testing.assert_close(p, run["final_state"][n], **CLOSE)
    assert 0 < run["mask"].mean() < 1 and all(out.terms[u] > 0 for u in unlogged)   # masks mixed, terms live
