"""What identifies a config: the field roles' derived lists (what the hash leaves out, what a search may not vary,
what orchestration owns) and the config hashes, current and legacy (issue 22), that stored runs are found by, and
the earlier ones of algorithms whose behaviour changed (issue 32: a parameter added since runs were stored, declared
with ``mutexmatch.params.earlier``; an algorithm whose step changed with no way back, ``Params.hash_revision``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from mutexmatch.config.schema import LEGACY_ALGORITHM_SECTION, NO_RESULT, OWNED, RunConfig
from mutexmatch.params import EARLIER


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


def _revised(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its algorithm's ``hash_revision`` in the algorithm section where it is above 0: an algorithm whose
    computation changed with no parameter to ask for the old one (Pseudo-Label's step, issue 32) is hashed apart from
    its stored runs, and every other algorithm's hash stays as it was. A config whose algorithm, dataset or
    backbone a plugin registered gets the plugin's source digest (``plugin_code``): other plugin code, another
    hash."""
    from mutexmatch.algorithms import ALGORITHMS

    from mutexmatch.plugins import config_plugin_digests

    revision = ALGORITHMS[d["algorithm"]["name"]].Params.hash_revision
    if revision:
        d["algorithm"]["hash_revision"] = revision
    if digests := config_plugin_digests(d):   # what plugin code trained it (issue 44); built-ins: unchanged
        d["plugin_code"] = digests
    return d


def config_hash(cfg: RunConfig) -> str:
    """Short sha256 over the fields that change results (paths, device and display options excluded): the current
    rule, under which new runs are tagged. Whether a stored run or checkpoint IS this config: :func:`config_hashes`."""
    return _hash(_revised(cfg.to_dict()))


def config_difference(stored: dict[str, Any], cfg: RunConfig, most: int = 4) -> str:
    """``algorithm.name fixmatch → pseudolabel, algorithm.tau 0.95 → 0.5``: the fields that change results and
    differ between a stored resolved config (a checkpoint's) and ``cfg``, at most ``most`` of them ('' for none)."""
    from mutexmatch.checks import shown
    from mutexmatch.dotted import flatten_dotted

    old, new = flatten_dotted(stored), flatten_dotted(cfg.to_dict())
    excluded = {".".join(p) for p in _HASH_EXCLUDE}
    keys = [k for k in sorted(old.keys() | new.keys(), key=lambda k: k != "algorithm.name")
            if k not in excluded and old.get(k) != new.get(k) and k in old and k in new]  # one algorithm's own
    keys += [k for k in sorted(old.keys() ^ new.keys()) if k not in excluded and not k.startswith("algorithm.")]
    more = f", … ({len(keys) - most} more)" if len(keys) > most else ""
    return ", ".join(f"{k} {shown(old.get(k))} → {shown(new.get(k))}" for k in keys[:most]) + more


def legacy_config_hash(cfg: RunConfig) -> str | None:
    """The hash the code before issue 22 gave this config (its algorithm section held every built-in algorithm's
    parameters, :data:`LEGACY_ALGORITHM_SECTION`, the chosen one's values over their defaults), or None where that
    section cannot express it (a parameter outside it not at its default)."""
    return _legacy_hash(_revised(cfg.to_dict()))


def _legacy_hash(d: dict[str, Any]) -> str | None:
    """:func:`legacy_config_hash` of a config's dict."""
    from mutexmatch.algorithms import ALGORITHMS

    from mutexmatch.params import DistAlignParams

    name = d["algorithm"]["name"]
    section = {f: v for f, v in d["algorithm"].items() if f != "name"}
    fields = ALGORITHMS[name].Params.model_fields
    new = [f for f in DistAlignParams.model_fields if f not in LEGACY_ALGORITHM_SECTION]   # issue 22's own fields
    # a field declared with `earlier` (issue 32) was computed at that value by the code of the time, not the default
    then = {f: (fields[f].json_schema_extra or {}).get(EARLIER, fields[f].default) for f in new if f in fields}
    if any(f in section and section[f] != then[f] for f in new):
        return None
    # that code appended a parameter only a newly registered algorithm declared to the section
    legacy = {**LEGACY_ALGORITHM_SECTION, **{f: v for f, v in section.items() if f not in new}}
    return _hash({**d, "algorithm": {"name": name, **legacy}})


def earlier_config_hashes(cfg: RunConfig) -> tuple[str, ...]:
    """The hashes (current rule, then legacy) the code before issue 32 gave this config, where its algorithm's (and
    its imbalance algorithm's) parameters added since (``earlier``) all ask for what that code computed
    (``AlgorithmParams.stored_before``); () where one asks for the new behaviour: a run stored under the old default is found by a config that asks for
    the old behaviour, never by one that takes the new default."""
    from mutexmatch.algorithms import ALGORITHMS

    params = ALGORITHMS[cfg.algorithm.name].Params.model_validate(dict(cfg.algorithm.__pydantic_extra__))
    added, imb_added = params.stored_before(), _imb_stored_before(cfg)
    if added is None or imb_added is None or not (added or imb_added):
        return ()
    d = _revised(cfg.to_dict())
    d["algorithm"] = {f: v for f, v in d["algorithm"].items() if f not in added}
    if imb_added:
        d["imb_algorithm"] = {f: v for f, v in d["imb_algorithm"].items() if f not in imb_added}
    legacy = _legacy_hash(json.loads(json.dumps(d)))
    return (_hash(d),) if legacy is None else (_hash(d), legacy)


def _imb_stored_before(cfg: RunConfig) -> tuple[str, ...] | None:
    """:meth:`AlgorithmParams.stored_before` of the imbalance algorithm's parameters (``earlier`` works there as in
    the algorithm section: TRAS's ``form``); () without an imb_algorithm section."""
    if cfg.imb_algorithm is None:
        return ()
    from mutexmatch.imb_algorithms import IMB_ALGORITHMS

    model = IMB_ALGORITHMS[cfg.imb_algorithm.name].imb_params_model
    return model.model_validate(dict(cfg.imb_algorithm.__pydantic_extra__)).stored_before()


def config_hashes(cfg: RunConfig) -> tuple[str, ...]:
    """Every config hash that identifies ``cfg``: the current rule's (:func:`config_hash`) first, then the legacy
    rule's (:func:`legacy_config_hash`, where it can express ``cfg``). THE rule for "was this stored run or
    checkpoint made with this config?": the sweep's skip (``orchestration.spec.plan.GridTrial.hashes``, used by launch,
    refit, status and summary), the expected runs the report reads, a search study's identity (its oldest hash,
    so a study keeps its name across hash rules) and the trainer's resume check all call it, so a store written
    before a hash-rule change re-runs nothing finished and resumes what was in flight. The earlier hashes of issue
    32 (:func:`earlier_config_hashes`) come last, the oldest last (a search study's identity)."""
    legacy = legacy_config_hash(cfg)
    hashes = [config_hash(cfg), legacy, *earlier_config_hashes(cfg)]
    kept = dict.fromkeys(h for h in reversed(hashes) if h is not None)   # a hash met twice keeps its oldest place
    return tuple(reversed(kept))
