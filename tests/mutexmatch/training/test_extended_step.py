"""The extended step (issue 23): view declarations, views made from the generators, BatchNorm left alone, the
teacher forward, extra heads seen by the optimiser, the EMA and checkpoints."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.functional as TF
from torch import nn

from mutexmatch.algorithms import ALGORITHMS, Algorithm, StepSpec, register_algorithm
from mutexmatch.data.augment import strong_augment, weak_augment
from mutexmatch.training.extended_step import (bn_frozen, bn_layers, features_forward, make_views, rotate, step_inputs,
                                      teacher_forward)

AUG = {"flip": True, "pad": 2, "pad_mode": "reflect"}


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(3 * 6 * 6, 4))


def test_the_default_views_are_the_former_three_augmentation_calls():
    """lb, weak, strong: the same calls on the same generators in the same order as the step before issue 23."""
    x_lb, x_u = torch.randint(0, 256, (3, 1, 8, 8), dtype=torch.uint8), torch.randint(0, 256, (5, 1, 8, 8), dtype=torch.uint8)
    g, h = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    views, rot = make_views(StepSpec(), x_lb, x_u, {**AUG, "generator": g}, h)
    g2, h2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    former = [weak_augment(x_lb, **AUG, generator=g2), weak_augment(x_u, **AUG, generator=g2),
              strong_augment(x_u, **AUG, generator=g2, op_generator=h2)]
    assert rot is None and all(torch.equal(a, b) for a, b in zip(views, former, strict=True))
    assert torch.equal(g.get_state(), g2.get_state()) and torch.equal(h.get_state(), h2.get_state())
    lb_only, _ = make_views(StepSpec(), x_lb, None, {**AUG, "generator": torch.Generator().manual_seed(1)}, None)
    assert len(lb_only) == 1 and torch.equal(lb_only[0], former[0])


def test_make_views_hands_the_fused_choice_to_the_strong_view(monkeypatch):
    """BatchSource.fused_augment (benchmarks/train_step.py's ours+per_op_augment) reaches strong_augment."""
    import mutexmatch.training.extended_step as es
    seen = []
    monkeypatch.setattr(es, "strong_augment", lambda x, **kw: seen.append(kw["fused"]) or x)
    x = torch.zeros(2, 1, 8, 8, dtype=torch.uint8)
    for fused in (False, True):
        make_views(StepSpec(), x, x, {**AUG, "generator": torch.Generator()}, None, fused)
    assert seen == [False, True]


def test_medium_view_is_the_strong_augmentation_with_one_operation():
    """SequenceMatch's medium view (issue 43): USB's RandAugment(1, 5), here strong_augment with num_ops 1, drawn in
    the declared order from the same generators."""
    spec = StepSpec(views=("lb", "weak", "medium", "strong"))
    x_lb, x_u = torch.randint(0, 256, (3, 1, 8, 8), dtype=torch.uint8), torch.randint(0, 256, (5, 1, 8, 8), dtype=torch.uint8)
    views, _ = make_views(spec, x_lb, x_u, {**AUG, "generator": torch.Generator().manual_seed(1)},
                          torch.Generator().manual_seed(2))
    g, h = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    expected = [weak_augment(x_lb, **AUG, generator=g), weak_augment(x_u, **AUG, generator=g),
                strong_augment(x_u, **AUG, num_ops=1, generator=g, op_generator=h),
                strong_augment(x_u, **AUG, generator=g, op_generator=h)]
    assert all(torch.equal(a, b) for a, b in zip(views, expected, strict=True))
    three = strong_augment(x_u, **AUG, generator=torch.Generator().manual_seed(9), op_generator=torch.Generator())
    one = strong_augment(x_u, **AUG, num_ops=1, generator=torch.Generator().manual_seed(9), op_generator=torch.Generator())
    assert not torch.equal(one, three)


def test_rotated_view_is_the_strong_view_turned_by_its_label():
    spec = StepSpec(views=("lb", "weak", "strong", "rotated"))
    x_u = torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8)
    views, rot = make_views(spec, x_u[:2], x_u, {**AUG, "generator": torch.Generator().manual_seed(0)},
                            torch.Generator().manual_seed(1))
    assert rot.shape == (16,) and rot.dtype == torch.int64 and set(rot.tolist()) <= {0, 1, 2, 3} and len(set(rot.tolist())) > 1
    for img, turned, k in zip(views[2], views[3], rot.tolist()):
        assert torch.equal(turned, TF.rotate(img, 90 * k))     # torchvision's rotation, as USB's ReMixMatch data
    assert torch.equal(rotate(views[2][:1], torch.tensor([1])), views[2][:1].rot90(1, (-2, -1)))


@pytest.mark.parametrize("views,match", [
    (("weak", "lb"), "must start with 'lb'"), (("lb", "weak", "weak"), "named twice"),
    (("lb", "weak", "lb_strong"), "labeled views"), (("lb", "rotated", "strong"), "'rotated' rotates"),
    (("lb", "blurred"), "'blurred' is not a view")])
def test_bad_declarations_are_refused_at_registration(views, match):
    with pytest.raises(ValueError, match=match):
        register_algorithm("bad_views")(type("Bad", (Algorithm,), {"terms": ("sup",), "step": StepSpec(views=views)}))
    with pytest.raises(ValueError, match="teacher=True: needs forward='separate'"):
        register_algorithm("bad_teacher")(type("Bad", (Algorithm,), {"terms": ("sup",),
                                                                     "step": StepSpec(teacher=True)}))
    assert not {"bad_views", "bad_teacher"} & set(ALGORITHMS)


def test_frozen_batchnorm_normalises_by_the_batch_and_keeps_its_statistics():
    """USB's bn_controller (save, forward, restore) as a flag: same output, statistics and count untouched."""
    net = _net().train()
    x = torch.randn(6, 1, 8, 8)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with bn_frozen(bn_layers(net)):
        out = net(x)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert torch.equal(out, net(x)) and not torch.equal(before["1.running_mean"], net[1].running_mean)
    assert net[1].track_running_stats and int(net[1].num_batches_tracked) == 1
    forward = features_forward(net, net)
    with torch.no_grad():
        kept = net[1].running_mean.clone()
        forward(x, update_bn=False)
        assert torch.equal(kept, net[1].running_mean)


def test_the_teacher_uses_batch_statistics_without_gradient_or_state_changes():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head = _net()[:3], nn.Linear(108, 4)

        def forward(self, x):
            return self.body(x)

        def tpc(self, f):
            return self.head(f)

    teacher = Net().eval()
    state = {k: v.clone() for k, v in teacher.state_dict().items()}
    x = torch.randn(6, 1, 8, 8)
    logits = teacher_forward(teacher)(x)
    assert not logits.requires_grad and not teacher.training
    assert all(torch.equal(state[k], v) for k, v in teacher.state_dict().items())
    with torch.no_grad():
        assert torch.equal(logits, teacher.train().head(teacher.body(x)))     # train mode: batch statistics


def test_separate_step_inputs_hand_the_views_by_name():
    spec = StepSpec(views=("lb", "weak", "weak2"), forward="separate")
    x = torch.arange(2 + 3 + 3, dtype=torch.float).view(-1, 1)
    inp = step_inputs(spec, x, num_lb=2, num_ulb=3, features=lambda t, update_bn=True: t, teacher=None,
                      targets_lb=torch.zeros(2, dtype=torch.long), ulb_idx=torch.arange(3), step=0)
    assert inp.feats is None and list(inp.images) == ["lb", "weak", "weak2"]
    assert inp.view("weak2").flatten().tolist() == [5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="no view 'strong'"):
        inp.view("strong")
    assert spec.images_per_step(4, 2, True) == 4 + 2 * 8 and StepSpec().images_per_step(4, 2, True) == 4 * (1 + 2 * 2)
