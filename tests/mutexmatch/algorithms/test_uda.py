"""UDA (mutexmatch/algorithms/uda.py): TSA follows the run's total steps from the trainer context and keeps labeled
examples by their correct class's probability; the consistency target is sharpened with T. Equality with USB step
for step, and the deviations asserted: usb/test_uda_lockstep.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm
from mutexmatch.selection import tsa_threshold

from .test_adamatch import Heads


def _step(alg, step, seed=0):
    g = torch.Generator().manual_seed(seed)
    lb, w, s = 3 * torch.randn(8, 4, generator=g), 3 * torch.randn(16, 4, generator=g), torch.randn(16, 4, generator=g)
    y = torch.randint(4, (8,), generator=g)
    feats = torch.cat([lb, w, s])
    out = alg.compute(Heads(), StepInputs(feats=feats, num_lb=8, num_ulb=16, targets_lb=y, step=step,
                                          ulb_idx=torch.arange(16)))
    return out, lb, y, w, s


@pytest.mark.parametrize("schedule", ["linear", "log", "exp"])
def test_tsa_uses_the_total_steps_of_the_run(schedule) -> None:
    alg = build_algorithm("uda", {"tsa_schedule": schedule}, TrainContext.synthetic(4, 16, total_steps=100))
    for step in (0, 50, 99):
        out, lb, y, _, _ = _step(alg, step)
        eta = tsa_threshold(schedule, step, 100, 4)
        keep = (torch.softmax(lb, 1).gather(1, y[:, None]).squeeze(1) <= eta).float()
        torch.testing.assert_close(out.terms["sup"], (F.cross_entropy(lb, y, reduction="none") * keep).mean())


def test_consistency_target_is_the_tempered_weak_prediction() -> None:
    alg = build_algorithm("uda", {"tau": 0.5, "temperature": 0.4}, TrainContext.synthetic(4, 16))
    out, _, _, w, s = _step(alg, 0)
    target = torch.softmax(w / 0.4, 1)
    torch.testing.assert_close(out.soft_target, target)
    mask = (torch.softmax(w, 1).max(1).values >= 0.5).float()      # the mask reads the unsharpened p^w
    torch.testing.assert_close(out.mask, mask)
    torch.testing.assert_close(out.terms["p"], (-(target * F.log_softmax(s, 1)).sum(1) * mask).mean())
    assert 0 < mask.mean() < 1


def test_its_section_holds_only_its_parameters_with_usbs_defaults() -> None:
    """USB 0.3.2's defaults (p_cutoff 0.8, T 0.4, tsa_schedule none, ulb_loss_ratio 1.0), no distribution alignment."""
    alg = build_algorithm("uda", {}, TrainContext.synthetic(4, 16))
    assert alg.params.model_dump() == {"tau": 0.8, "temperature": 0.4, "tsa_schedule": "none", "lambda_p": 1.0}
    assert alg.dist_align is None
    with pytest.raises(ValueError, match=r"algorithm\.tsa_schedule.*'linear'"):
        build_algorithm("uda", {"tsa_schedule": "cosine"}, TrainContext.synthetic(4, 16))
    with pytest.raises(ValueError, match=r"algorithm\.dist_align"):
        build_algorithm("uda", {"dist_align": True}, TrainContext.synthetic(4, 16))
