"""The one YAML reader of the project: run configs, sweep YAMLs, a run folder's ``config.yaml`` and the reports.

``yaml.safe_load`` with differences that matter to users:

- numbers are read as people write them: YAML 1.2's float rule, so ``3e-4``, ``1E-5``, ``5.e-4`` and ``.5`` are
  floats (PyYAML's YAML 1.1 reads the first three as text), and YAML 1.1's octal ``0755`` (493) and base-60 ``1:00``
  (60), which YAML 1.2 does not have, are refused naming the line, as in ``--set``;

- a key repeated in one mapping (at any depth) is an error naming the key and both lines, instead of the last
  value silently winning (a duplicated sweep level would otherwise train the wrong method under the first name);
- every way a file can fail to be a YAML mapping (missing, a directory, binary or not UTF-8, a syntax error, empty,
  a list or scalar at top level) raises :class:`YamlFileError` with one line naming the file, and the line and
  column where the parser stopped;
- a file larger than :data:`MAX_BYTES` is refused before it is read (a 50 MB YAML took a minute to parse), and a
  document holding more than :data:`MAX_VALUES` values once its aliases are expanded before it is built (a 343-byte
  "billion laughs" file of nested ``*alias`` lists grew past 3 GB in whatever printed or copied it).

Standard library, PyYAML and :mod:`mutexmatch.checks` (itself standard library only), so the reports can use it
without importing torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from mutexmatch.checks import shown

__all__ = ["YamlFileError", "UniqueKeyLoader", "read_yaml", "read_yaml_mapping", "load_text", "read_set_value",
           "dump_yaml", "MAX_BYTES", "MAX_VALUES"]

# The experiment YAMLs are at most a few KB and hold at most ~400 values (scalars, lists and mappings) after their
# aliases are expanded; these bounds leave room for far larger configs and none for a bomb.
MAX_BYTES = 1 << 20
MAX_VALUES = 20_000


class YamlFileError(ValueError):
    """A file that cannot be read as the YAML mapping it should be; the message is one line naming the file."""


# Plain scalars YAML 1.1 (PyYAML) reads as numbers nobody typing them means: 010 is 8 (octal), 1:00 is 60 (base 60).
# YAML 1.2 has neither; they are refused, in a file as in --set, rather than read either way without a word.
_YAML11_SURPRISE = re.compile(r"^[-+]?(0[0-7_]+|[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?)$")
_SURPRISE_TAG = "tag:mutexmatch,2026:yaml11-number"
# YAML 1.1's integers without its octal and base 60: decimal (1_000 too), 0x hex and 0b binary.
_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0b[01_]+)$")
# YAML 1.2's float rule (3e-4, 1E-5, 5.e-4, .5; YAML 1.1 wants a dot and a signed exponent, so reads 3e-4 as text)
# less its bare integers, which stay ints; digits may hold underscores as YAML 1.1 allows.
_FLOAT = re.compile(r"""^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*\.[0-9_]*)(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X)


class _Yaml11Number(yaml.constructor.ConstructorError):
    """A plain scalar YAML 1.1 reads as an octal or base-60 number (:data:`_YAML11_SURPRISE`)."""


def _number_resolvers() -> dict[str, list]:
    """SafeLoader's implicit resolvers with its YAML 1.1 int and float rules replaced by :data:`_INT`,
    :data:`_FLOAT` and the refused :data:`_YAML11_SURPRISE`."""
    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    resolvers = {first: [(tag, rule) for tag, rule in rules if tag not in numbers]
                 for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    for tag, rule, first in ((_SURPRISE_TAG, _YAML11_SURPRISE, "-+0123456789"),
                             ("tag:yaml.org,2002:int", _INT, "-+0123456789"),
                             ("tag:yaml.org,2002:float", _FLOAT, "-+0123456789.")):
        for char in first:
            resolvers.setdefault(char, []).append((tag, rule))
    return resolvers


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated within one mapping (merge keys ``<<`` may still be
    overridden by explicit keys, as YAML intends), reads floats by YAML 1.2's rule and refuses YAML 1.1's octal
    and base-60 numbers."""

    yaml_implicit_resolvers = _number_resolvers()

    def construct_yaml11_number(self, node: yaml.ScalarNode) -> None:
        token = node.value
        raise _Yaml11Number(None, None, f"YAML 1.1 reads {token} as {yaml.safe_load(token)!r}; write the number you "
                            f"mean (or quote it, '{token}', for text)", node.start_mark)

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


UniqueKeyLoader.add_constructor(_SURPRISE_TAG, UniqueKeyLoader.construct_yaml11_number)


class _Dumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that quotes a string :class:`UniqueKeyLoader` would read as a number (``'1e5'``), so
    what the project writes reads back as it was."""

    yaml_implicit_resolvers = _number_resolvers()


def dump_yaml(data: Any) -> str:
    """``data`` as YAML text in the keys' own order, read back unchanged by :func:`load_text`."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


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
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise YamlFileError(f"{where}: is {size / 2**20:.1f} MiB, larger than the {MAX_BYTES >> 20} MiB a YAML "
                                "config may have; give the config file, not a data file")
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


def _expanded_values(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` holds with every alias expanded (an alias is the node it names, counted again each
    time it is used); linear in the size of the text, however large the expansion."""
    if id(node) not in sizes:
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        sizes[id(node)] = 1 + sum(_expanded_values(c, sizes) for c in children)
    return sizes[id(node)]


def _too_many_values(where: str, values: int, written: int) -> str:
    """The refusal of a document of ``values`` values (``written`` of them without expanding aliases): the fix
    differs when aliases make the count (a bomb) from when the text itself lists that many (data, not a config)."""
    if written > MAX_VALUES:
        return (f"{where}: holds {values:,} values, more than the {MAX_VALUES:,} a config may have; a config lists "
                "settings, not data: shorten its lists")
    return (f"{where}: holds {values:,} values once its aliases (*name) are expanded, more than the {MAX_VALUES:,} a "
            "config may have; write the values out instead of repeating aliases")


def load_text(text: str, where: str, located: bool = True) -> Any:
    """``text`` parsed by :class:`UniqueKeyLoader` within :data:`MAX_VALUES`; any failure is a
    :class:`YamlFileError` starting with ``where`` (and the line and column of a refused YAML 1.1 number, unless
    ``located`` is false: a one-line ``--set`` value)."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        values = _expanded_values(node, sizes)
        if values > MAX_VALUES:
            raise YamlFileError(_too_many_values(where, values, written=len(sizes)))
        return loader.construct_document(node)
    except _Yaml11Number as err:
        mark = err.problem_mark
        at = f": line {mark.line + 1}, column {mark.column + 1}" if located and mark is not None else ""
        raise YamlFileError(f"{where}{at}: {err.problem}") from None
    except yaml.YAMLError as err:
        raise _syntax_error(where, err) from None
    except RecursionError:
        raise YamlFileError(f"{where}: nested too deeply to be a config") from None
    finally:
        loader.dispose()


def read_set_value(item: str, text: str) -> Any:
    """The value of ``--set key=text`` (every command's ``--set`` reads it here): YAML as a scalar, list or mapping
    reads it (``true``, ``0.5``, ``[1, 2]``), empty is null, within the same bounds as a file, on one line (a control
    character such as a newline is refused: YAML would fold it into a space without a word). A plain ``010`` or
    ``1:00``, which YAML 1.1 turns into 8 and 60, is refused with what it would become."""
    where = f"--set {shown(item)}"
    control = next((i for i, c in enumerate(text) if c < " " and c != "\t" or c == "\x7f"), None)
    if control is not None:  # YAML folds a newline into a space: output_dir=a<newline>b would write to 'a b'
        raise YamlFileError(f"{where}: the value holds the control character {text[control]!r} at position "
                            f"{control + 1}; give the value on one line, without control characters")
    token = text.strip()
    if not token:
        return None
    try:
        return load_text(text, where, located=False)
    except YamlFileError as err:
        raise YamlFileError(str(err).replace(f"{where}: not valid YAML", f"{where}: the value is not valid YAML", 1)
                            ) from None


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """The parsed content of ``path`` (any YAML value; None for an empty document); raise :class:`YamlFileError`
    naming ``what`` and the file for anything that is not readable, valid YAML with unique keys, or too large."""
    path = Path(path)
    return load_text(_text(path, what), _where(path, what))


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
