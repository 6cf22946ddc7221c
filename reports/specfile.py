"""Read an experiment YAML for a report through the project's one YAML reader (:mod:`orchestration.contract.fileio`): a
key given twice is refused (PyYAML keeps the last one: a duplicated ``tables`` entry key or axis level would silently
replace the first), and a syntax error, an empty, binary or non-UTF-8 file, a folder, a list or a scalar is one line
naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestration.contract.fileio import read_yaml_mapping

__all__ = ["load_spec"]


def load_spec(path: str | Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; ``ValueError`` (one line) when it is missing, unreadable, not YAML, has a
    duplicate key or is not a mapping."""
    return read_yaml_mapping(path, "spec", expected="the experiment's mapping (name, axes, tables …; the format: "
                             "orchestration/README.md#the-sweep-yaml)")
