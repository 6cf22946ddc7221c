"""A run config from a YAML file and ``--set`` overrides: reading the file (refusing a sweep YAML), applying the
overrides, and a ``--set algorithm.name`` that switches algorithm."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Sequence

from mutexmatch.checks import shown
from mutexmatch.config.schema import SWEEP_COMMAND, SWEEP_ONLY_KEY, ConfigError, RunConfig, parse_config
from mutexmatch.plugins import with_resolved_plugins
from mutexmatch.yamlfile import YamlFileError, read_set_value, read_yaml_mapping


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides to a raw config mapping (values read by :func:`mutexmatch.yamlfile
    .read_set_value`); a key given twice is refused, as a key repeated in a YAML file is."""
    out = copy.deepcopy(raw)
    seen: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {shown(item)}: expected KEY=VALUE with a dotted key such as algorithm.tau=0.9")
        if key.strip() in seen:
            raise ConfigError(f"--set {shown(item)}: {key.strip()} is already set by "
                              f"--set {shown(seen[key.strip()])}; give "
                              "each key once")
        seen[key.strip()] = item
        parts = key.strip().split(".")
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {shown(item)}: {p} is not a section")
            node = nxt
        node[parts[-1]] = _override_value(item, value)
    return _switch_algorithm(raw, out, [k for k in seen if k.startswith("algorithm.")])


def _switch_algorithm(raw: dict[str, Any], out: dict[str, Any], set_keys: list[str]) -> dict[str, Any]:
    """A ``--set algorithm.name=X`` that changes the file's algorithm keeps only the file's parameters X takes
    (``experiments/runs/digits.yaml`` is a MutexMatch run whose ``k`` FixMatch has no use for); a parameter given by
    ``--set`` itself is always checked, so ``--set algorithm.name=fixmatch --set algorithm.k=3`` is still refused."""
    from mutexmatch.algorithms import ALGORITHMS

    before, after = raw.get("algorithm"), out.get("algorithm")
    if ("algorithm.name" not in set_keys or not isinstance(before, dict) or not isinstance(after, dict)
            or before.get("name") == after.get("name") or after.get("name") not in ALGORITHMS):
        return out
    takes = ALGORITHMS[after["name"]].Params.model_fields
    given = {k.split(".", 1)[1] for k in set_keys}
    out["algorithm"] = {k: v for k, v in after.items() if k == "name" or k in given or k in takes}
    return out


def _override_value(item: str, value: str) -> Any:
    """An override's value as YAML reads a scalar (``true``, ``0.5``, ``[1, 2]``); empty is null."""
    try:
        return read_set_value(item, value)
    except YamlFileError as e:
        raise ConfigError(str(e)) from None


def read_config_file(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """The raw mapping of a run config YAML (``--config``, or a run folder's ``config.yaml`` on ``--resume``); raise
    :class:`ConfigError` with one line naming the file for anything that is not a YAML mapping with unique keys, and
    for a sweep YAML (naming the sweep command)."""
    try:
        raw = read_yaml_mapping(path, what, expected=f"a mapping of sections ({', '.join(RunConfig.model_fields)})")
    except YamlFileError as e:
        raise ConfigError(str(e)) from None
    if SWEEP_ONLY_KEY in raw:
        raise ConfigError(f"{what} {str(path)!r}: is a sweep YAML (it has `{SWEEP_ONLY_KEY}:`), not a run config; "
                          f"run it with `{SWEEP_COMMAND} {path}`")
    return with_resolved_plugins(raw, path)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Load a YAML run config (or the defaults when ``path`` is None), apply overrides, validate once."""
    raw = {} if path is None else read_config_file(path)
    return parse_config(apply_overrides(raw, overrides))
