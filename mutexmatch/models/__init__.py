"""Backbones θ and the MutexMatch network (θ + true-positive classifier P + true-negative classifier N).

What each module holds: the backbone contract in :mod:`~mutexmatch.models.base` (:class:`Backbone`,
:class:`PooledBackbone`); the registry in :mod:`~mutexmatch.models.registry` (:data:`BACKBONES`,
:func:`register_backbone`, :func:`build_backbone`); :class:`MutexNet` and :func:`build_model` in
:mod:`~mutexmatch.models.net`; then one module per architecture family (``wrn``, ``cnn13``, ``resnet``,
``small_cnn``, ...).

Importing this package imports every module in it (alphabetically), and each architecture module registers its
backbones with ``@register_backbone(name, feat_dim=..., param_count=..., typical_image_size=...,
activation_bytes_per_pixel=..., description=...)``: adding a backbone is adding one module here, nothing else. The
config field ``model.backbone`` and its documentation, the trainer's memory check and the tests in
``tests/mutexmatch/models/`` read the registry.

A backbone returns pooled features from :meth:`Backbone.forward_features` and owns its final linear layer
:attr:`Backbone.classifier`, which *is* the TPC P of the paper; :class:`MutexNet` adds the TNC N.
"""
from __future__ import annotations

import importlib
import pkgutil

from mutexmatch.models.base import Backbone, PooledBackbone
from mutexmatch.models.net import MutexNet, build_model
from mutexmatch.models.registry import (BACKBONES, BackboneSpec, backbones_markdown, build_backbone,
                                        register_backbone)

__all__ = ["BACKBONES", "Backbone", "BackboneSpec", "MutexNet", "PooledBackbone", "backbones_markdown",
           "build_backbone", "build_model", "register_backbone"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")
