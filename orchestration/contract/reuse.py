"""What a reused trial's link run depends on (issue 33 items 4 and 8): whether its source run still holds its results,
what code trained that source against the code of this launch, and the lines that say so. Standard library only, so
the sweep, the status and the report read one rule.

A link run (:func:`orchestration.contract.tags.reused_trial_tags`) copies nothing: its results are its source
run's. A source moved to MLflow's trash (``MlflowClient.delete_run``: lifecycle stage ``deleted``), in a deleted
experiment, or purged (``mlflow gc``: no run of that id any more) has no results to give, so the link stands for
nothing: it is not counted (:class:`orchestration.contract.counted.TrialRow` ``lost``) and a relaunch trains the
trial again (or links another FINISHED run of the same config, where one exists).

The code version of a run is its ``mutexmatch.git_commit`` tag (:func:`orchestration.trial.tracking.git_commit`:
the commit, ``-dirty`` when tracked files differed from it, ``unknown`` outside git). A config hash names no code
version, and the numerics of algorithms have changed between commits, so reuse across commits is said aloud and
``--reuse same-commit`` refuses it: a source is reused then only when its commit is this launch's and neither
tree was dirty (a dirty tree's code is not known by its commit).
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["REUSE_POLICIES", "REUSE_ANY", "REUSE_SAME_COMMIT", "SOURCE_DELETED", "SOURCE_PURGED",
           "SOURCE_EXPERIMENT_DELETED", "source_lost", "lost_source_line", "same_code", "code_version_line",
           "STALE_LINK_REASON"]

REUSE_ANY, REUSE_SAME_COMMIT = "any", "same-commit"
REUSE_POLICIES = (REUSE_ANY, REUSE_SAME_COMMIT)   # --reuse: which FINISHED runs of the same config a launch links

SOURCE_DELETED = "was deleted (in MLflow's trash)"
SOURCE_EXPERIMENT_DELETED = "is in a deleted experiment"
SOURCE_PURGED = "is gone (purged, e.g. by mlflow gc)"

# ENDED_BY on a link run a launch found RUNNING: its launch was stopped between creating and ending it.
STALE_LINK_REASON = "next launch (a link run left RUNNING by an interrupted launch)"


def source_lost(found: bool, run_stage: str = "active", experiment_stage: str = "active") -> str:
    """Why a link's source run holds no results ("" when it does): purged (``found`` False), deleted, or in a
    deleted experiment. ``run_stage``/``experiment_stage``: MLflow's ``lifecycle_stage`` of the run and of its
    experiment."""
    if not found:
        return SOURCE_PURGED
    if run_stage == "deleted":
        return SOURCE_DELETED
    if experiment_stage == "deleted":
        return SOURCE_EXPERIMENT_DELETED
    return ""


def lost_source_line(run_name: str, source_id: str, source_experiment: str, why: str) -> str:
    """One line naming a reused trial whose source is lost, and what happens to it."""
    where = f" (experiment {source_experiment!r})" if source_experiment else ""
    return (f"{run_name or 'a reused trial'}: its source run {source_id}{where} {why}; the trial is not counted, and "
            "a relaunch trains it again")


def same_code(source_commit: str, this_commit: str) -> bool:
    """Whether a run of ``source_commit`` was trained by this code: the same commit, neither tree dirty."""
    clean = source_commit and "dirty" not in source_commit and source_commit != "unknown"
    return bool(clean) and source_commit == this_commit


def code_version_line(source_commits: Iterable[str], this_commit: str, refused: bool) -> str:
    """One line per launch for the reused sources trained by other code than ``this_commit`` ("" when none):
    each other commit with its count; ``refused``: ``--reuse same-commit`` trains them instead."""
    counts: dict[str, int] = {}
    for commit in source_commits:
        if not same_code(commit, this_commit):
            counts[commit or "unknown"] = counts.get(commit or "unknown", 0) + 1
    if not counts:
        return ""
    listed = ", ".join(f"{c} ({n} trial{'s' if n > 1 else ''})" for c, n in sorted(counts.items()))
    what = ("not reused (--reuse same-commit): trained again" if refused else
            "reused (--reuse same-commit trains them again instead)")
    return (f"{sum(counts.values())} trial(s) with a FINISHED run of the same config from other code than this "
            f"launch's {this_commit or 'unknown'}: {listed}; {what}")

