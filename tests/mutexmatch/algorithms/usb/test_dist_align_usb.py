"""mutexmatch.algorithms.alignment against USB's own distribution-alignment hooks (semilearn 0.3.2; the harness is
conftest.py): the ``usb`` ratio equals ``DistAlignQueueHook`` / ``DistAlignEMAHook`` step for step, for each target
(uniform, the labeled histogram = USB's ``gt``, the model's labeled predictions = USB's ``model``); our default
``filled`` ratio differs from it while the queue fills, as docs/training.md says."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch

from mutexmatch.algorithms.alignment import DistributionAlignment

C, WINDOW, MOMENTUM = 5, 4, 0.9


@pytest.fixture(scope="module")
def hooks(usb_lockstep):
    """USB's hook module (importing semilearn through the harness, or skipping with the make command)."""
    return importlib.import_module("semilearn.algorithms.hooks")


@pytest.mark.parametrize("estimate", ["queue", "ema"])
@pytest.mark.parametrize("target", ["uniform", "labeled", "model"])
def test_usb_ratio_equals_usbs_hooks(hooks, estimate, target) -> None:
    counts = torch.tensor([1, 2, 3, 4, 5])
    usb_target = {"uniform": "uniform", "labeled": "gt", "model": "model"}[target]
    prior = (counts / counts.sum()).numpy() if target == "labeled" else None
    theirs = (hooks.DistAlignQueueHook(C, WINDOW, usb_target, prior) if estimate == "queue"
              else hooks.DistAlignEMAHook(C, MOMENTUM, usb_target, prior))
    ours = DistributionAlignment(C, WINDOW, estimate=estimate, momentum=MOMENTUM, target=target, ratio="usb",
                                 labeled_prior=counts)
    filled = DistributionAlignment(C, WINDOW, estimate=estimate, momentum=MOMENTUM, target=target,
                                   labeled_prior=counts)
    alg, g, gaps = SimpleNamespace(distributed=False, world_size=1), torch.Generator().manual_seed(0), []
    for _ in range(2 * WINDOW):
        p = torch.softmax(4 * torch.randn(8, C, generator=g), 1)
        p_lb = torch.softmax(4 * torch.randn(4, C, generator=g), 1)
        expected = theirs.dist_align(alg, p.clone(), p_lb.clone())
        torch.testing.assert_close(ours(p, p_lb), expected, rtol=1e-5, atol=1e-7)
        gaps.append((filled(p, p_lb) - expected).abs().max().item())
    if estimate == "queue":
        assert max(gaps[:WINDOW - 1]) > 1e-6   # the named deviation: our mean over the filled slots only

