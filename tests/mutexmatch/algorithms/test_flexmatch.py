"""FlexMatch's Curriculum Pseudo Labeling against the paper's formulas, worked by hand (the step-for-step equality
with USB is tests/mutexmatch/algorithms/usb/test_flexmatch_lockstep.py)."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.algorithms import StepInputs, build_algorithm
from mutexmatch.algorithms.base import TrainContext
from mutexmatch.algorithms.flexmatch import CurriculumThresholds


def cpl(selected: list[int], warmup: bool) -> CurriculumThresholds:
    state = CurriculumThresholds(len(selected), 3, warmup)
    state.selected = torch.tensor(selected)
    state._update_beta()
    return state


def test_learning_effects_are_normalised_by_the_best_class_or_with_warm_up_also_by_the_unused_samples():
    selected = [-1, -1, -1, 0, 0, 1]                     # sigma = (2, 1, 0), three unused of N = 6
    assert torch.allclose(cpl(selected, warmup=False).beta, torch.tensor([1.0, 0.5, 0.0]))
    assert torch.allclose(cpl(selected, warmup=True).beta, torch.tensor([2 / 3, 1 / 3, 0.0]))   # max(2, 6 - 3)


def test_beta_stays_while_every_sample_sits_in_one_bucket():
    assert torch.equal(cpl([-1] * 4, warmup=True).beta, torch.zeros(3))
    state = cpl([0, 0, 1, -1], warmup=False)
    state.selected = torch.tensor([2, 2, 2, 2])
    state._update_beta()
    assert torch.allclose(state.beta, torch.tensor([1.0, 0.5, 0.0]))       # the released code's rule: no update


def test_the_mask_uses_the_convex_mapping_of_the_previous_beta_then_records_confident_rows():
    state = cpl([-1, -1, 0, 0, 1, 1], warmup=False)      # beta = (1, 1, 0): T = (tau, tau, 0)
    probs = torch.tensor([[0.8, 0.1, 0.1], [0.1, 0.96, 0.0], [0.3, 0.3, 0.4]])
    mask = state.mask(probs, tau=0.95, pool_idx=torch.tensor([0, 1, 2]))
    assert mask.tolist() == [0.0, 1.0, 1.0]              # 0.8 < 0.95; 0.96 >= 0.95; class 2's threshold is 0
    assert state.selected.tolist() == [-1, 1, 0, 0, 1, 1]   # only max p >= tau is recorded (row 1 -> class 1)
    assert torch.allclose(state.beta, torch.tensor([2 / 3, 1.0, 0.0]))
    half = cpl([0, 0, 1, -1, -1, -1], warmup=False)      # beta = (1, 0.5, 0): T(1) = M(0.5) tau = 0.33 at 0.99
    probs = torch.tensor([[0.33, 0.34, 0.33], [0.34, 0.33, 0.33]])
    assert half.mask(probs, 0.99, torch.tensor([4, 5])).tolist() == [1.0, 0.0]


def test_state_round_trips_and_a_different_pool_is_refused():
    alg = build_algorithm("flexmatch", {"tau": 0.5}, TrainContext.synthetic(3, 6))
    alg.cpl.selected[2], alg.cpl.beta[1] = 1, 0.25
    other = build_algorithm("flexmatch", {"tau": 0.5}, TrainContext.synthetic(3, 6))
    other.load_state_dict(alg.state_dict())
    assert torch.equal(other.cpl.selected, alg.cpl.selected) and torch.equal(other.cpl.beta, alg.cpl.beta)
    with pytest.raises(ValueError, match="flexmatch state selected: .* does not match .*unlabeled pool"):
        build_algorithm("flexmatch", {}, TrainContext.synthetic(3, 7)).load_state_dict(alg.state_dict())


def test_flexmatch_needs_the_unlabeled_pool_size():
    with pytest.raises(ValueError, match="flexmatch: needs an unlabeled pool"):
        build_algorithm("flexmatch", {}, TrainContext.synthetic(3, 0))


@pytest.mark.parametrize("warmup", [True, False], ids=["warmup", "no-warmup"])
def test_thresh_warmup_switches_the_algorithms_class_thresholds(warmup):
    """algorithm.thresh_warmup reaches the thresholds: 4 of 6 pool samples unused, class 0 selected twice. With the
    warm-up beta(0) = 2/4 and T(0) = M(0.5) tau = tau/3; without it beta(0) = 1 and T(0) = tau."""
    alg = build_algorithm("flexmatch", {"tau": 0.9, "thresh_warmup": warmup}, TrainContext.synthetic(3, 6))
    alg.cpl.selected = torch.tensor([0, 0, -1, -1, -1, -1])
    alg.cpl._update_beta()
    want_beta = 0.5 if warmup else 1.0
    torch.testing.assert_close(alg.cpl.beta, torch.tensor([want_beta, 0.0, 0.0]))
    probs = torch.tensor([[0.5, 0.25, 0.25]])            # class 0 at 0.5: above tau/3 = 0.3, below tau = 0.9
    inp = StepInputs(feats=torch.zeros(3, 1), num_lb=1, num_ulb=1, targets_lb=torch.zeros(1, dtype=torch.long),
                     ulb_idx=torch.tensor([2]), step=0)
    assert alg.confidence_mask(probs, inp).tolist() == ([1.0] if warmup else [0.0])
