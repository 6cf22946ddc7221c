"""The paper's printed numbers in a table layout: values as printed, their marks and footnotes, and quoted rows.

A published value is a string as the paper prints it: ``"93.22±2.52"``, a bare mean ``"93.05"`` (finite; in [0, 100]
when the table's metric is a percentage), optionally followed by a mark the paper sets on that one cell
(``"65.38±0.42*"``, Table 2's numbers taken from CoMatch). A *quoted row* is a row the paper prints and we do not
run (MixMatch†, UPS†, EnAET‡ …): its label (not a run row's), the mark the paper gives it, the row group it sits in
(with ``row_groups``) and its printed value per column, ``"-"`` where the paper leaves the cell empty. Each mark a
table uses needs its footnote (``footnotes: {"†": "reported in FixMatch"}``).

A quoted row may name the row ``level`` it becomes once the sweep runs it (CoMatch, which the paper's authors ran
themselves): while the rows axis has no such level the row is printed as quoted; once it has, the row is a run row
and its printed values are that row's published numbers, beside ours like FixMatch's. The values are then written
once, in the quoted row (a ``published`` entry for the same row is refused).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MARKS", "EMPTY", "LayoutError", "PublishedValue", "QuotedRow", "parse_published", "parse_quoted",
           "check_percentage"]

MARKS = ("†", "‡", "*")
"""The marks a paper table sets on rows or cells; each needs a footnote in the table's ``footnotes``."""
Mark = Literal["†", "‡", "*"]
EMPTY = "-"
"""A quoted row's value for a cell the paper leaves empty."""

_PUBLISHED = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:(?:±|\+-|\+/-)\s*(\d+(?:\.\d+)?))?\s*([†‡*])?\s*$")
_SHAPE = "a number or a string like \"93.22±2.52\" (optionally followed by a mark: †, ‡ or *)"


class LayoutError(ValueError):
    """A problem in the ``tables``/``figures`` sections; one ``where=value: what is allowed`` line per problem."""


@dataclass(frozen=True)
class PublishedValue:
    """A number as printed in the paper: mean and (optional) std, both in percent, and the mark the paper sets on
    that cell (``None`` for most)."""

    mean: float
    std: float | None
    mark: str | None = None

    def __str__(self) -> str:
        """The number without its mark (each renderer sets the mark in its own way)."""
        return f"{self.mean:.2f}" if self.std is None else f"{self.mean:.2f}±{self.std:.2f}"


def parse_published(value: Any, where: str) -> PublishedValue:
    """Parse ``93.22±2.52``, ``93.22+-2.52``, ``65.38±0.42*`` or a plain number; ``where`` names the YAML field in
    errors."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise LayoutError(f"{where}={value!r}: must be {_SHAPE}")
    if isinstance(value, (int, float)):
        parsed = PublishedValue(float(value), None)
    else:
        m = _PUBLISHED.match(value)
        if not m:
            raise LayoutError(f"{where}={value!r}: must be {_SHAPE}")
        parsed = PublishedValue(float(m.group(1)), float(m.group(2)) if m.group(2) is not None else None, m.group(3))
    if not math.isfinite(parsed.mean):   # YAML's .nan / .inf printed `nan` and `Δ -inf` (issue 33: q-nan, q-inf)
        raise LayoutError(f"{where}={value!r}: must be a finite number, as the paper prints it")
    return parsed


def check_percentage(value: PublishedValue, raw: Any, where: str) -> str | None:
    """The error line for a printed percentage outside [0, 100] (mean, or its ±), None when it lies within: a typo
    such as 925.2 for 92.52 printed a Δ of hundreds of points without a word (issue 33: q-negstd)."""
    if 0.0 <= value.mean <= 100.0 and (value.std is None or value.std <= 100.0):
        return None
    return (f"{where}={raw!r}: the table's metric is a percentage, so a printed value lies in [0, 100] (its ± too); "
            "write it as the paper prints it, e.g. \"92.52±0.37\"")


def parse_quoted(value: Any, where: str) -> PublishedValue | None:
    """A quoted row's value: as :func:`parse_published`, or ``None`` for ``"-"`` (the paper prints no number)."""
    if isinstance(value, str) and value.strip() == EMPTY:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return parse_published(value, where)   # raises its own line: a number, but not a finite one
    try:
        return parse_published(value, where)
    except LayoutError:
        raise LayoutError(f"{where}={value!r}: must be {_SHAPE}, or \"{EMPTY}\" for a cell the paper leaves "
                          "empty") from None


class QuotedRow(BaseModel):
    """A row the paper prints and we do not run (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1)
    mark: Optional[Mark] = None          # the paper's mark after the label; its text is in the table's `footnotes`
    group: Optional[str] = None          # the row group it sits in; required when the table has `row_groups`
    level: Optional[str] = None          # the rows-axis level it becomes once the sweep runs it (e.g. comatch)
    values: dict[str, Any]               # column level → printed value or "-"

    def parsed(self, where: str) -> dict[str, PublishedValue]:
        """column → value, without the empty ones; ``LayoutError`` for a value not as printed."""
        out = {}
        for col, raw in self.values.items():
            value = parse_quoted(raw, f"{where}.values.{col}")
            if value is not None:
                out[col] = value
        return out
