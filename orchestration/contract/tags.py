"""Tag names and values: every tag the sweep writes on a run (``mutexmatch.*`` and the MLflow tags it fills), the
role and kind values, and the builders of a trial's tags. Standard library only."""

from __future__ import annotations

import json
from typing import Iterable

__all__ = ["TAG", "PARENT_RUN_ID", "ROLE", "KIND", "CELL", "FOLD", "VARIANT", "CONFIG_HASH", "SPLIT_DIGEST",
           "GIT_COMMIT", "TRIAL_ID", "LAUNCH_ID", "SEARCH_HASH", "SEARCH_PHASE", "SAMPLED", "ATTEMPTS",
           "WORKER_PID", "NODE_ID", "STOPPED", "LAST_STEP", "EARLY_STOPPED", "REUSED_FROM",
           "REUSED_FROM_EXPERIMENT", "REUSED_ARTIFACT_URI", "ENDED_BY", "ERROR", "SPEC_HASH", "SPEC_PATH",
           "STORAGE", "SMOKE", "DRIVER_HOST", "DRIVER_PID", "DRIVER_START", "COMMAND", "RAY_PROCESSES", "OVERRIDES",
           "SETTINGS_TAG", "NOTE", "ROLE_SWEEP", "ROLE_TRIAL", "KIND_GRID", "KIND_SEARCH", "KIND_SMOKE",
           "KIND_REFIT", "KIND_SINGLE", "ALGORITHM_AXIS", "TUNED_AXIS", "TUNED_LEVEL", "axis_tag", "attempt_tag",
           "overhead_tag", "parent_display_tags", "EXPERIMENT_KIND", "EXPERIMENT_KIND_ML", "SHARED_VIEW_TAG",
           "DATASET_CONTEXT", "RUN_COLOR", "SOURCE_NAME", "SOURCE_TYPE", "SOURCE_GIT_COMMIT",
           "source_tags", "GROUP", "group_label", "trial_tags", "reused_trial_tags", "results_run_id", "PLUGIN_CODE",
           "plugin_code_value"]


TAG = "mutexmatch."                 # prefix of every tag the sweep writes
PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's own tag: a trial run's sweep (parent) run

ROLE = TAG + "role"                 # ROLE_SWEEP on a launch's parent run, ROLE_TRIAL on each trial's run
# A trial run: what it is (reports group and pair runs by these) ...
KIND = TAG + "kind"                 # KIND_GRID, KIND_SEARCH, KIND_REFIT or KIND_SMOKE
CELL = TAG + "cell"                 # cell id (see cell_id); one tag per axis too (axis_tag)
GROUP = TAG + "group"               # the cell in words, for the MLflow UI's groups (group_label)
FOLD = TAG + "fold"
VARIANT = TAG + "variant"           # algorithm name
CONFIG_HASH = TAG + "config_hash"   # a relaunch skips a trial with a FINISHED run of the same hash
PLUGIN_CODE = TAG + "plugin_code"   # module=digest of the plugins whose names it uses (plugin_code_value)
SPLIT_DIGEST = TAG + "split_digest"
# ... where it comes from and how a restarted trial finds it ...
GIT_COMMIT = TAG + "git_commit"
TRIAL_ID = TAG + "trial_id"         # Tune's trial id: a restarted trial finds its run by it
LAUNCH_ID = TAG + "launch_id"
SEARCH_HASH, SEARCH_PHASE = TAG + "search_hash", TAG + "search_phase"  # search trials: their study
SAMPLED = TAG + "sampled"           # search trials: the values Tune's searcher sampled, typed (sampled_json)
# ... and its attempts (bookkeeping; see attempt_tag and overhead_tag).
ATTEMPTS = TAG + "attempts"
WORKER_PID = TAG + "worker_pid"
NODE_ID = TAG + "node_id"
STOPPED = TAG + "stopped"           # "true" while Tune has stopped the trial and the driver has not decided why
LAST_STEP = TAG + "last_step"       # the step of the last evaluation logged (in the request that logs its metrics)
EARLY_STOPPED = TAG + "early_stopped"
# A reused trial (issue 24): a FINISHED run of the same config hash existed in the store (any experiment), so this
# sweep links it instead of training it again. The link run carries the trial's identity tags and these pointers;
# its results (metrics, params, artifacts) are read from the run it names: nothing is copied that could diverge.
REUSED_FROM = TAG + "reused_from"                         # the run id whose results this trial's are
REUSED_FROM_EXPERIMENT = TAG + "reused_from_experiment"   # that run's experiment name (for people)
REUSED_ARTIFACT_URI = TAG + "reused_artifact_uri"         # that run's artifact location (class counts, weights)
ENDED_BY, ERROR = TAG + "ended_by", TAG + "error"
# A launch's parent run: the spec it runs and the driver that runs it (a later launch checks it is alive).
SPEC_HASH, SPEC_PATH, STORAGE, SMOKE = TAG + "spec_hash", TAG + "spec_path", TAG + "storage", TAG + "smoke"
DRIVER_HOST, DRIVER_PID, COMMAND = TAG + "driver_host", TAG + "driver_pid", TAG + "command"
DRIVER_START = TAG + "driver_start"  # the driver's start time: a restarted container may reuse its pid
RAY_PROCESSES = TAG + "ray_processes"  # "<pid>:<start time> ..." of the local Ray the driver started (orphans.py)
OVERRIDES = TAG + "overrides"       # the launch's --set key=value items, a JSON list
SETTINGS_TAG = TAG + "settings."    # + a settings digest: the parent run holds that settings' expected runs
NOTE = "mlflow.note.content"        # MLflow's own tag: the run's description in the UI (the YAML's description)

ROLE_SWEEP = "sweep"
ROLE_TRIAL = "trial"
KIND_GRID = "grid"
KIND_SEARCH = "search"
KIND_SMOKE = "smoke"
KIND_REFIT = "refit"                # a search's best parameters trained on every refit fold
KIND_SINGLE = "single"              # one training run logged by `python -m orchestration.train` (no sweep)
ALGORITHM_AXIS = "algorithm"        # a single run's one axis: its algorithm
# A refit run's cell: the searched cell plus this axis level, so it never joins the searched cell's fold statistics
# and a report layout can place it as a row of its own (`tuned: "true"`).
TUNED_AXIS, TUNED_LEVEL = "tuned", "true"


def axis_tag(axis: str) -> str:
    """``mutexmatch.axis.<axis>``: the trial's level on that axis."""
    return f"{TAG}axis.{axis}"


def attempt_tag(attempt: int, what: str) -> str:
    """``mutexmatch.attempt.<n>.<what>`` (``node_id``, ``host``, ``start_step``, ``tune_checkpoint``)."""
    return f"{TAG}attempt.{attempt}.{what}"


def overhead_tag(what: str) -> str:
    """``mutexmatch.overhead.<what>`` (``setup_s``, ``hooks_s``, ``wall_s``): seconds orchestration added."""
    return f"{TAG}overhead.{what}"


def parent_display_tags(description: str, overrides: Iterable[str]) -> dict[str, str]:
    """What a launch's parent run shows besides its tags: the YAML's description as the run's description in the UI
    (``mlflow.note.content``) and the ``--set`` overrides it was launched with (a JSON list)."""
    return {NOTE: description.strip() or "(the sweep YAML has no description)", OVERRIDES: json.dumps(list(overrides))}



# Tags the sweep sets on its experiment (MLflow UI: model training, not GenAI; the shared runs view,
# orchestration.store.mlflow_ui) and the input tag of a trial's dataset.
EXPERIMENT_KIND, EXPERIMENT_KIND_ML = "mlflow.experimentKind", "custom_model_development"
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # + a key: the view's JSON, opened by ?viewStateShareKey=<key>
DATASET_CONTEXT = "mlflow.data.context"  # MLflow's own input tag: what the dataset was used for
RUN_COLOR = "mlflow.runColor"       # MLflow's own tag: the run's colour in the table and the charts
SOURCE_NAME, SOURCE_TYPE = "mlflow.source.name", "mlflow.source.type"  # MLflow's Source column
SOURCE_GIT_COMMIT = "mlflow.source.git.commit"                        # MLflow's Version column


def source_tags(command: str, commit: str) -> dict[str, str]:
    """MLflow's Source and Version columns: the command that made the run and the code's commit."""
    return {SOURCE_NAME: command[:500], SOURCE_TYPE: "LOCAL", SOURCE_GIT_COMMIT: commit}


def group_label(levels: Iterable[tuple[str, str]]) -> str:
    """The cell in words, the MLflow UI's group label (the runs view groups by :data:`GROUP`): the levels joined by
    `` · ``, a refit (tuned) cell's first level marked ``(tuned)``: ``mutexmatch (tuned) · digits-20`` beside
    ``mutexmatch · digits-20``, which the cell ids ``method=mutexmatch,setting=digits-20[,tuned=true]`` are not once
    the UI cuts them to its column."""
    levels = list(levels)
    tuned = (TUNED_AXIS, TUNED_LEVEL) in levels
    words = [level for axis, level in levels if axis != TUNED_AXIS]
    if tuned and words:
        words[0] += " (tuned)"
    return " · ".join(words)


def trial_tags(*, parent_run_id: str, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
               variant: str, config_hash: str, commit: str, trial_id: str, launch_id: str, source: str = "",
               color: str | None = None) -> dict[str, str]:
    """The tags a trial run is created with (``mutexmatch.split_digest`` follows once the trainer has its split);
    ``source`` (the launch's command) and ``color`` (:func:`run_color`) fill MLflow's own Source, Version and
    colour."""
    cell_levels = list(cell_levels)
    tags = {PARENT_RUN_ID: parent_run_id, ROLE: ROLE_TRIAL, KIND: kind, CELL: cell_id, FOLD: str(fold),
            VARIANT: variant, CONFIG_HASH: config_hash, GIT_COMMIT: commit, TRIAL_ID: trial_id, LAUNCH_ID: launch_id,
            GROUP: group_label(cell_levels)}
    tags.update({axis_tag(a): lv for a, lv in cell_levels})
    if source:
        tags.update(source_tags(source, commit))
    if color:
        tags[RUN_COLOR] = color
    return tags


def plugin_code_value(digests: dict[str, str]) -> str:
    """:data:`PLUGIN_CODE`'s value: ``module=digest`` of each plugin whose algorithm, dataset or backbone a trial
    uses (``mutexmatch.plugins.config_plugin_digests``), sorted, comma-separated; '' for built-ins only."""
    return ",".join(f"{m}={d}" for m, d in sorted(digests.items()))


def reused_trial_tags(*, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
                      source_id: str, source_tags: dict[str, str], source_experiment: str,
                      source_artifact_uri: str) -> dict[str, str]:
    """The tags of a link run standing for a reused trial: this sweep's identity of the trial (kind, cell, fold,
    axes) and, from the source run, what the config fixes (algorithm, config hash, split digest, commit)."""
    cell_levels = list(cell_levels)
    tags = {ROLE: ROLE_TRIAL, KIND: kind, CELL: cell_id, FOLD: str(fold), REUSED_FROM: source_id,
            REUSED_FROM_EXPERIMENT: source_experiment, REUSED_ARTIFACT_URI: source_artifact_uri,
            GROUP: group_label(cell_levels)}
    tags.update({k: source_tags[k] for k in (VARIANT, CONFIG_HASH, SPLIT_DIGEST, GIT_COMMIT) if k in source_tags})
    tags.update({axis_tag(a): lv for a, lv in cell_levels})
    return tags


def results_run_id(run_id: str, tags: dict[str, str]) -> str:
    """The run whose metrics and artifacts are a trial run's results: itself, or the run a reused trial links to."""
    return tags.get(REUSED_FROM) or run_id
