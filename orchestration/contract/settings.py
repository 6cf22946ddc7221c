"""Settings: a sweep YAML as a command amends it with ``--set`` (the sweep, status and report read it the same way,
so the same amended YAML gives the same digest), the digest, and the expected-runs record filed under it."""

from __future__ import annotations

import json
from typing import Iterable

from orchestration.contract.names import trial_key

__all__ = ["SET_OPTION", "MAX_FAILURES", "SETTINGS_EXCLUDED", "EXPECTED_RUNS_DIR", "parse_set_item", "apply_set_items",
           "settings_digest", "expected_runs_artifact", "other_settings_label", "other_settings_line"]


# A sweep YAML as a command amends it (``--set key=value``, the sweep, status and report alike), and which runs belong
# to those settings. The config-hash rule needs the trainer, which a report may not import; so the sweep records, on
# its parent run, the config hashes its plan expects per trial key (``expected_runs/<digest>.json``, under the tag
# ``mutexmatch.settings.<digest>``), and the report finds that record by the digest of the same amended YAML.
SET_OPTION = "--set"
# --max-failures' default: the restarts of a failed trial (the sweep's parser reads it before Ray and MLflow load)
MAX_FAILURES = 2
# prose, report layout and the resources a trial holds change no trial's config (`--set resources.gpu=1` on a
# machine with a GPU must find the runs of the same YAML launched elsewhere), nor what a trial's run records besides
# its results (`tracking`: system metrics)
SETTINGS_EXCLUDED = ("description", "tables", "figures", "resources", "tracking")
EXPECTED_RUNS_DIR = "expected_runs"


def _shown(item: str) -> str:
    """An item as a message echoes it, shortened past a line (a 30,000-value list made a 60 KB error line)."""
    from mutexmatch.checks import shown  # imported late: `import orchestration.contract` stays standard library

    return shown(item)


def parse_set_item(item: str) -> tuple[list[str], object]:
    """``a.b=value`` → (``["a", "b"]``, the value read as YAML); ``ValueError`` naming the item."""
    from mutexmatch.yamlfile import read_set_value  # the one reader of --set values (PyYAML: imported late)

    key, sep, text = item.partition("=")
    if not sep or not key.strip() or any(not p for p in key.strip().split(".")):
        raise ValueError(f"{SET_OPTION} {_shown(item)}: expected key=value with a dotted YAML key, e.g. "
                         f"{SET_OPTION} base.data.root=/mnt/datasets or {SET_OPTION} resources.gpu=1")
    return key.strip().split("."), read_set_value(item, text)


_ABSENT = object()


def _existing(node: dict, name: str) -> object:
    """The key of ``node`` spelled ``name`` (a YAML level name may be an int: ``k: {3: …}``), else ``_ABSENT``."""
    return next((k for k in node if str(k) == name), _ABSENT)


def _no_such_axis_or_level(walked: list[str], name: str, node: dict, item: str) -> None:
    """Refuse a path through an axis or level the YAML does not have (a typo made a new cell without a word); a
    new axis or level is set whole."""
    if walked == ["axes"]:
        what, known, new = "axis", "its axes", "axes.NAME"
    elif len(walked) == 2 and walked[0] == "axes":
        what, known, new = "level", "its levels", f"axes.{walked[1]}.NAME"
    else:
        return
    raise ValueError(f"{SET_OPTION} {_shown(item)}: {'.'.join(walked)} has no {what} {name!r}; {known}: "
                     f"{', '.join(map(str, node)) or 'none'} (a new {what} is set whole: {SET_OPTION} {new}={{...}})")


def _set_path(raw: dict, parts: list[str], value: object, item: str) -> None:
    node, i, walked = raw, 0, []
    while i < len(parts) - 1:
        # the longest key present at this level: search.space keys are dotted run-config paths
        j = next((j for j in range(len(parts), i, -1) if _existing(node, ".".join(parts[i:j])) is not _ABSENT), i + 1)
        if j == len(parts):
            break
        name = ".".join(parts[i:j])
        key = _existing(node, name)
        if key is _ABSENT:
            _no_such_axis_or_level(walked, name, node, item)
            key = name
        child = node.setdefault(key, {})
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ValueError(f"{SET_OPTION} {_shown(item)}: {'.'.join(parts[:j])}={child!r} is not a mapping, so "
                             f"it has no key {parts[j]!r}")
        node, i = child, j
        walked.append(name)
    last = ".".join(parts[i:])
    key = _existing(node, last)
    node[last if key is _ABSENT else key] = value


def apply_set_items(raw: dict, items: Iterable[str]) -> dict:
    """``raw`` (a parsed sweep YAML; edited in place and returned) with every ``key=value`` of ``items`` set: a key
    is a dotted path, and where a key itself holds dots (``search.space.algorithm.tau``) the longest one wins."""
    seen: dict[str, str] = {}
    for item in items:
        parts, value = parse_set_item(item)
        key = ".".join(parts)
        if key in seen:  # the last would silently win, while a key repeated in the YAML is refused
            raise ValueError(f"{SET_OPTION} {_shown(item)}: {key} is already set by "
                             f"{SET_OPTION} {_shown(seen[key])}; give each "
                             "key once")
        seen[key] = item
        _set_path(raw, parts, value, item)
    return raw


def settings_digest(raw: dict) -> str:
    """A short sha256 of a sweep YAML mapping as amended by ``--set`` (:data:`SETTINGS_EXCLUDED` left out):
    what the sweep files its expected runs under and the report looks them up by."""
    import hashlib

    kept = {k: v for k, v in raw.items() if k not in SETTINGS_EXCLUDED}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expected_runs_artifact(digest: str) -> str:
    """``expected_runs/<digest>.json``: ``{"grid": {trial key: [hashes]}, "search": {trial key: [search hashes]},
    "refit": {trial key: [hashes]}}`` (refit once the searches are done)."""
    return f"{EXPECTED_RUNS_DIR}/{digest}.json"


def other_settings_label(cell: str, fold: int | str, config_hash: str) -> str:
    """``method=fixmatch/fold0 (config 1a2b3c4d)``: one ignored run in :func:`other_settings_line`."""
    return f"{trial_key(cell, fold)} (config {config_hash[:8] or '?'})"


def other_settings_line(labels: list[str], shown: int = 6) -> str:
    """``3 runs of other settings ignored: a/fold0 (config 1a2b3c4d), …`` — one line, '' when there are none. The
    sweep's summary, the status and the report all say it so."""
    if not labels:
        return ""
    more = f", … ({len(labels) - shown} more)" if len(labels) > shown else ""
    return (f"{len(labels)} run{'s' if len(labels) != 1 else ''} of other settings ignored: "
            f"{', '.join(labels[:shown])}{more}")
