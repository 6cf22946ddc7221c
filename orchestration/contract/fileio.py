"""The project's one YAML reader and one atomic file write, for the report: a sweep YAML read as the sweep reads
it (a key given twice refused, one-line errors naming the file) and outputs that readers see whole or not at all.

Their one copy is the trainer's (:mod:`mutexmatch.yamlfile`, :mod:`mutexmatch.atomic`; standard library and
PyYAML), which may import nothing above it; ``reports`` reaches them only through the contract."""

from __future__ import annotations

from mutexmatch.atomic import atomic_write
from mutexmatch.yamlfile import YamlFileError, read_yaml_mapping

__all__ = ["atomic_write", "read_yaml_mapping", "YamlFileError"]
