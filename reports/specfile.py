"""Read an experiment YAML for a report: ``yaml.safe_load`` rules, plus two refusals a silent load would hide.

- A key given twice in one mapping is an error (PyYAML keeps the last one: a duplicated ``tables`` entry key or
  axis level would silently replace the first).
- A syntax error is one line naming the file, line and column, not PyYAML's multi-line traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["load_spec"]


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key repeated in one mapping."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue          # `<<: *anchor` then an explicit key is an override, not a duplicate
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (first on line {first}); a mapping holds each key once",
                key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _yaml_error_line(path: str, err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"spec {path!r}: {where}{problem}"


def load_spec(path: str | Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; ``ValueError`` (one line) when it is missing, unreadable, not YAML, has a
    duplicate key or is not a mapping."""
    p = Path(path)
    if not p.is_file():
        what = "a folder, not a file" if p.is_dir() else "file not found"
        raise ValueError(f"spec {str(path)!r}: {what}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"spec {str(path)!r}: cannot be read as UTF-8 text ({e.__class__.__name__})") from None
    try:
        spec = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ValueError(_yaml_error_line(str(path), e)) from None
    if not isinstance(spec, dict):
        got = "an empty file" if spec is None else f"a {type(spec).__name__}"
        raise ValueError(f"spec {str(path)!r}: must be a YAML mapping (name, axes, tables …), got {got}; the "
                         "format: orchestration/README.md#the-sweep-yaml")
    return spec
