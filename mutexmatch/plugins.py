"""Plugins: algorithms, datasets and backbones that live outside this package (issue 44).

A plugin is a Python module or package whose import registers entries with ``@register_algorithm``,
``@register_dataset`` or ``@register_backbone``. It reaches the registries in one of two ways:

- a config's (or a sweep YAML's) ``plugins:`` list: a module name importable where the command runs
  (``my_methods``), or a path: a ``.py`` file or a package folder (a name with ``/`` or ending in ``.py``, or one
  that is there), relative to the YAML's folder (:func:`resolved_entries`; from ``--set``, to the current folder);
- an installed distribution's entry point in the group :data:`ENTRY_POINT_GROUP` (``[project.entry-points.
  "mutexmatch.plugins"] my_methods = "my_methods"`` in its ``pyproject.toml``), loaded by every config validation.

A path is imported under its own name (the file's stem, the folder's name), which is the name Ray's
``py_modules`` gives the copy a sweep ships to its trials: a path that is not there (a worker that never saw the
driver's files) is imported by that name instead. Which plugin registered each name is recorded
(:func:`provider`), with a digest of its source (every ``.py`` file of a package): the config hash of a run whose
algorithm, dataset or backbone a plugin registered includes that digest (:func:`config_plugin_digests`), so a run
trained by other plugin code is never taken for this one. A plugin that fails to import, or registers a name that
is taken, is one :class:`PluginError` line naming the file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping

__all__ = ["ENTRY_POINT_GROUP", "PLUGINS_ENV", "Plugin", "PluginError", "load_plugins", "load_entry_points",
           "resolved_entries", "with_resolved_plugins", "checked_entries", "listed", "provider",
           "config_plugin_digests", "loaded_plugins", "is_path_entry", "source_digest"]

ENTRY_POINT_GROUP = "mutexmatch.plugins"
# The modules of the plugins a sweep's driver loaded, comma-separated: set in the trials' Ray runtime environment
# (beside ``py_modules``, which ships their files), so a trial imports what the driver did, entry points included.
PLUGINS_ENV = "MUTEXMATCH_PLUGINS"
KINDS = ("algorithm", "dataset", "backbone")   # what a plugin registers, by the config field that names it
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class PluginError(ValueError):
    """A plugin that cannot be used: one line naming the entry (its file) and what went wrong."""


@dataclass
class Plugin:
    """A loaded plugin: how it was named (``entry``), its module, its source (file or package folder), the digest
    of that source and the names it registered (``(kind, name)``)."""
    entry: str
    module: str
    source: Path | None
    digest: str
    names: list[tuple[str, str]] = field(default_factory=list)


_LOADED: dict[str, Plugin] = {}                  # module name → plugin
_PROVIDERS: dict[tuple[str, str], Plugin] = {}   # (kind, name) → the plugin that registered it
_ENTRY_POINTS_LOADED = False


def is_path_entry(entry: str, base: Path | None = None) -> bool:
    """Whether a ``plugins:`` entry names a path (a ``/``, a ``.py`` ending, not a module name, or there under
    ``base``) rather than a module name."""
    return ("/" in entry or entry.endswith(".py") or not _MODULE.match(entry)
            or (base is not None and (base / entry).exists()))


def resolved_entries(entries: Any, base: Path) -> Any:
    """``entries`` (a ``plugins:`` value read from a YAML in folder ``base``) with every path made absolute against
    ``base``; anything that is not a list of strings is returned as it is, for the schema to name."""
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return entries
    return [str((base / Path(e).expanduser()).resolve()) if is_path_entry(e, base) else e for e in entries]


def source_digest(source: Path | None) -> str:
    """Short sha256 over a plugin's source: a file's bytes, or every ``.py`` file of a package folder (relative
    path and bytes, in path order; ``__pycache__`` left out); '' for a module without a file."""
    if source is None:
        return ""
    h = hashlib.sha256()
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*.py") if "__pycache__" not in p.parts)
    for p in files:
        h.update(str(p.relative_to(source.parent if source.is_file() else source)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _registries() -> dict[str, dict[str, Any]]:
    from mutexmatch.algorithms import ALGORITHMS
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.models import BACKBONES

    return {"algorithm": ALGORITHMS, "dataset": DATASETS, "backbone": BACKBONES}


def _defining_module(entry: Any) -> str:
    """The module that defined a registry entry: an algorithm class, a dataset instance, a backbone's facts."""
    if isinstance(entry, type):
        return entry.__module__
    factory = getattr(entry, "factory", None)
    return factory.__module__ if callable(factory) else type(entry).__module__


def _module_source(module: ModuleType) -> Path | None:
    paths = list(getattr(module, "__path__", []) or [])
    if len(paths) == 1:
        return Path(paths[0]).resolve()
    return Path(module.__file__).resolve() if getattr(module, "__file__", None) else None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "(no message)"
    where = ""
    tb = e.__traceback__
    while tb is not None:  # the innermost frame of the plugin's own code: the line to look at
        if not tb.tb_frame.f_code.co_filename.startswith(str(Path(__file__).parent)):
            where = f" ({Path(tb.tb_frame.f_code.co_filename).name}, line {tb.tb_lineno})"
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.lineno:
        where = f" (line {e.lineno})"
        text = e.msg
    return f"{type(e).__name__}: {text}{where}"


def _import_path(path: Path) -> ModuleType:
    name = path.stem if path.is_file() else path.name
    if name in sys.modules:   # a plugin file named yaml.py must not replace PyYAML
        raise PluginError(f"its module name {name!r} is taken by the module imported from "
                          f"{getattr(sys.modules[name], '__file__', None) or 'Python itself'}; rename the plugin")
    if path.is_file():
        spec = importlib.util.spec_from_file_location(name, path)
    else:
        init = path / "__init__.py"
        if not init.is_file():
            raise PluginError("is a folder without __init__.py: a plugin folder is a Python package")
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _forget_module(name)
        raise
    return module


def _forget_module(name: str) -> None:
    """Undo a plugin's failed import: its modules and what they registered before failing (a fixed plugin loads
    again in the same process without 'already registered')."""
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    for registry in _registries().values():
        for key in [k for k, v in registry.items() if _defining_module(v).split(".")[0] == name]:
            del registry[key]


def _import_name(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except BaseException:
        if name not in sys.modules:   # what it registered before failing goes too
            _forget_module(name)
        raise


def _load_one(entry: str, how: str) -> Plugin:
    """Import one plugin (a path or a module name) once per process; record what it registered."""
    path = Path(entry).expanduser().resolve() if is_path_entry(entry) else None
    name = (path.stem if path.suffix == ".py" else path.name) if path is not None else entry
    what = f"{how} {entry!r}"
    if path is not None and not path.exists() and importlib.util.find_spec(name) is None:
        raise PluginError(f"{what}: no such file or folder (a path in a YAML is relative to the YAML's folder)")
    known = _LOADED.get(name)
    if known is not None:
        if (path is not None and path.exists() and known.source not in (None, path)
                and source_digest(path) != known.digest):   # the same code elsewhere (Ray's copy) is the same plugin
            raise PluginError(f"{what}: a plugin module named {name!r} is already loaded from {known.source}; "
                              "give one of them another name")
        return known
    module = sys.modules.get(name) if path is None else None
    if module is None:
        try:
            module = _import_path(path) if path is not None and path.exists() else _import_name(name)
        except PluginError as e:
            raise PluginError(f"{what}: {e}") from None
        except ModuleNotFoundError as e:
            if e.name == name:
                raise PluginError(f"{what}: no module named {name!r} here (a module name must be importable where "
                                  "the command runs; a file or folder needs a path: ./name.py or ./name/)") from None
            raise PluginError(f"{what}: cannot import: {_one_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - any error in a user's module is said in one line naming it
            raise PluginError(f"{what}: cannot import: {_one_line(e)}") from None
    source = _module_source(module)
    plugin = Plugin(entry, name, source, source_digest(source))
    for kind, registry in _registries().items():
        for key, value in registry.items():
            owner = _defining_module(value)
            if owner == name or owner.startswith(name + "."):
                plugin.names.append((kind, key))
                _PROVIDERS[(kind, key)] = plugin
    _LOADED[name] = plugin
    return plugin


def load_plugins(entries: Iterable[str], how: str = "plugins:", error: type[Exception] = PluginError
                 ) -> list[Plugin]:
    """Import every entry of a ``plugins:`` list (paths absolute, or relative to the current folder), the installed
    entry points (:func:`load_entry_points`) and the modules :data:`PLUGINS_ENV` names (a sweep's trial); raise
    ``error`` (a :class:`PluginError` by default) with one line for the first that fails."""
    try:
        load_entry_points()
        listed = [_load_one(e, how) for e in entries]
        return listed + [_load_one(m, f"{PLUGINS_ENV}:") for m in os.environ.get(PLUGINS_ENV, "").split(",") if m]
    except PluginError as e:
        raise (e if error is PluginError else error(str(e))) from None


def checked_entries(v: Any) -> Any:
    """A ``plugins:`` value as the schemas take it: a list of non-empty strings, else one line saying what is."""
    if isinstance(v, list) and all(isinstance(e, str) and e.strip() for e in v):
        return v
    raise ValueError("must be a list of plugins: module names, or paths of .py files and package folders (e.g. "
                     "[./my_methods])")


def listed(raw: Mapping[str, Any]) -> list[str]:
    """A raw config's ``plugins:`` list ([] where it is missing or not a list of names: the schema names that)."""
    try:
        return checked_entries(raw.get("plugins", []))
    except ValueError:
        return []


def with_resolved_plugins(raw: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """``raw`` (a YAML file's mapping) with the paths of its ``plugins:`` made absolute against the file's folder."""
    if "plugins" in raw:
        raw["plugins"] = resolved_entries(raw["plugins"], Path(path).expanduser().resolve().parent)
    return raw


def load_entry_points() -> list[Plugin]:
    """Import, once per process, every installed entry point of the group :data:`ENTRY_POINT_GROUP` (its value a
    module, or ``module:attribute``: the module is what is imported)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return [p for p in _LOADED.values() if p.entry.startswith("entry point ")]
    _ENTRY_POINTS_LOADED = True
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", "?")
        try:
            out.append(_load_one(ep.module, f"entry point {ep.name!r} of {dist} ({ENTRY_POINT_GROUP}):"))
        except PluginError as e:
            _ENTRY_POINTS_LOADED = False
            raise e from None
    return out


def provider(kind: str, name: str) -> Plugin | None:
    """The plugin that registered ``name`` in the ``kind`` registry (:data:`KINDS`), None for a built-in."""
    return _PROVIDERS.get((kind, name))


def loaded_plugins() -> list[Plugin]:
    """Every plugin this process has loaded, in load order."""
    return list(_LOADED.values())


def config_plugin_digests(d: Mapping[str, Any]) -> dict[str, str]:
    """Module → source digest of the plugins that registered the algorithm, dataset or backbone a config's dict
    ``d`` names ({} for a config of built-ins only: its hash stays as it was)."""
    used = (("algorithm", d.get("algorithm", {}).get("name")), ("dataset", d.get("data", {}).get("dataset")),
            ("backbone", d.get("model", {}).get("backbone")))
    found = (provider(kind, name) for kind, name in used)
    return {p.module: p.digest for p in found if p is not None}
