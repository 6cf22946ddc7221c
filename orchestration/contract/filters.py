"""The MLflow search filters that find a layout's runs, built from the tag names (no filter string is written by
hand anywhere else), and the orders runs are listed in. Standard library only."""

from __future__ import annotations

from orchestration.contract.tags import KIND, PARENT_RUN_ID, ROLE, ROLE_SWEEP, ROLE_TRIAL

__all__ = ["tag_equals", "status_is", "status_is_not", "all_of", "trials_filter", "sweeps_filter",
           "children_filter", "NEWEST_FIRST", "OLDEST_FIRST"]

NEWEST_FIRST = ("attributes.start_time DESC",)
OLDEST_FIRST = ("attributes.start_time ASC",)


def tag_equals(tag: str, value: str) -> str:
    """``tags.`<tag>` = '<value>'``: MLflow's filter for a tag's value (backquotes: tag names hold dots)."""
    return f"tags.`{tag}` = '{value}'"


def status_is(status: str) -> str:
    """``attributes.status = '<status>'`` (RUNNING, FINISHED, FAILED, KILLED)."""
    return f"attributes.status = '{status}'"


def status_is_not(status: str) -> str:
    return f"attributes.status != '{status}'"


def all_of(*clauses: str) -> str:
    """The clauses joined by ``AND`` (MLflow's filter grammar has no ``OR``); empty ones left out."""
    return " AND ".join(c for c in clauses if c)


def trials_filter(kind: str) -> str:
    """MLflow search filter for the trial runs of ``kind``."""
    return all_of(tag_equals(ROLE, ROLE_TRIAL), tag_equals(KIND, kind))


def sweeps_filter() -> str:
    """Every launch's parent run."""
    return tag_equals(ROLE, ROLE_SWEEP)


def children_filter(parent_run_id: str) -> str:
    """The runs of one launch (MLflow's parent tag)."""
    return tag_equals(PARENT_RUN_ID, parent_run_id)
