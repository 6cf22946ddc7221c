"""mutexmatch/selection.py against USB's own code (semilearn 0.3.2; the harness is conftest.py): AdaMatch's
relative threshold, UDA's TSA thresholds, Pseudo-Label's ramp-up and Dash's threshold schedule, mask and
pseudo-labels equal USB's on the same inputs; where we deviate on purpose the test asserts the deviation."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mutexmatch.selection import (dash_mask, dash_targets, dash_threshold, rampup_weight, relative_confidence_mask,
                                  tsa_mask, tsa_threshold)


@pytest.fixture(scope="module")
def usb(usb_lockstep):
    """USB's algorithm modules (importing semilearn through the harness, or skipping with the make command)."""
    return SimpleNamespace(**{n: importlib.import_module(f"semilearn.algorithms.{n}") for n in
                              ("adamatch", "uda", "dash")}, core=importlib.import_module("semilearn.core"))


def _usb_alg(usb, **fields):
    """The few fields USB's hooks read off an algorithm object."""
    from semilearn.core.criterions import CELoss
    alg = SimpleNamespace(compute_prob=lambda x: torch.softmax(x, dim=-1), ce_loss=CELoss(), **fields)
    return alg


def _logits(rows: int, classes: int, scale: float, seed: int) -> torch.Tensor:
    return scale * torch.randn(rows, classes, generator=torch.Generator().manual_seed(seed))


def test_adamatch_relative_threshold_equals_usbs(usb) -> None:
    hook = usb.adamatch.utils.AdaMatchThresholdingHook()
    for seed in range(5):
        p_lb, p_ulb = torch.softmax(_logits(8, 10, 3.0, seed), 1), torch.softmax(_logits(32, 10, 3.0, seed + 50), 1)
        theirs = hook.masking(_usb_alg(usb, p_cutoff=0.95), p_lb, p_ulb, softmax_x_lb=False, softmax_x_ulb=False)
        ours = relative_confidence_mask(p_lb, p_ulb, 0.95)
        assert 0 < ours.mean() < 1
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("schedule", ["none", "linear", "log", "exp"])
def test_uda_tsa_threshold_equals_usbs(usb, schedule) -> None:
    tsa = usb.uda.UDA.TSA
    for step in (0, 1, 333, 999, 1000):
        assert tsa_threshold(schedule, step, 1000, 10) == pytest.approx(tsa(None, schedule, step, 1000, 10), abs=0)


def test_uda_tsa_mask_deviates_from_usb_on_confidently_wrong_examples(usb) -> None:
    """Deliberate deviation (docs/training.md, UDA): the paper's TSA drops a labeled example when the probability
    of its *correct* class exceeds eta_t; USB tests the *largest* probability. They agree on every row whose
    argmax is its label and may differ only on the others."""
    logits, targets = _logits(256, 10, 4.0, 7), torch.randint(10, (256,), generator=torch.Generator().manual_seed(8))
    eta = tsa_threshold("linear", 600, 1000, 10)
    usb_mask = torch.softmax(logits, -1).max(-1)[0].le(eta).float()        # uda.py's sup_mask, verbatim formula
    ours = tsa_mask(logits, targets, eta)
    right = logits.argmax(1) == targets
    assert torch.equal(ours[right], usb_mask[right])
    assert (ours[~right] != usb_mask[~right]).any()        # the deviation is real on this batch
    assert (ours >= usb_mask).all()                        # ours keeps every example USB keeps


def test_pseudolabel_rampup_equals_usbs() -> None:
    for it in (0, 1, 100, 399, 400, 401, 1000):
        theirs = np.clip(it / (0.4 * 1000), a_min=0.0, a_max=1.0)          # pseudolabel.py, verbatim formula
        assert rampup_weight(it, 1000, 0.4) == pytest.approx(float(theirs), abs=0)


def test_dash_threshold_mask_and_pseudo_labels_equal_usbs(usb) -> None:
    """USB's DashThresholdingHook over 60 steps (stages of 10 epochs x 1 step): rho, the hard-label switch at
    rho_min, the mask and the pseudo-labels equal ours at every step."""
    hook = usb.dash.utils.DashThresholdingHook(rho_min=0.05, gamma=1.27, C=1.0001)
    alg = _usb_alg(usb, rho_init=1.3, it=0, num_iter_per_epoch=1, T=0.5, use_hard_label=False)
    kw = {"gamma": 1.27, "c": 1.0001, "rho_min": 0.05, "steps_per_stage": 10}
    switched = 0
    for it in range(200):
        alg.it = it
        logits = _logits(64, 10, 2.0 + it / 40, it)
        theirs = hook.masking(alg, logits)
        rho = dash_threshold(it, 1.3, **kw)
        assert rho == pytest.approx(hook.rho, abs=0), it
        hard = rho == kw["rho_min"]
        assert hard == alg.use_hard_label, it
        targets = dash_targets(logits, hard=hard, temperature=0.5)
        assert torch.equal(dash_mask(logits, targets, rho), theirs), it
        switched += hard
    assert 0 < switched < 200
