"""The one YAML reader of the project: run configs, sweep YAMLs, a run folder's ``config.yaml`` and the reports.

``yaml.safe_load`` with two differences that matter to users:

- a key repeated in one mapping (at any depth) is an error naming the key and both lines, instead of the last
  value silently winning (a duplicated sweep level would otherwise train the wrong method under the first name);
- every way a file can fail to be a YAML mapping (missing, a directory, binary or not UTF-8, a syntax error, empty,
  a list or scalar at top level) raises :class:`YamlFileError` with one line naming the file, and the line and
  column where the parser stopped.

Standard library and PyYAML only, so the reports can use it without importing torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlFileError", "UniqueKeyLoader", "read_yaml", "read_yaml_mapping"]


class YamlFileError(ValueError):
    """A file that cannot be read as the YAML mapping it should be; the message is one line naming the file."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated within one mapping (merge keys ``<<`` may still be
    overridden by explicit keys, as YAML intends)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # non-scalar keys are refused by SafeLoader itself (unhashable)
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first_line[key]}, again at line {line}); "
                    "each key may appear once in a mapping", key_node.start_mark)
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def _where(path: Path, what: str) -> str:
    return f"{what} {str(path)!r}"


def _text(path: Path, what: str) -> str:
    """The file's text, or a one-line error for a missing file, a folder, an unreadable or a binary file."""
    where = _where(path, what)
    if path.is_dir():
        raise YamlFileError(f"{where}: is a directory, expected a YAML file")
    if not path.is_file():
        raise YamlFileError(f"{where}: file not found")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise YamlFileError(f"{where}: cannot be read ({err.strerror or err})") from None
    nul = data.find(b"\0")
    if nul >= 0:  # PyYAML would name it "unacceptable character #x0000" at some line; say what the file is
        raise YamlFileError(f"{where}: is a binary file (byte {nul} is NUL), expected a YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise YamlFileError(f"{where}: is not UTF-8 text (byte {err.start} is {data[err.start]:#04x}), expected a "
                            "YAML text file") from None


def _syntax_error(where: str, err: yaml.YAMLError) -> YamlFileError:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = " ".join(f"{problem}{f' ({context})' if context else ''}".split())
    if mark is None:
        return YamlFileError(f"{where}: not valid YAML: {detail}")
    return YamlFileError(f"{where}: not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {detail}")


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """The parsed content of ``path`` (any YAML value; None for an empty document); raise :class:`YamlFileError`
    naming ``what`` and the file for anything that is not readable, valid YAML with unique keys."""
    path = Path(path)
    where = _where(path, what)
    text = _text(path, what)
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise _syntax_error(where, err) from None


def read_yaml_mapping(path: str | Path, what: str = "YAML file", expected: str = "a mapping of keys") -> dict:
    """:func:`read_yaml` for files whose top level must be a mapping (every YAML the project reads); an empty file,
    a list or a scalar is a :class:`YamlFileError` saying what the top level should hold (``expected``)."""
    raw = read_yaml(path, what)
    if raw is None:
        raise YamlFileError(f"{_where(Path(path), what)}: is empty, expected {expected}")
    if not isinstance(raw, dict):
        kind = "a list" if isinstance(raw, list) else f"the {type(raw).__name__} {raw!r:.40}"
        raise YamlFileError(f"{_where(Path(path), what)}: top level is {kind}, expected {expected}")
    return raw
