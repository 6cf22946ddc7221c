"""CReST and CReST+ composed with FixMatch and ReMixMatch equal USB's ``class (CReST, Base)`` step for step (loss,
every term, every gradient, BatchNorm statistics, the mask and pseudo-labels, the alignment's p~(y) and tempered
target), over steps that cross a generation boundary: both sides start 5 steps into generation 2 of 6 (USB's ``it`` 5 of its
8 per generation, ours step 21 of 48) and move to generation 3 mid-run, USB's ``it`` reset to 0 and its alignment
temperature set as its ``CReST.train`` loop sets them, ours by ``start_generation`` (ReMixMatch's ramp-up restarts
on both sides); the alignment estimate carries over the boundary on both sides (USB's hook is built once). The
model's re-initialisation and the grown labeled set need the trainer's data pipeline
(tests/mutexmatch/training/test_generations.py); the selection of pool images and pseudo-labels is checked against
USB's own code on the same logits (``CReST.train``'s pseudo_label_list, then ``get_split``). USB calls ``np.math``, gone in NumPy 2: the reference
side runs with ``np.math`` patched to the ``math`` module; ours does not use it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mutexmatch.imb_algorithms.crest import crest_selection

from .test_fixmatch_lockstep import FixMatchLockstep
from .test_mixmatch_lockstep import ReMixMatchLockstep

GENS, PER_GEN, T_MIN, ALPHA = 6, 8, 0.3, 2.0


class _CReST:
    imb_name = usb_imb_name = "crest+"
    imb_params = {"dist_align_t": T_MIN, "alpha": ALPHA}
    crest_args = {"crest_num_gens": GENS, "crest_dist_align_t": T_MIN, "crest_pro_dist_align": True,
                  "crest_alpha": ALPHA}
    lb_counts = (8, 4, 2, 1)
    batchnorm = True
    steps, switch, first_gen = 6, 3, 2      # generation first_gen for `switch` steps, then the next one
    total_steps, first_step = GENS * PER_GEN, 2 * PER_GEN + PER_GEN - 3

    def prepare(self, ours, usb, g) -> None:
        super_prepare = getattr(super(), "prepare", None)
        if super_prepare is not None:
            super_prepare(ours, usb, g)
        assert ours.generation_steps == PER_GEN and ours.ctx.total_steps == PER_GEN    # 48 steps in 6 generations
        usb.num_train_iter, usb.it = PER_GEN, self.first_step - self.first_gen * PER_GEN    # USB's, per generation
        self.ours, self.calls = ours, 0
        if "DistAlignHook" in usb.hooks_dict:   # float64 from numpy promotes USB's step; the same values in float32
            da = usb.hooks_dict["DistAlignHook"]
            da.p_target = da.p_target.float()
        self._generation(usb, self.first_gen)

    def _generation(self, usb, gen: int) -> None:
        self.ours.start_generation(gen)
        usb.gen = gen
        if usb.pro_dist_align:               # CReST.train, "before train generation"
            cur = usb.gen / (usb.num_gens - 1)
            usb.cur_dist_align_t = (1.0 - cur) * 1.0 + cur * usb.dist_align_t
        else:
            usb.cur_dist_align_t = usb.dist_align_t

    def before_usb_step(self, usb) -> None:
        if self.calls == self.switch:
            assert usb.it == PER_GEN
            usb.it = 0                           # CReST.train at a generation's end
            self._generation(usb, self.first_gen + 1)
        self.calls += 1

    def state(self, ours, usb) -> dict:
        state = {"gen": (ours.gen, usb.gen)}
        if "DistAlignHook" in usb.hooks_dict:
            da = usb.hooks_dict["DistAlignHook"]
            p = da.p_target
            if usb.pro_dist_align:            # ProgressiveDistAlignEMAHook.dist_align's target
                p = p ** usb.cur_dist_align_t / (p ** usb.cur_dist_align_t).sum()
            state.update({"p_model": (ours.dist_align.running_mean, da.p_model), "p_target": (ours.dist_align.target(), p)})
        return state


class CReSTPlusFixMatch(_CReST, FixMatchLockstep):
    usb_args = {**FixMatchLockstep.usb_args, **_CReST.crest_args}


class CReSTPlusReMixMatch(_CReST, ReMixMatchLockstep):
    usb_args = {**ReMixMatchLockstep.usb_args, **_CReST.crest_args}
    min_mixed = 0    # ReMixMatch has no confidence mask


class CReSTFixMatch(CReSTPlusFixMatch):
    imb_name = usb_imb_name = "crest"
    imb_params = {"alpha": ALPHA}
    usb_args = {**CReSTPlusFixMatch.usb_args, "crest_pro_dist_align": False}


class CReSTReMixMatch(CReSTPlusReMixMatch):
    imb_name = usb_imb_name = "crest"
    imb_params = {"alpha": ALPHA}
    usb_args = {**CReSTPlusReMixMatch.usb_args, "crest_pro_dist_align": False}


@pytest.mark.parametrize("adapter", [CReSTPlusFixMatch, CReSTPlusReMixMatch, CReSTFixMatch, CReSTReMixMatch],
                         ids=lambda a: a.__name__)
def test_crest_equals_usb_step_for_step_across_a_generation(usb_lockstep, adapter):
    a = adapter()
    records = usb_lockstep(a)
    assert a.calls == a.steps and a.ours.gen == a.first_gen + 1
    if a.imb_name == "crest+":              # the temperature moved at the boundary: 1 - g/5 * 0.7
        assert a.ours.dist_align.t == pytest.approx(1 - (a.first_gen + 1) / 5 * (1 - T_MIN))
    elif a.name == "fixmatch":              # CReST composes no alignment with FixMatch
        assert a.ours.dist_align is None
    assert len(records) == a.steps


def _usb_selection(usb_harness_alg, logits: torch.Tensor, lb_targets: np.ndarray, monkeypatch):
    """USB's own generation end on ``logits``: ``CReST.train`` with no step left to run (its epochs done) and its
    evaluation returning ``logits``, then ``get_split`` with the pool positions as the pool's data."""
    usb = usb_harness_alg
    usb.start_gen, usb.num_gens, usb.start_epoch, usb.best_it = 0, 1, usb.epochs, 0
    monkeypatch.setattr(usb, "evaluate", lambda *a, **k: {"eval_ulb/logits": logits.numpy()})
    monkeypatch.setattr(usb, "call_hook", lambda *a, **k: None)
    usb.train()
    monkeypatch.setattr(np, "math", math, raising=False)     # USB's get_split calls np.math (NumPy < 2)
    n = len(logits)
    data, targets = usb.get_split(-1 - np.arange(len(lb_targets)), lb_targets, np.arange(n), np.zeros(n, np.int64),
                                  usb.pseudo_label_list)
    picked = data >= 0
    assert (data[~picked] == -1 - np.arange(len(lb_targets))).all()   # the labeled set, after the picks
    return data[picked], targets[picked]


@pytest.mark.parametrize("counts,alpha", [((8, 4, 2, 1), 2.0), ((20, 9, 5, 3), 3.0), ((1, 2, 4, 8), 3.0),
                                          ((5, 5, 5, 5), 1.0)])
def test_selection_equals_usbs_generation_end(usb_lockstep, monkeypatch, counts, alpha):
    from .conftest import TinyNet, UsbNet, build_usb
    lb_targets = np.repeat(np.arange(4), counts)
    usb = build_usb("fixmatch", UsbNet(TinyNet(6, 8, 4, 1.0)), {**FixMatchLockstep.usb_args, "crest_alpha": alpha,
                    "crest_pro_dist_align": False}, num_classes=4, ulb_size=300, lb_size=len(lb_targets),
                    total_steps=8, imb="crest", lb_targets=[int(c) for c in lb_targets])
    logits = torch.randn(300, 4, generator=torch.Generator().manual_seed(sum(counts))) * 3
    logits[:, 3] -= 1.0                                       # a rarer predicted class
    positions, labels = _usb_selection(usb, logits, lb_targets, monkeypatch)
    ours = crest_selection(logits, torch.as_tensor(counts), alpha)
    assert torch.equal(ours.positions, torch.from_numpy(positions)), "pool positions picked"
    assert torch.equal(ours.labels, torch.from_numpy(labels).long()), "pseudo-labels"
    # a balanced labeled set (gamma = 1) takes every pool image; a long tail fewer, and the fewest of class 3's
    assert len(ours.positions) == len(logits) if len(set(counts)) == 1 else 0 < len(ours.positions) < len(logits)
