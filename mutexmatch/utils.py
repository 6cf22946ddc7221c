"""Small helpers every package shares, each defined once (issue 17): atomic file writes, nested-mapping merge and
flatten with dotted keys, pydantic errors as ``field=value: problem`` lines, and number checkers.

Standard library only (pydantic appears in annotations), so ``mutexmatch.config``, ``orchestration`` and ``reports``
can all import it without torch start-up cost; ``mutexmatch`` never imports the other packages, so this is the one
place all of them can reach.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["atomic_write", "deep_merge", "set_dotted", "flatten_dotted", "validation_error_lines", "interval_text",
           "in_interval", "within", "at_least", "check_int"]


# ------------------------------------------------------------------------------------------------ files
def atomic_write(path: str | Path, data: bytes | Callable[[IO[bytes]], Any], *, mode: int | None = None) -> None:
    """Write ``path`` so that readers see the old file or the complete new one, never a partial one.

    ``data`` is the bytes, or a function that writes them to the open binary file (``torch.save`` streams large
    payloads without a copy in memory). A temporary file beside ``path`` is written, fsynced and renamed over it
    (``os.replace`` is atomic within a file system); on any error it is removed. ``mode`` sets the permissions:
    the temporary file is created 0600, which suits checkpoints; shared caches pass ``0o644``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------------------------ mappings
def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge recursively, anything else is replaced (both are copied)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(raw: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``raw`` with ``a.b`` set to ``value``."""
    *parents, leaf = path.split(".")
    override: dict[str, Any] = {leaf: value}
    for p in reversed(parents):
        override = {p: override}
    return deep_merge(raw, override)


def flatten_dotted(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``: every leaf under its dotted path (an empty mapping has no leaf)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(flatten_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ------------------------------------------------------------------------------------------------ errors
def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc)


def validation_error_lines(err: "ValidationError", *, where: Callable[[Sequence[Any]], str] = _dotted,
                           allowed_keys: Callable[[Sequence[Any]], Sequence[str]] | None = None,
                           missing: str | None = None) -> list[str]:
    """One ``field=value: problem`` line per pydantic error, the project's error style.

    ``where`` names an error's location (default: the dotted path); an unknown key reads ``field: unknown key``,
    followed by ``; allowed keys: …`` from ``allowed_keys(location of its parent)`` when given; a missing field
    reads ``field: <missing>`` when ``missing`` is given. A message of a cross-field check that already spans
    several lines, an assertion, or an error without a location is kept as it is.
    """
    lines = []
    for e in err.errors():
        field, msg = where(e["loc"]), e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            keys = f"; allowed keys: {', '.join(allowed_keys(e['loc'][:-1]))}" if allowed_keys else ""
            lines.append(f"{field}: unknown key{keys}")
        elif e["type"] == "missing" and missing is not None:
            lines.append(f"{field}: {missing}")
        elif not field or e["type"] == "assertion_error" or e["type"] == "value_error" and "\n" in msg:
            lines.append(msg)
        else:
            lines.append(f"{field}={e.get('input')!r}: {msg}")
    return lines


# ------------------------------------------------------------------------------------------------ numbers
def interval_text(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    """``(0, 1]``, ``[0, inf)``: an interval as messages show it (a missing bound is infinite, hence open)."""
    left = "(" if low_open or low is None or low == -math.inf else "["
    right = ")" if high_open or high is None or high == math.inf else "]"
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    return f"{left}{lo}, {hi}{right}"


def in_interval(value: float, low: float | None, high: float | None, low_open: bool = False,
                high_open: bool = False) -> float:
    """``value`` if it lies in the interval (NaN fails any bound), else ``ValueError("must be in (0, 1]")`` — for a
    pydantic validator, whose error already names the field and the value."""
    ok = (low is None or (value > low if low_open else value >= low)) and (
        high is None or (value < high if high_open else value <= high))
    if not ok:
        raise ValueError(f"must be in {interval_text(low, high, low_open, high_open)}")
    return value


def within(low: float | None, high: float | None, *, low_open: bool = False,
           high_open: bool = False) -> Callable[[Any], Any]:
    """:func:`in_interval` as a check for a pydantic ``AfterValidator``: the bound is declared on the field."""
    return lambda value: in_interval(value, low, high, low_open, high_open)


def at_least(low: float, *, strict: bool = False, or_none: bool = False) -> Callable[[Any], Any]:
    """A check for a pydantic ``AfterValidator`` (or any caller): the value itself if it is >= ``low`` (> ``low``
    when ``strict``; None passes when ``or_none``), else ``ValueError("must be >= 1")`` — the field's name and value
    are added by the error formatter."""
    text = f"must be {'>' if strict else '>='} {low:g}{' or null' if or_none else ''}"

    def check(value: Any) -> Any:
        if value is None and or_none:
            return value
        if value is None or (value <= low if strict else value < low):
            raise ValueError(text)
        return value
    return check


def check_int(field: str, value: Any, *, low: int, high: int | None = None, note: str = "") -> int:
    """``value`` as an int if it is an integer (bools rejected: True is not 1 class) in [low, high] (no upper bound
    when ``high`` is None), else ``ValueError``: ``field=value: must be an integer in [1, 10]`` / ``>= 1``."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low
            or high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{field}={value!r}: must be an integer {allowed}{note}")
    return int(value)
