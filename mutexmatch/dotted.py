"""Nested mappings addressed by dotted keys (``train.iterations``): merge, set and flatten, as config overrides,
sweep specs, MLflow params and report keys use them. Standard library only."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["deep_merge", "set_dotted", "flatten_dotted"]


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge recursively, anything else is replaced (both are copied)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(raw: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``raw`` with ``a.b`` set to ``value``."""
    *parents, leaf = path.split(".")
    override: dict[str, Any] = {leaf: value}
    for p in reversed(parents):
        override = {p: override}
    return deep_merge(raw, override)


def flatten_dotted(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``: every leaf under its dotted path (an empty mapping has no leaf)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(flatten_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
