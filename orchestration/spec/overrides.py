"""The sweep YAML as a command amends it: ``--set key=value`` overrides, and the planning load that needs no data.

``--set base.data.root=/mnt/datasets`` edits the *raw* YAML mapping before validation, so every check, the spec
hash and each trial's config (and config hash) come out exactly as if the YAML file had been edited that way; a
finished trial is then skipped, or re-run, exactly as it would be after that edit. A value is read as YAML
(``1`` → int, ``true`` → bool, ``{a: 1}`` → mapping), a key as a dotted path into the YAML; a path under
``search.space`` may itself contain dots (``search.space.algorithm.tau.low``): at each level the longest existing
key wins.

A dry run and ``orchestration.status`` plan without the datasets (cost does not depend on pixels, status runs on
any machine that reaches the tracking server): :func:`load_sweep` with ``need_data=False`` accepts a spec whose only
problems are data folders that do not exist yet, and reports those folders instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mutexmatch.plugins import with_resolved_plugins
from orchestration import contract as C
from orchestration.spec.plan import SweepPlan, build_plan
from orchestration.spec.models import SpecError, SweepSpec
from orchestration.spec.sweepfile import deep_merge, parse_spec, read_spec_file, spec_hash

__all__ = ["LoadedSweep", "parse_override", "apply_overrides", "load_sweep", "plan_sweep"]

OPTION = C.SET_OPTION


@dataclass
class LoadedSweep:
    spec: SweepSpec
    overrides: tuple[str, ...] = ()
    missing_roots: list[str] = field(default_factory=list)  # data folders absent here (need_data=False only)
    settings_digest: str = ""         # contract.settings_digest of the amended YAML: where its expected runs are filed


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (``["a", "b"]``, the value read as YAML); raise SpecError naming the override. The rule is
    the contract's (:func:`orchestration.contract.parse_set_item`): the report reads ``--set`` with it too."""
    try:
        return C.parse_set_item(item)
    except ValueError as e:
        raise SpecError(str(e)) from None


def apply_overrides(raw: dict[str, Any], items: Sequence[str]) -> dict[str, Any]:
    """``raw`` (a parsed sweep YAML; edited in place and returned) with every ``key=value`` of ``items`` set
    (:func:`orchestration.contract.apply_set_items`)."""
    try:
        return C.apply_set_items(raw, items)
    except ValueError as e:
        raise SpecError(str(e)) from None


def _blame(lines: list[str], items: Sequence[str]) -> list[str]:
    """Each error line followed by the override it comes from, when it names the override's key (or, for a
    ``base.``/``search.base.`` key, the run-config path the trial errors name)."""
    keys = []
    for item in items:
        key = item.partition("=")[0].strip()
        short = re.sub(r"^(base|search\.base|search\.refit\.base|smoke|axes\.[^.]+\.[^.]+)\.", "", key)
        keys.append((item, key, short))
    out = []
    for line in lines:
        hits = [item for item, key, short in keys
                if key in line or f"{short}=" in line or line.startswith(key.split(".")[0] + ":")]
        out.append(line + (f" (from {OPTION} {hits[-1]})" if hits else ""))
    return out


def load_sweep(path: str | Path, project_dir: str | Path, overrides: Sequence[str] = (), *,
               need_data: bool = True) -> LoadedSweep:
    """The validated sweep spec of ``path`` with ``overrides`` applied; raise SpecError (one line per problem,
    each naming the override it comes from). ``need_data=False``: data folders that do not exist are no error
    (they are returned in ``missing_roots``); every other problem still is."""
    raw = apply_overrides(read_spec_file(path), overrides)
    digest = C.settings_digest(raw)   # of the YAML as written: what the report (which reads it so) looks up
    raw = with_resolved_plugins(raw, path)   # a plugin's path is relative to the YAML's folder
    try:
        return LoadedSweep(parse_spec(raw, project_dir), tuple(overrides), settings_digest=digest)
    except SpecError as e:
        # A typed fact, not the lines' wording (issue 29): set only when the data folders are the only problem.
        missing = list(e.missing_roots)
        if need_data or not missing:
            raise SpecError("\n".join(_blame(str(e).splitlines(), overrides))) from None
    # The schema passed (parse_spec validates it before the trial configs), so only the data folders are missing.
    return LoadedSweep(SweepSpec.model_validate(raw), tuple(overrides), missing, digest)


def plan_sweep(loaded: LoadedSweep, project_dir: str | Path, **kwargs: Any) -> SweepPlan:
    """:func:`orchestration.spec.plan.build_plan` of ``loaded``; with data folders missing, the trial configs are built
    with ``data.download: true`` (left out of the config hash, like ``data.root``), so hashes, iteration counts and
    the spec hash are those of the real launch while no config check looks for the data."""
    spec = loaded.spec
    if loaded.missing_roots and spec.base.get("data", {}).get("dataset") != "imagefolder":
        spec = spec.model_copy(update={"base": deep_merge(spec.base, {"data": {"download": True}})})
    plan = build_plan(spec, project_dir, **kwargs)
    plan.spec_hash = spec_hash(loaded.spec)
    plan.settings_digest = loaded.settings_digest
    return plan
