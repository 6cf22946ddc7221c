"""The extended step's machinery (an algorithm's :class:`~mutexmatch.algorithms.base.StepSpec`): making its views,
forwards that leave BatchNorm's running statistics alone, the teacher forward, and the step inputs.

The trainer and the tests build a step through :func:`make_views` and :func:`step_inputs` only, so what an
algorithm gets is the same everywhere. The default step (views lb, weak, strong; one concatenated forward) makes
exactly the augmentation calls, in the same order, as the step before the extended one existed: its batches and
weights are bit-identical.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from mutexmatch.algorithms.base import LABELED_VIEWS, StepInputs, StepSpec
from mutexmatch.data.augment import strong_augment, weak_augment

__all__ = ["bn_frozen", "bn_layers", "features_forward", "make_views", "rotate", "step_inputs", "teacher_forward"]


def bn_layers(model: nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers of ``model`` that keep running statistics: found once per model, not per forward."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


@contextlib.contextmanager
def bn_frozen(layers: list[_BatchNorm]) -> Iterator[None]:
    """BatchNorm ``layers`` (:func:`bn_layers`) normalise with the batch's statistics (in train mode, as always) but
    neither update their running mean and variance nor count the batch: USB's ``bn_controller.freeze_bn`` /
    ``unfreeze_bn`` (which saves and restores them) as a flag, without copies. (USB's covers BatchNorm2d and
    SyncBatchNorm; every BatchNorm here.)"""
    for m in layers:
        m.track_running_stats = False   # train mode: F.batch_norm gets no running statistics to update
    try:
        yield
    finally:
        for m in layers:
            m.track_running_stats = True


def features_forward(run: Callable[[Tensor], Tensor], model: nn.Module,
                     autocast: Callable[[], Any] = contextlib.nullcontext) -> Callable[..., Tensor]:
    """``StepInputs.forward``: ``forward(x, update_bn=True)`` = fp32 features ``run(x)`` (the model's forward,
    compiled or not) under ``autocast``; ``update_bn`` False leaves ``model``'s BatchNorm running statistics as they
    are (:func:`bn_frozen`)."""
    layers = bn_layers(model)

    def forward(x: Tensor, update_bn: bool = True) -> Tensor:
        with contextlib.nullcontext() if update_bn else bn_frozen(layers), autocast():
            feats = run(x)
        return at_least_fp32(feats)   # heads, thresholds and losses in fp32 (a bf16 probability is too coarse for tau)
    return forward


def at_least_fp32(x: Tensor) -> Tensor:
    """``x`` in fp32, or in float64 if it is: a float64 model (the data-parallel equality test's, where float32
    rounding would grow over free-running steps) keeps its precision through the heads and losses."""
    return x if x.dtype == torch.float64 else x.float()


def teacher_forward(teacher: nn.Module, autocast: Callable[[], Any] = contextlib.nullcontext,
                    run: Callable[[Tensor], Tensor] | None = None) -> Callable[..., Tensor]:
    """``StepInputs.teacher``: ``teacher(x, head=None)`` = the TPC logits of ``x`` by ``teacher`` (the EMA model),
    or ``head(teacher, features)``, as USB's Mean Teacher computes them: train mode (batch statistics), no gradient,
    no running statistics touched; fp32. ``run``: the features forward (default ``teacher`` itself; data parallel:
    its forward of this rank's rows, gathered)."""
    layers = bn_layers(teacher)
    run = teacher if run is None else run

    @torch.no_grad()
    def forward(x: Tensor, head: Callable[[nn.Module, Tensor], Tensor] | None = None) -> Tensor:
        was_training = teacher.training
        teacher.train()
        try:
            with bn_frozen(layers), autocast():
                feats = run(x)
        finally:
            teacher.train(was_training)
        feats = at_least_fp32(feats)
        return teacher.tpc(feats) if head is None else head(teacher, feats)
    return forward


def rotate(x: Tensor, k: Tensor) -> Tensor:
    """Image i of ``x`` (N, C, H, H) rotated by k_i x 90 degrees counter-clockwise (torchvision's ``rotate`` by
    90 k_i on a square image)."""
    turns = torch.stack([torch.rot90(x, i, dims=(-2, -1)) for i in range(4)])
    return turns[k, torch.arange(len(x), device=x.device)]


def make_views(spec: StepSpec, x_lb: Tensor, x_ulb: Tensor | None, aug: Mapping[str, Any],
               op_generator: torch.Generator | None, fused: bool = True) -> tuple[list[Tensor], Tensor | None]:
    """The step's views of the uint8 batches ``x_lb`` and ``x_ulb`` (None: no unlabeled data) in ``spec.views``
    order, each drawn from ``aug``'s generator (and ``op_generator``) in that order, and the rotation labels (or
    None). ``aug``: weak_augment's keywords (flip, pad, pad_mode, generator); ``fused``: strong_augment's (the same
    images either way)."""
    made: dict[str, Tensor] = {}
    rot = None
    for name in spec.made(x_ulb is not None):
        src = x_lb if name in LABELED_VIEWS else x_ulb
        if name == "rotated":
            g = aug["generator"]
            rot = torch.randint(4, (len(src),), generator=g, device=g.device)
            made[name] = rotate(made["strong"], rot.to(src.device))
        elif name in ("lb", "weak", "weak2"):
            made[name] = weak_augment(src, **aug)
        elif name == "medium":   # SequenceMatch's: one RandAugment operation (USB's RandAugment(1, 5))
            made[name] = strong_augment(src, **aug, num_ops=1, op_generator=op_generator, fused=fused)
        else:
            made[name] = strong_augment(src, **aug, op_generator=op_generator, fused=fused)
    return list(made.values()), rot


def step_inputs(spec: StepSpec, x: Tensor, *, num_lb: int, num_ulb: int, features: Callable[..., Tensor],
                teacher: Callable[[Tensor], Tensor] | None, **fields: Any) -> StepInputs:
    """The step inputs of normalised views ``x`` (concatenated in ``spec.views`` order): ``features(x)`` of all of
    them for a concat step, else the views by name with the forward functions. ``features(x, update_bn=True)``
    gives fp32 features (:func:`features_forward`), ``teacher`` (:func:`teacher_forward`) is handed on where the
    spec declares one; ``fields``: targets_lb, ulb_idx, step, ulb_pos, rot_label, lb_pos."""
    if spec.forward == "concat":
        return StepInputs(feats=features(x), num_lb=num_lb, num_ulb=num_ulb, **fields)
    images = dict(zip(spec.made(num_ulb > 0), x.split(spec.rows(num_lb, num_ulb))))
    return StepInputs(feats=None, num_lb=num_lb, num_ulb=num_ulb, images=images, forward=features,
                      teacher=teacher if spec.teacher else None, **fields)
