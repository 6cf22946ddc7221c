"""Which trial runs a YAML's settings count: THE rule the report's tables, the sweep's summary, the status and the
MLflow UI's runs view share, the tag that marks those runs for the UI and the filter that finds them. Standard
library only.

The rule (issue 34: the UI's per-cell means must be the report's): a run counts for settings when its config hash is
one the settings expect for its cell and fold (:func:`settings_expect`, the expected-runs record of
:mod:`orchestration.contract.settings`), it is FINISHED and, of those for the same cell and fold, it is the newest
(:func:`newest_finished`: a relaunch with ``--force`` writes a newer run, which reflects the current code). Search
trials never count (they are another kind), nor do a ``--set`` try-out's runs (another config hash). MLflow's filter
grammar cannot say "the newest of a group" or "a hash from this list per cell", so the sweep marks the counted runs
with :func:`counted_tag`, each trial's run as it finishes and the whole set at the end of every launch
(:func:`counted_changes` says which tags to set and delete) and
the UI's view filters on that tag (:func:`counted_filter`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

from orchestration.contract.filters import all_of, tag_equals
from orchestration.contract.names import trial_key
from orchestration.contract.tags import ROLE, ROLE_TRIAL, TAG

__all__ = ["COUNTED_TAG", "TrialRow", "counted_tag", "counted_filter", "settings_expect", "newest_finished",
           "counted_rows", "counted_changes"]

COUNTED_TAG = TAG + "counted."      # + a settings digest: "true" on each trial run those settings count


@dataclass(frozen=True)
class TrialRow:
    """What the rule reads of one trial run; ``ref`` is the caller's handle on it (an MLflow run, a frame index)."""

    cell: str
    fold: int | str
    config_hash: str
    status: str
    start_time: int
    run_id: str
    ref: Any = None
    lost: str = ""      # a reused trial's link whose source is gone (contract.reuse.source_lost): never counted

    @property
    def key(self) -> str:
        return trial_key(self.cell, self.fold)


def counted_tag(digest: str) -> str:
    """``mutexmatch.counted.<digest>``: "true" on a trial run that the settings with ``digest`` count."""
    return COUNTED_TAG + digest


def counted_filter(digest: str) -> str:
    """MLflow's filter for exactly the runs the settings with ``digest`` count (as last marked by a launch)."""
    return all_of(tag_equals(ROLE, ROLE_TRIAL), tag_equals(counted_tag(digest), "true"))


def settings_expect(expected: Mapping[str, Collection[str]] | None, row: TrialRow) -> bool:
    """Whether the settings expect ``row``'s config hash for its cell and fold; ``expected`` None (a store from
    before the expected-runs record) expects every run."""
    return expected is None or row.config_hash in expected.get(row.key, ())


def newest_finished(rows: Iterable[TrialRow]) -> dict[str, TrialRow]:
    """Trial key → its newest FINISHED row (by start time, then run id, both descending); a link whose source is
    lost (``lost``) has no results and is passed over."""
    chosen: dict[str, TrialRow] = {}
    for row in rows:
        if row.status != "FINISHED" or row.lost:
            continue
        best = chosen.get(row.key)
        if best is None or (row.start_time, row.run_id) > (best.start_time, best.run_id):
            chosen[row.key] = row
    return chosen


def counted_rows(rows: Iterable[TrialRow], expected: Mapping[str, Collection[str]] | None
                 ) -> tuple[dict[str, TrialRow], list[TrialRow]]:
    """(trial key → the row the settings count, the FINISHED rows of other settings): :func:`settings_expect` then
    :func:`newest_finished`."""
    rows = list(rows)
    other = [r for r in rows if r.status == "FINISHED" and not settings_expect(expected, r)]
    return newest_finished(r for r in rows if settings_expect(expected, r)), other


def counted_changes(marked: Iterable[str], counted: Iterable[str]) -> tuple[set[str], set[str]]:
    """(run ids to tag with :func:`counted_tag`, run ids whose tag to delete): what makes the marked runs
    ``marked`` the counted runs ``counted``."""
    marked, counted = set(marked), set(counted)
    return counted - marked, marked - counted
