"""FixMatch + CoSSL and ReMixMatch + CoSSL equal USB's (``class (CoSSL, Base)``) step for step across the warm-up:
loss, every term (``train/tea_loss``, 0 before the warm-up on our side, none logged on USB's), every gradient
including the teacher head's (none before the warm-up on both sides), BatchNorm's running statistics (the teacher's
EMA-model forwards run in train mode on both sides), the base's mask and pseudo-labels, and CoSSL's state: the
warmed-up teacher head and its EMA (USB's ``classifier_warmup`` vs ours on the same images, same torch/numpy seeds),
``mixup_prob``, the mixed teacher features, steps 13-18 of a 64-step run with 16-step epochs (warm-up: 16 Adam
steps) and ``warm_epoch`` 1 (the warm-up runs before step 16, as USB's ``before_train_epoch``).

Forms: ``usb`` against semilearn 0.3.2 as shipped (``mixup_prob[label_x.argmax()]``: entry 0 for every sample; a
reversed long tail (1, 2, 4, 8) makes entry 0 non-zero, so samples mix; a consistent one never mixes), ``fixed``
against USB's ``train_step`` with that one expression replaced by ``mixup_prob[label_x]`` (the sample's class).

USB's side in the light harness: its ``model`` and ``ema_model`` share the backbone (the harness's USB has one net), so
ours' EMA model is our net too; USB's ``ema_model`` gets a Linear TPC of our TPC's shape (``classifier_warmup``
re-initialises a copy of it; its logits are never read by the step), USB's model the harness's scaled TPC. The
teacher batches (class-balanced labeled, strong unlabeled) come from USB's ``loader_dict`` and the same lists feed
ours; Python's ``random`` is seeded alike before each side's draws.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import random
import textwrap
from unittest import mock

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from mutexmatch.imb_algorithms import IMB_ALGORITHMS
from mutexmatch.imb_algorithms.cossl import TeacherBatch, WarmupFeatures

from .test_fixmatch_lockstep import FixMatchLockstep
from .test_mixmatch_lockstep import ReMixMatchLockstep

WARM_AT = 16    # USB epochs of 16 steps (num_train_iter 64, epoch 4): warm-up before step 16, 16 Adam steps


class _UsbTpc(nn.Module):
    """USB's ``backbone.classifier`` on the harness's UsbNet: its scaled TPC (the net held unregistered, so the
    state dict keeps one name per weight)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "net", net)

    def forward(self, feat: Tensor) -> Tensor:
        return self.net.tpc(feat)


class _FeatNet(nn.Module):
    """USB's ``ema_model`` backbone: the shared UsbNet's features and a Linear TPC of our TPC's shape."""

    def __init__(self, inner: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.inner, self.classifier, self.num_features = inner, classifier, inner.num_features

    def forward(self, x: Tensor, **kwargs) -> dict:
        return {"feat": self.inner(x)["feat"]}


class _CoSSL:
    imb_name = usb_imb_name = "cossl"
    form = "usb"
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4 * WARM_AT, WARM_AT - 3, 6
    batchnorm = True
    cossl = {"warm_epoch": 1, "tfe_warm_epoch": 1, "tfe_warm_bs": 8, "max_lam": 0.6, "tfe_u_ratio": 2,
             "epoch_steps": WARM_AT}
    cossl_args = {"cossl_warm_epoch": 1, "cossl_tfe_warm_epoch": 1, "cossl_tfe_warm_bs": 8, "cossl_max_lam": 0.6,
                  "cossl_tfe_u_ratio": 2, "num_eval_iter": WARM_AT, "epoch": 4, "optim": "SGD", "momentum": 0.9}

    def __init__(self) -> None:
        self.imb_params = {**self.cossl, "form": self.form}
        g = torch.Generator().manual_seed(11)
        c, d = len(self.lb_counts), 6
        means = 2.0 * torch.randn(c, d, generator=g)
        self.lb_y = torch.repeat_interleave(torch.arange(c), torch.tensor(self.lb_counts))
        self.lb_x = means[self.lb_y] + torch.randn(len(self.lb_y), d, generator=g)
        self.ulb_w = means[torch.randint(c, (40,), generator=g)] + torch.randn(40, d, generator=g)
        self.ulb_s = self.ulb_w + 0.6 * torch.randn(40, d, generator=g)
        self.batches = [self._teacher_batch(g, means) for _ in range(self.steps)]
        self.usb_tea_inputs: list[Tensor] = []

    def _teacher_batch(self, g: torch.Generator, means: Tensor) -> TeacherBatch:
        y = torch.randint(len(self.lb_counts), (self.batch_size(),), generator=g)    # class-balanced
        x = means[y] + torch.randn(len(y), means.shape[1], generator=g)
        u = means[torch.randint(len(self.lb_counts), (2 * len(y),), generator=g)] + torch.randn(2 * len(y), 6,
                                                                                                generator=g)
        return TeacherBatch(x, y, y.tolist(), u)

    @staticmethod
    def batch_size() -> int:
        return 4

    @property
    def usb_args(self) -> dict:
        return {**super().usb_args, **self.cossl_args}

    def models(self, ours: nn.Module, usb_backbone: nn.Module):
        self._usb_backbone = usb_backbone
        usb_backbone.classifier = _UsbTpc(usb_backbone.net)
        if hasattr(super(), "models"):
            return super().models(ours, usb_backbone)
        return ours, usb_backbone, {n: f"net.{n}" for n in ours.state_dict()}

    def wrap(self, ours_net: nn.Module, usb, names: dict[str, str]):
        """Our teacher head attached as the trainer attaches it; USB's CoSSL_Net (built by its __init__) compared, its
        ``ema_model`` rebuilt over the shared backbone; its loaders, counts and EMA the warm-up reads."""
        from semilearn.imb_algorithms.cossl.cossl import CoSSL_Net
        cls = IMB_ALGORITHMS["cossl"]
        if not hasattr(ours_net, "heads"):
            ours_net.heads = nn.ModuleDict()
        ours_net.heads.update(cls.imb_heads(None, ours_net.head.in_features, len(self.lb_counts)))
        self._ours_net = ours_net
        self._ours_ema = nn.Module()
        self._ours_ema.heads = nn.ModuleDict(cls.imb_heads(None, ours_net.head.in_features, len(self.lb_counts)))
        width, classes = ours_net.head.in_features, ours_net.head.out_features
        usb.ema_model = CoSSL_Net(_FeatNet(self._usb_backbone, nn.Linear(width, classes)), classes)
        for m in (usb.model, usb.ema_model):
            object.__setattr__(m, "module", m)
        usb.model.teacher_classifier.register_forward_pre_hook(lambda _, args: self.usb_tea_inputs.append(args[0]))
        usb.lb_cnt_per_class = np.array(self.lb_counts)
        usb.dataset_dict = {"train_lb": [{"x_lb": x, "y_lb": int(y)} for x, y in zip(self.lb_x, self.lb_y)],
                            "train_ulb": [{"x_ulb_w": w, "x_ulb_s": s, "x_ulb_s_0": s}
                                          for w, s in zip(self.ulb_w, self.ulb_s)]}
        strong = "x_ulb_s_0" if self.name == "remixmatch" else "x_ulb_s"
        teach = self.batches[self.steps - (self.first_step + self.steps - WARM_AT):]
        usb.loader_dict = {"tfe_train_lb": [{"x_lb": b.x, "y_lb": b.y} for b in teach],
                           "tfe_train_ulb": [{strong: b.u} for b in teach]}
        usb.ema = mock.Mock()
        self._patch_form(usb)
        step = usb.train_step

        def logged_step(**kwargs):   # USB logs no train/tea_loss before the warm-up; ours logs 0
            out, log = step(**kwargs)
            return out, {"train/tea_loss": 0.0, **log}
        usb.train_step = logged_step
        names = {n: f"backbone.{u}" for n, u in names.items() if not n.startswith("heads.teacher.")}
        names.update({f"heads.teacher.{w}": f"teacher_classifier.{w}" for w in ("weight", "bias")})
        return usb.model, names

    def _patch_form(self, usb) -> None:
        """The fixed form's reference: USB's train_step with ``mixup_prob[label_x.argmax()]`` -> ``[label_x]``."""
        if self.form != "fixed":
            return
        import semilearn.imb_algorithms.cossl.cossl as usb_cossl
        src = textwrap.dedent(inspect.getsource(usb_cossl.CoSSL.train_step))
        fixed = src.replace("self.mixup_prob[label_x.argmax()]", "self.mixup_prob[label_x]")
        fixed = fixed.replace("super().train_step", "super(CoSSL, self).train_step")
        assert fixed.count("super(CoSSL, self)") == 2 and "label_x.argmax()" not in fixed
        space: dict = {}
        exec(compile(fixed, usb_cossl.__file__, "exec"), vars(usb_cossl), space)
        usb.train_step = space["train_step"].__get__(usb)

    def prepare(self, ours, usb, g) -> None:
        if hasattr(super(), "prepare"):
            super().prepare(ours, usb, g)
        self._ours = ours
        ours.ctx = dataclasses.replace(ours.ctx, ema_model=self._ours_net)

        def batches(step: int) -> TeacherBatch:
            random.seed(step)
            return self.batches[step - self.first_step]
        ours.teacher_batches = batches

    def before_usb_step(self, usb) -> None:
        """USB's before_train_epoch at the warm-up epoch, then ours on the same images and seeds; Python's random
        seeded for USB's step as ours is (``teacher_batches``)."""
        random.seed(usb.it)
        if usb.it != WARM_AT:
            return
        from semilearn.imb_algorithms.cossl.cossl import CoSSLParamUpdateHook
        torch.manual_seed(5)
        np.random.seed(5)
        with mock.patch.object(Tensor, "cuda", lambda t, *a, **k: t), \
                mock.patch.object(nn.Module, "cuda", lambda m, *a, **k: m):
            CoSSLParamUpdateHook().before_train_epoch(usb)
        net = copy.deepcopy(self._ours_net).eval()
        with torch.no_grad():
            lb = net(self.lb_x)
            feats = WarmupFeatures(lb, lb, self.lb_y, net(self.ulb_w), net(self.ulb_s))
        torch.manual_seed(5)
        np.random.seed(5)
        self._ours.warm_up(self._ours_net, self._ours_ema, feats, template=self._ours_net.head)
        for ours, theirs in ((self._ours_net.heads["teacher"], usb.model.teacher_classifier),
                             (self._ours_ema.heads["teacher"], usb.ema_model.teacher_classifier)):
            torch.testing.assert_close(ours.weight, theirs.weight)
            torch.testing.assert_close(ours.bias, theirs.bias)
        assert self._ours_net.evaluated_head == "teacher"
        self.usb_tea_inputs.clear()

    def state(self, ours, usb) -> dict:
        out = dict(super().state(ours, usb))
        if hasattr(usb, "mixup_prob"):
            out["mixup_prob"] = (torch.tensor(ours.mixup_prob), torch.tensor(usb.mixup_prob))
            out["ema teacher"] = (self._ours_ema.heads["teacher"].weight, usb.ema_model.teacher_classifier.weight)
        else:
            assert ours.mixup_prob is None
        return out


class CoSSLFixMatch(_CoSSL, FixMatchLockstep):
    ours_params = FixMatchLockstep.ours_params
    terms = {**FixMatchLockstep.terms, "tea": "train/tea_loss"}


class CoSSLFixMatchReversed(CoSSLFixMatch):
    lb_counts = (1, 2, 4, 8)


class CoSSLFixMatchFixed(CoSSLFixMatch):
    form = "fixed"


class CoSSLReMixMatch(_CoSSL, ReMixMatchLockstep):
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss", "tea": "train/tea_loss"}
    min_mixed = 0    # ReMixMatch has no confidence mask
    lb_counts = (1, 2, 4, 8)


class CoSSLReMixMatchFixed(CoSSLReMixMatch):
    form = "fixed"
    lb_counts = (8, 4, 2, 1)


def _check(adapter, records) -> torch.Tensor:
    """The teacher term 0 before the warm-up, positive after; our mixed features equal the input of USB's teacher
    head in its teacher loss (its last call of a step); returns which samples mixed."""
    warm = WARM_AT - adapter.first_step
    assert all(r.ours.terms["tea"] == 0 and "tea_feats" not in (r.ours.extra or {}) for r in records[:warm])
    teach = records[warm:]
    assert all(r.ours.terms["tea"] > 0 for r in teach)
    usb_inputs = adapter.usb_tea_inputs
    per_step = len(usb_inputs) // len(teach)
    for i, r in enumerate(teach):
        torch.testing.assert_close(r.ours.extra["tea_feats"], usb_inputs[per_step * (i + 1) - 1])
    return torch.cat([r.ours.extra["tea_mixed"] for r in teach])


@pytest.mark.parametrize("adapter", [CoSSLFixMatchReversed, CoSSLReMixMatch], ids=["fixmatch", "remixmatch"])
def test_usb_form_mixes_every_class_at_the_first_class_rate(usb_lockstep, adapter):
    """Reversed long tail: mixup_prob[0] = 7/8, every sample (any class) mixes with it."""
    a = adapter()
    mixed = _check(a, usb_lockstep(a))
    assert 0 < mixed.float().mean() < 1


def test_usb_form_never_mixes_under_a_consistent_long_tail(usb_lockstep):
    a = CoSSLFixMatch()
    mixed = _check(a, usb_lockstep(a))
    assert not mixed.any() and a._ours.mixup_prob[0] == 0 and max(a._ours.mixup_prob) > 0


@pytest.mark.parametrize("adapter", [CoSSLFixMatchFixed, CoSSLReMixMatchFixed], ids=["fixmatch", "remixmatch"])
def test_fixed_form_mixes_by_the_samples_class(usb_lockstep, adapter):
    """Consistent long tail: the head class never mixes, the others do (USB with the one expression fixed)."""
    a = adapter()
    records = usb_lockstep(a)
    mixed = _check(a, records)
    labels = torch.cat([b.y for b in a.batches[WARM_AT - a.first_step:]])
    assert not mixed[labels == 0].any() and mixed[labels != 0].any()
