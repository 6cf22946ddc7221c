"""The backbone registry: :data:`BACKBONES`, filled by :func:`register_backbone` with each backbone's facts
(:class:`BackboneSpec`), built by name with :func:`build_backbone` (the config field ``model.backbone``) and listed
for ``docs/config.md`` by :func:`backbones_markdown`.

Every fact about a backbone is declared once, in the decorator beside its code; the config's validation and
documentation, the trainer's memory check and ``tests/mutexmatch/models/`` read them from here.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mutexmatch.checks import check_int, shown
from mutexmatch.models.base import Backbone

__all__ = ["BACKBONES", "BackboneFactory", "BackboneSpec", "backbones_markdown", "build_backbone",
           "register_backbone"]

BackboneFactory = Callable[..., Backbone]
"""``factory(num_classes, in_channels) -> Backbone``; ``factory(num_classes, in_channels, image_size)`` for a
backbone registered with ``patch`` (its architecture depends on the input size)."""

PARAM_COUNT_CLASSES = 10
"""``BackboneSpec.param_count`` counts the backbone built for this many classes (and RGB input)."""

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class BackboneSpec:
    """A registered backbone and its facts.

    Attributes:
        name: registry key (the value of ``model.backbone``).
        factory: ``factory(num_classes, in_channels)`` building a fresh, randomly initialised backbone.
        feat_dim: width of the pooled features (the input of the TPC, the TNC and an algorithm's heads).
        param_count: parameters of ``factory(10, 3)`` (:data:`PARAM_COUNT_CLASSES` classes, RGB), head included;
            ``tests/mutexmatch/models/`` builds every backbone and checks it.
        typical_image_size: the input size the architecture is used with (documentation and smoke tests only:
            every backbone ends in global average pooling and accepts any size >= ``min_image_size``).
        min_image_size: the smallest square input the architecture can process.
        activation_bytes_per_pixel: fp32 bytes autograd saves per image and pixel in one training step, for the
            trainer's memory check. Measured with ``benchmarks/step_memory.py`` (experiments/README.md's counts)
            less the weights that its batch-1 count scaled 64-fold, which leaves one figure per backbone at every
            measured size (WRN-28-8 at 32, 64 and 80 px: 14.5k), rounded down, as the check must refuse only what
            cannot fit. On an H200 at B=64, mu=7 the estimate stayed under the real count and peak (WRN-28-8 @ 80
            fp32: 82.4 GiB estimated, 82.9 saved, 84.8 peak allocated; bf16 41.2 / 41.5 / 42.8; ResNet-18 @ 96
            fp32 3.5 / 3.7 / 4.1; WRN-28-2 @ 32 fp32 3.4 / 3.4 / 3.6). ``None``: not measured; the memory check
            then counts the step's float32 input batch alone (a lower bound, so it refuses nothing that fits).
        description: one line naming the architecture and its source.
        patch: 0 for a backbone that ends in global average pooling (any size >= ``min_image_size`` runs, the
            architecture does not depend on it); else the side of its patches (a ViT): the factory then takes the
            image size and builds for it (the position embeddings), which must be a multiple of ``patch``, and the
            backbone runs at that size only.
    """

    name: str
    factory: BackboneFactory
    feat_dim: int
    param_count: int
    typical_image_size: int
    min_image_size: int
    activation_bytes_per_pixel: int | None
    description: str
    patch: int = 0

    def size_error(self, image_size: int) -> str | None:
        """What is wrong with building this backbone for ``image_size`` pixels (None: nothing)."""
        if image_size < self.min_image_size:
            return f"backbone {self.name!r} needs square inputs of at least {self.min_image_size} pixels"
        if self.patch and image_size % self.patch:
            return f"backbone {self.name!r} cuts images into {self.patch}-pixel patches: use a multiple of {self.patch}"
        return None


BACKBONES: dict[str, BackboneSpec] = {}


def register_backbone(
    name: str, *, feat_dim: int, param_count: int, typical_image_size: int, min_image_size: int = 1,
    activation_bytes_per_pixel: int | None, description: str, patch: int = 0,
) -> Callable[[BackboneFactory], BackboneFactory]:
    """Decorator registering ``factory(num_classes, in_channels) -> Backbone`` under ``name`` in BACKBONES with
    its facts (:class:`BackboneSpec`; ``activation_bytes_per_pixel`` must be given, ``None`` where not measured;
    ``patch`` > 0: ``factory(num_classes, in_channels, image_size)``).

    Raises:
        ValueError: a name that is taken or not lower-case ``[a-z][a-z0-9_]*``, a fact that is not a positive
            integer, ``min_image_size`` above ``typical_image_size``, or an empty description.
    """
    where = f"register_backbone({name!r})"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: name={shown(name)}: must match [a-z][a-z0-9_]* (a model.backbone value)")
    for field, value in (("feat_dim", feat_dim), ("param_count", param_count),
                         ("typical_image_size", typical_image_size), ("min_image_size", min_image_size)):
        check_int(f"{where}: {field}", value, low=1)
    check_int(f"{where}: patch", patch, low=0)
    if min_image_size > typical_image_size:
        raise ValueError(f"{where}: min_image_size={min_image_size}: must be <= typical_image_size="
                         f"{typical_image_size}")
    if activation_bytes_per_pixel is not None:
        check_int(f"{where}: activation_bytes_per_pixel", activation_bytes_per_pixel, low=1,
                  note=" or None (not measured)")
    if not isinstance(description, str) or not description.strip():
        raise ValueError(f"{where}: description={shown(description)}: must be a non-empty line")

    def decorator(factory: BackboneFactory) -> BackboneFactory:
        if name in BACKBONES:
            raise ValueError(f"{where}: name {name!r} is already registered (by {BACKBONES[name].factory!r})")
        BACKBONES[name] = BackboneSpec(name, factory, feat_dim, param_count, typical_image_size, min_image_size,
                                       activation_bytes_per_pixel, description, patch)
        return factory

    return decorator


def build_backbone(name: str, *, num_classes: int, in_channels: int = 3, image_size: int | None = None) -> Backbone:
    """Build the registered backbone ``name`` with a ``num_classes``-way head, for ``image_size`` pixels (None: its
    typical size).

    For a pooled backbone ``image_size`` is only validated against its minimum input size (the architecture does
    not depend on it); a backbone with patches (a ViT) is built for that size.

    Raises:
        ValueError: unknown ``name`` (the message lists the registered names for ``model.backbone``), fewer than 2
            classes, ``in_channels`` < 1, or an ``image_size`` below the backbone's minimum (or not a multiple of
            its patch).
    """
    if name not in BACKBONES:
        raise ValueError(f"model.backbone={name!r}: unknown backbone; registered: {', '.join(sorted(BACKBONES))}")
    spec = BACKBONES[name]
    check_int("num_classes", num_classes, low=2)
    check_int("in_channels", in_channels, low=1)
    if image_size is None:
        image_size = spec.typical_image_size
    if isinstance(image_size, bool) or not isinstance(image_size, int):
        raise ValueError(f"image_size={image_size!r}: must be an integer number of pixels")
    problem = spec.size_error(image_size)
    if problem:
        raise ValueError(f"image_size={image_size!r}: {problem}")
    return spec.factory(num_classes, in_channels, image_size) if spec.patch else spec.factory(num_classes, in_channels)


def backbones_markdown() -> list[str]:
    """The registered backbones and their facts as a Markdown table (for docs/config.md)."""
    lines = ["Registered backbones (`model.backbone`, `mutexmatch.models.BACKBONES`): the width of their pooled "
             f"features, their parameters with a {PARAM_COUNT_CLASSES}-way head on RGB input, the image size they "
             "are used with (the smallest they accept) and the activation bytes per image and pixel the memory "
             "check counts for a training step (—: not measured, the check counts the input batch alone):", "",
             "| `model.backbone` | architecture | features | parameters | image size (min) | activation B/px |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, spec in sorted(BACKBONES.items()):
        act = "—" if spec.activation_bytes_per_pixel is None else f"{spec.activation_bytes_per_pixel:,}"
        lines.append(f"| `{name}` | {spec.description} | {spec.feat_dim} | {spec.param_count:,} | "
                     f"{spec.typical_image_size} ({spec.min_image_size}) | {act} |")
    return lines
