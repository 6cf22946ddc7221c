"""The project's value checks and their messages (``field=value: must be in [0, 1)``): interval and integer checks,
bounds usable as pydantic validators, and pydantic errors as one such line each. Standard library only (pydantic
appears in annotations), so config, orchestration and reports import it without torch start-up cost."""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["validation_error_lines", "shown", "int_arg", "interval_text", "in_interval", "within", "at_least", "check_int"]

SHOWN_CHARS = 80  # a value echoed in a message: enough to recognise it, never the whole of a huge one
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict, _SHOWN.maxset = 3, 6, 6, 6, 6
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = SHOWN_CHARS


def shown(value: Any) -> str:
    """``repr(value)`` as a message echoes it: the same for a scalar or a short list, shortened with ``...`` past
    :data:`SHOWN_CHARS` (a value built from YAML aliases printed whole made a 428 KB error line)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc)


def validation_error_lines(err: "ValidationError", *, where: Callable[[Sequence[Any]], str] = _dotted,
                           allowed_keys: Callable[[Sequence[Any]], Sequence[str]] | None = None,
                           missing: str | None = None) -> list[str]:
    """One ``field=value: problem`` line per pydantic error, the project's error style.

    ``where`` names an error's location (default: the dotted path); an unknown key reads ``field: unknown key``,
    followed by ``; allowed keys: …`` from ``allowed_keys(location of its parent)`` when given; a missing field
    reads ``field: <missing>`` when ``missing`` is given. A message of a cross-field check that already spans
    several lines or names a field below the location, an assertion, or an error without a location is kept as
    it is.
    """
    lines = []
    for e in err.errors():
        field, msg = where(e["loc"]), e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            keys = f"; allowed keys: {', '.join(allowed_keys(e['loc'][:-1]))}" if allowed_keys else ""
            lines.append(f"{field}: unknown key{keys}")
        elif e["type"] == "missing" and missing is not None:
            lines.append(f"{field}: {missing}")
        elif not field or e["type"] == "assertion_error" or e["type"] == "value_error" and (
                "\n" in msg or msg.startswith(f"{field}.")):   # several lines, or already naming a field below
            lines.append(msg)
        else:
            lines.append(f"{field}={shown(e.get('input'))}: {msg}")
    return lines


def int_arg(low: int, high: int | None = None, unit: str = "") -> Callable[[str], int]:
    """An argparse ``type``: the integer in [low, high] (no upper bound when ``high`` is None), else
    ``ArgumentTypeError`` saying what is allowed (argparse names the flag)."""
    allowed = ("a positive integer" if low == 1 else f"an integer >= {low}") if high is None else \
        f"an integer in [{low}, {high}]"

    def parse(value: str) -> int:
        import argparse

        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < low or high is not None and n > high:
            raise argparse.ArgumentTypeError(f"must be {allowed}{f' ({unit})' if unit else ''}, got {value!r}")
        return n
    return parse


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
        raise ValueError(f"{field}={shown(value)}: must be an integer {allowed}{note}")
    return int(value)
