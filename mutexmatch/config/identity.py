"""What identifies a config: the field roles' derived lists (what the hash leaves out, what a search may not vary,
what orchestration owns) and the config hashes, current and legacy (issue 22), that stored runs are found by."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from mutexmatch.config.schema import LEGACY_ALGORITHM_SECTION, NO_RESULT, OWNED, RunConfig


def _field_extras() -> dict[str, dict[str, Any]]:
    """Dotted path → ``json_schema_extra`` of every RunConfig field; top-level fields first, then each section's
    in schema order (the order error messages list them in)."""
    top, nested = {}, {}
    for name, field in RunConfig.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            nested.update({f"{name}.{sub}": f.json_schema_extra or {} for sub, f in ann.model_fields.items()})
        else:
            top[name] = field.json_schema_extra or {}
    return {path: extra for path, extra in {**top, **nested}.items() if isinstance(extra, dict)}


def fields_with_role(role: str) -> tuple[str, ...]:
    """Dotted paths of the fields declared with ``role`` (:data:`NO_RESULT`, :data:`RESUMABLE`, :data:`OWNED`)."""
    return tuple(path for path, extra in _field_extras().items() if role in extra.get("roles", ()))


def owned_fields() -> dict[str, str]:
    """Dotted path → how orchestration sets it, for every :data:`OWNED` field."""
    return {path: extra["owned_by"] for path, extra in _field_extras().items() if OWNED in extra.get("roles", ())}


def unsearchable_fields() -> set[str]:
    """Fields a hyper-parameter search may not vary: those that do not change results (searching them would only
    re-run the same trial; e.g. ``train.keep_freed_memory``) and those orchestration sets per trial."""
    return set(fields_with_role(NO_RESULT)) | set(owned_fields())


_HASH_EXCLUDE = {tuple(path.split(".")) for path in fields_with_role(NO_RESULT)}


def _hash(d: dict[str, Any]) -> str:
    for path in _HASH_EXCLUDE:
        node = d
        for p in path[:-1]:
            node = node[p]
        node.pop(path[-1], None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def config_hash(cfg: RunConfig) -> str:
    """Short sha256 over the fields that change results (paths, device and display options excluded): the current
    rule, under which new runs are tagged. Whether a stored run or checkpoint IS this config: :func:`config_hashes`."""
    return _hash(cfg.to_dict())


def legacy_config_hash(cfg: RunConfig) -> str | None:
    """The hash the code before issue 22 gave this config (its algorithm section held every built-in algorithm's
    parameters, :data:`LEGACY_ALGORITHM_SECTION`, the chosen one's values over their defaults), or None where that
    section cannot express it (a parameter outside it not at its default)."""
    from mutexmatch.algorithms import ALGORITHMS

    from mutexmatch.params import DistAlignParams

    section = {f: v for f, v in cfg.to_dict()["algorithm"].items() if f != "name"}
    fields = ALGORITHMS[cfg.algorithm.name].Params.model_fields
    new = [f for f in DistAlignParams.model_fields if f not in LEGACY_ALGORITHM_SECTION]   # issue 22's own fields
    if any(f in section and section[f] != fields[f].default for f in new):
        return None
    # that code appended a parameter only a newly registered algorithm declared to the section
    legacy = {**LEGACY_ALGORITHM_SECTION, **{f: v for f, v in section.items() if f not in new}}
    return _hash({**cfg.to_dict(), "algorithm": {"name": cfg.algorithm.name, **legacy}})


def config_hashes(cfg: RunConfig) -> tuple[str, ...]:
    """Every config hash that identifies ``cfg``: the current rule's (:func:`config_hash`) first, then the legacy
    rule's (:func:`legacy_config_hash`, where it can express ``cfg``). THE rule for "was this stored run or
    checkpoint made with this config?": the sweep's skip (``orchestration.spec.plan.GridTrial.hashes``, used by launch,
    refit, status and summary), the expected runs the report reads, a search study's identity (its oldest hash,
    so a study keeps its name across hash rules) and the trainer's resume check all call it, so a store written
    before a hash-rule change re-runs nothing finished and resumes what was in flight."""
    legacy = legacy_config_hash(cfg)
    current = config_hash(cfg)
    return (current,) if legacy is None or legacy == current else (current, legacy)
