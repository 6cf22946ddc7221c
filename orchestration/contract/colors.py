"""One colour per level of the rows' axis, the same in the MLflow UI (a run's ``mlflow.runColor``) and in every
report figure. Standard library only."""

from __future__ import annotations

from typing import Iterable

from orchestration.contract.tags import TUNED_AXIS, TUNED_LEVEL

__all__ = ["PALETTE", "level_color", "color_axis", "run_color"]


# Paul Tol's "bright" scheme (colour-blind safe): one colour per level of the rows' axis, in YAML order, in the
# MLflow UI and in every report figure alike.
PALETTE = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")


def level_color(index: int) -> str:
    """The colour of the ``index``-th level of the rows' axis (:data:`PALETTE`, cycled)."""
    return PALETTE[index % len(PALETTE)]


def color_axis(axes: Iterable[str], tables: Iterable[object] = ()) -> str:
    """The axis whose levels get a colour each: the first report table's rows (the methods, usually), else the
    first axis."""
    for table in tables:
        if isinstance(table, dict) and isinstance(table.get("rows"), str):
            return table["rows"]
    return next(iter(axes))


def run_color(levels: Iterable[tuple[str, str]], axis: str, axis_levels: Iterable[str]) -> str | None:
    """The colour of a run with ``levels``: its level's on ``axis`` (in YAML order ``axis_levels``); a refit
    (tuned) run takes the colour after all the levels', so tuned and default differ. None off that axis."""
    order, own = list(axis_levels), dict(levels)
    if own.get(axis) not in order:
        return None
    return level_color(order.index(own[axis]) + (len(order) if own.get(TUNED_AXIS) == TUNED_LEVEL else 0))
