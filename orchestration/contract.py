"""The MLflow layout contract: every name the sweep writes and the reports, benchmarks and tests read.

One module so that writer and readers cannot drift apart (issue 17): tag names and their role/kind values, the
cell id and trial-key builders, artifact paths, the metric names the layout relies on, and the one rule that
turns a ``--tracking-uri`` (or its absence) into a store. The layout itself is described in
``orchestration/README.md`` (MLflow layout).

It imports the standard library only, and ``orchestration/__init__.py`` imports nothing, so ``reports`` (which must
not pull in Ray) and ``benchmarks`` can import it; ``mutexmatch`` never does (the trainer knows nothing of MLflow).
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from mutexmatch import metrics as M

# ------------------------------------------------------------------------------------------------ tags
TAG = "mutexmatch."                 # prefix of every tag the sweep writes
PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's own tag: a trial run's sweep (parent) run

ROLE = TAG + "role"                 # ROLE_SWEEP on a launch's parent run, ROLE_TRIAL on each trial's run
# A trial run: what it is (reports group and pair runs by these) ...
KIND = TAG + "kind"                 # KIND_GRID, KIND_SEARCH, KIND_REFIT or KIND_SMOKE
CELL = TAG + "cell"                 # cell id (see cell_id); one tag per axis too (axis_tag)
FOLD = TAG + "fold"
VARIANT = TAG + "variant"           # algorithm name
CONFIG_HASH = TAG + "config_hash"   # a relaunch skips a trial with a FINISHED run of the same hash
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


def trials_filter(kind: str) -> str:
    """MLflow search filter for the trial runs of ``kind``."""
    return f"tags.`{ROLE}` = '{ROLE_TRIAL}' AND tags.`{KIND}` = '{kind}'"


def trial_tags(*, parent_run_id: str, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
               variant: str, config_hash: str, commit: str, trial_id: str, launch_id: str, source: str = "",
               color: str | None = None) -> dict[str, str]:
    """The tags a trial run is created with (``mutexmatch.split_digest`` follows once the trainer has its split);
    ``source`` (the launch's command) and ``color`` (:func:`run_color`) fill MLflow's own Source, Version and
    colour."""
    tags = {PARENT_RUN_ID: parent_run_id, ROLE: ROLE_TRIAL, KIND: kind, CELL: cell_id, FOLD: str(fold),
            VARIANT: variant, CONFIG_HASH: config_hash, GIT_COMMIT: commit, TRIAL_ID: trial_id, LAUNCH_ID: launch_id}
    tags.update({axis_tag(a): lv for a, lv in cell_levels})
    if source:
        tags.update(source_tags(source, commit))
    if color:
        tags[RUN_COLOR] = color
    return tags


def reused_trial_tags(*, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
                      source_id: str, source_tags: dict[str, str], source_experiment: str,
                      source_artifact_uri: str) -> dict[str, str]:
    """The tags of a link run standing for a reused trial: this sweep's identity of the trial (kind, cell, fold,
    axes) and, from the source run, what the config fixes (algorithm, config hash, split digest, commit)."""
    tags = {ROLE: ROLE_TRIAL, KIND: kind, CELL: cell_id, FOLD: str(fold), REUSED_FROM: source_id,
            REUSED_FROM_EXPERIMENT: source_experiment, REUSED_ARTIFACT_URI: source_artifact_uri}
    tags.update({k: source_tags[k] for k in (VARIANT, CONFIG_HASH, SPLIT_DIGEST, GIT_COMMIT) if k in source_tags})
    tags.update({axis_tag(a): lv for a, lv in cell_levels})
    return tags


def results_run_id(run_id: str, tags: dict[str, str]) -> str:
    """The run whose metrics and artifacts are a trial run's results: itself, or the run a reused trial links to."""
    return tags.get(REUSED_FROM) or run_id


# ------------------------------------------------------------------------------------------------ names
def cell_id(levels: Iterable[tuple[str, str]]) -> str:
    """``axis=level`` pairs joined by commas, axes in YAML order: the ``mutexmatch.cell`` tag."""
    return ",".join(f"{axis}={level}" for axis, level in levels)


def tuned_levels(levels: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The levels of a searched cell's refit cell: the same levels plus ``tuned=true``."""
    return (*levels, (TUNED_AXIS, TUNED_LEVEL))


def trial_key(cell: str, fold: int | str) -> str:
    """``<cell id>/fold<k>``: what a grid trial is known by (launch plan, skipping, summaries), unique in a sweep."""
    return f"{cell}/fold{fold}"


def trial_run_name(levels: Iterable[tuple[str, str]], fold: int | str, kind: str = KIND_GRID) -> str:
    """The run name the MLflow UI lists, levels first so the run list does not cut them away:
    ``mutexmatch · cifar10-40 · fold 3`` (a search, refit or smoke trial ends in ``· search`` etc.; a refit's
    ``tuned=true`` level is said by that). Runs are found by their tags, never by this name."""
    parts = [level for axis, level in levels if axis != TUNED_AXIS] + [f"fold {fold}"]
    return " · ".join(parts + ([] if kind == KIND_GRID else [kind]))


def parent_run_name(sweep: str, started: datetime, smoke: bool = False) -> str:
    """``sweep table1_cifar_svhn · 2026-11-26 07:57``: a launch's parent run in the UI."""
    return f"sweep {sweep} · {started:%Y-%m-%d %H:%M}" + (" · smoke" if smoke else "")


def split_trial_key(key: str) -> tuple[str, str] | None:
    """``(cell id, fold)`` of a :func:`trial_key`, or None when ``key`` is not one."""
    cell, sep, fold = key.rpartition("/fold")
    return (cell, fold) if sep and fold.isdigit() else None


BEST_PREFIX = "best."  # parent run: params/tags/metrics of a search's best trial


def best_param_prefix(cell: str, fold: int | str) -> str:
    """The ``best.`` prefix of one study when a sweep has several (``=`` and ``,`` are not legal in MLflow keys)."""
    return f"{BEST_PREFIX}{cell.replace('=', '-').replace(',', '.')}.fold{fold}."


# ------------------------------------------------------------------------------------------------ search trials
def sampled_json(sampled: dict[str, Any]) -> str:
    """The ``mutexmatch.sampled`` tag of a search trial: its sampled values as Tune's searcher gave them (dotted path
    → value), in JSON, which keeps an int an int and a float a float (MLflow params are ``str`` of config values)."""
    return json.dumps(sampled, sort_keys=True)


def read_sampled(tags: dict[str, str]) -> dict[str, Any] | None:
    """A search run's sampled values (:func:`sampled_json`); None for a run logged before the tag existed."""
    text = tags.get(SAMPLED)
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class SearchOutcome:
    """One search trial as :func:`best_trial` weighs it. ``finished``: it ran to its end or ASHA stopped it (MLflow
    FINISHED, Optuna COMPLETE; an ASHA-stopped trial counts with the value it reached, as TPE saw it); a failed,
    killed, running or Optuna-PRUNED trial does not. ``study``: its study's place among those of its cell (search-fold
    order); ``start_time``: when its run started (ms)."""

    value: float | None
    finished: bool
    study: int = 0
    start_time: int = 0
    run_id: str = ""
    ref: Any = field(default=None, compare=False)   # what the caller keeps with it (the run, the Optuna trial)

    def scored(self) -> bool:
        return self.finished and self.value is not None and math.isfinite(self.value)


def best_trial(outcomes: Iterable[SearchOutcome], mode: str) -> SearchOutcome | None:
    """THE best search trial (of a study, or of every study of a cell), which the refit trains, the sweep logs as
    ``best.*`` and a relaunch checks the refit against: the best last value of the objective (``mode`` max or min)
    among the :meth:`~SearchOutcome.scored` trials; ties go to the earlier study (search-fold order), then the run
    started last, then the smaller run id — the order the sweep always picked in, so a stored refit keeps its
    parameters. None when no trial has a value."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}: must be max or min")
    sign = -1.0 if mode == "max" else 1.0
    scored = [o for o in outcomes if o.scored()]
    return min(scored, key=lambda o: (sign * o.value, o.study, -o.start_time, o.run_id), default=None)


# ------------------------------------------------------------------------------------------------ settings
# A sweep YAML as a command amends it (``--set key=value``, the sweep, status and report alike), and which runs belong
# to those settings. The config-hash rule needs the trainer, which a report may not import; so the sweep records, on
# its parent run, the config hashes its plan expects per trial key (``expected_runs/<digest>.json``, under the tag
# ``mutexmatch.settings.<digest>``), and the report finds that record by the digest of the same amended YAML.
SET_OPTION = "--set"
# prose, report layout and the resources a trial holds change no trial's config (`--set resources.gpu=1` on a
# machine with a GPU must find the runs of the same YAML launched elsewhere)
SETTINGS_EXCLUDED = ("description", "tables", "figures", "resources")
EXPECTED_RUNS_DIR = "expected_runs"


def parse_set_item(item: str) -> tuple[list[str], object]:
    """``a.b=value`` → (``["a", "b"]``, the value read as YAML); ``ValueError`` naming the item."""
    from mutexmatch.yamlfile import read_set_value  # the one reader of --set values (PyYAML: imported late)

    key, sep, text = item.partition("=")
    if not sep or not key.strip() or any(not p for p in key.strip().split(".")):
        raise ValueError(f"{SET_OPTION} {item!r}: expected key=value with a dotted YAML key, e.g. "
                         f"{SET_OPTION} base.data.root=/mnt/datasets or {SET_OPTION} resources.gpu=1")
    return key.strip().split("."), read_set_value(item, text)


def _set_path(raw: dict, parts: list[str], value: object, item: str) -> None:
    node, i = raw, 0
    while i < len(parts) - 1:
        # the longest key present at this level: search.space keys are dotted run-config paths
        j = next((j for j in range(len(parts), i, -1) if ".".join(parts[i:j]) in node), i + 1)
        if j == len(parts):
            break
        key = ".".join(parts[i:j])
        child = node.setdefault(key, {})
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ValueError(f"{SET_OPTION} {item!r}: {'.'.join(parts[:j])}={child!r} is not a mapping, so it has "
                             f"no key {parts[j]!r}")
        node, i = child, j
    node[".".join(parts[i:])] = value


def apply_set_items(raw: dict, items: Iterable[str]) -> dict:
    """``raw`` (a parsed sweep YAML; edited in place and returned) with every ``key=value`` of ``items`` set: a key
    is a dotted path, and where a key itself holds dots (``search.space.algorithm.tau``) the longest one wins."""
    seen: dict[str, str] = {}
    for item in items:
        parts, value = parse_set_item(item)
        key = ".".join(parts)
        if key in seen:  # the last would silently win, while a key repeated in the YAML is refused
            raise ValueError(f"{SET_OPTION} {item!r}: {key} is already set by {SET_OPTION} {seen[key]!r}; give each "
                             "key once")
        seen[key] = item
        _set_path(raw, parts, value, item)
    return raw


def settings_digest(raw: dict) -> str:
    """A short sha256 of a sweep YAML mapping as amended by ``--set`` (:data:`SETTINGS_EXCLUDED` left out):
    what the sweep files its expected runs under and the report looks them up by."""
    import hashlib

    kept = {k: v for k, v in raw.items() if k not in SETTINGS_EXCLUDED}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expected_runs_artifact(digest: str) -> str:
    """``expected_runs/<digest>.json``: ``{"grid": {trial key: [hashes]}, "search": {trial key: [search hashes]},
    "refit": {trial key: [hashes]}}`` (refit once the searches are done)."""
    return f"{EXPECTED_RUNS_DIR}/{digest}.json"


def other_settings_label(cell: str, fold: int | str, config_hash: str) -> str:
    """``method=fixmatch/fold0 (config 1a2b3c4d)``: one ignored run in :func:`other_settings_line`."""
    return f"{trial_key(cell, fold)} (config {config_hash[:8] or '?'})"


def other_settings_line(labels: list[str], shown: int = 6) -> str:
    """``3 runs of other settings ignored: a/fold0 (config 1a2b3c4d), …`` — one line, '' when there are none. The
    sweep's summary, the status and the report all say it so."""
    if not labels:
        return ""
    more = f", … ({len(labels) - shown} more)" if len(labels) > shown else ""
    return (f"{len(labels)} run{'s' if len(labels) != 1 else ''} of other settings ignored: "
            f"{', '.join(labels[:shown])}{more}")


# ------------------------------------------------------------------------------------------------ artifacts
SPEC_ARTIFACT = "spec.yaml"               # parent run: the sweep YAML
LAUNCH_PLAN_ARTIFACT = "launch_plan.json"  # parent run: the trials of the launch (what --resume continues)
CONFIG_ARTIFACT = "config.yaml"           # trial run: the resolved run config
SPLIT_ARTIFACT = "split.json"             # trial run: the labeled split
WEIGHTS_DIR = "weights"                   # trial run: best_model.pt, final_model.pt
CHECKPOINTS_DIR = "checkpoints"           # trial run: the final checkpoint and its .sha256
CLASS_COUNTS_DIR = "class_counts"         # trial run: one class-count file per evaluation
CLASS_COUNTS_FILE = re.compile(r"^step_(\d+)\.json$")
HEATMAP_ARTIFACT = "class_counts/heatmap_final.png"  # trial run: the last evaluation's class counts, drawn
STATUS_ARTIFACT = "status.md"             # parent run: the sweep's status (orchestration.status), refreshed


def class_counts_artifact(step: int) -> str:
    """``class_counts/step_<step:08d>.json``: the pseudo- and complementary-label count matrices at ``step``."""
    return f"{CLASS_COUNTS_DIR}/step_{step:08d}.json"


# ------------------------------------------------------------------------------------------------ metrics
# Names the trainer logs, declared by the trainer (mutexmatch.metrics), that the layout's readers rely on.
TEST_ACC, TEST_BEST_ACC, VAL_ACC, VAL_BEST_ACC = M.TEST_ACC, M.TEST_BEST_ACC, M.VAL_ACC, M.VAL_BEST_ACC
PL_ACC = M.PL_ACC
TRAIN_LOSS = M.term_metric(M.TOTAL)  # logged at every evaluation: its history gives a run's logged steps
# Each loss term is logged as M.term_metric(term) for exactly the terms its algorithm declares (Algorithm.terms);
# the sweep validates layouts against those of the registered algorithms (sweep._check_report_layouts).
VALIDATION_METRICS = (VAL_ACC, VAL_BEST_ACC)  # the only legal search objectives (never test/*)
TRIALS_METRIC = "trials/"            # parent run: trials/finished, trials/failed, trials/running, ... (status)
# Accuracies are fractions (what the trainer computes, Tune's objective, every stored run); the tables and the
# MLflow UI show %. Each accuracy is also logged in % under its name + PERCENT_SUFFIX for the UI, and every reader
# that prints % converts with percent(), so the two never disagree.
PERCENT_SUFFIX = "_pct"
PERCENT_METRICS = (M.TEST_ACC, M.TEST_ACC_RAW, M.TEST_BEST_ACC, M.TEST_MEDIAN_ACC, M.VAL_ACC, M.VAL_BEST_ACC)


def percent(fraction: float) -> float:
    """An accuracy as the tables and the UI show it: 0.9123 → 91.23."""
    return 100.0 * fraction


def percent_metric(name: str) -> str:
    """``test/acc`` → ``test/acc_pct``: the name of an accuracy's twin in %."""
    return name + PERCENT_SUFFIX


def with_percent(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` plus the twin in % of each accuracy among them (:data:`PERCENT_METRICS`), with the tables' two
    decimals (the UI shows a value as logged; the fraction keeps full precision)."""
    return {**metrics, **{percent_metric(k): round(percent(v), 2) for k, v in metrics.items()
                          if k in PERCENT_METRICS}}

# ------------------------------------------------------------------------------------------------ store
SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file
def deleted_experiment(name: str, experiment_id: str, tracking_uri: str, *, restored: bool = False) -> str:
    """The one rule for an experiment in MLflow's trash, said the same way by sweep, status and report: the sweep
    restores it (``restored``); the readers name it and both ways back."""
    what = f"experiment {name!r} (id {experiment_id}) at {tracking_uri} was deleted (in MLflow's trash, runs kept)"
    if restored:
        return f"{what}; this launch restored it"
    return (f"{what}; launch its sweep again, which restores it, or run `MLFLOW_TRACKING_URI={tracking_uri} mlflow "
            f"experiments restore --experiment-id {experiment_id}`")


MLFLOW_TABLES = frozenset({"experiments", "runs"})  # what makes an SQLite file an MLflow store


def check_sqlite_store(tracking_uri: str, path: Path, label: str, *, create: bool = False) -> None:
    """``ValueError`` (one line naming ``label`` and ``tracking_uri``) unless ``path`` is an SQLite file with
    MLflow's tables. With ``create`` (the sweep, which makes the store) a missing or empty file passes too; never
    another program's database, to which MLflow would add its 65 tables. Reading commands (status, report) pass
    ``create=False``: they never turn a file into a store."""
    import sqlite3

    if path.is_dir():
        raise ValueError(f"{label} {tracking_uri!r}: {path} is a folder; give an SQLite file (e.g. mlflow.db)")
    if not path.is_file() and not create:
        raise ValueError(f"{label} {tracking_uri!r}: no such file at {path}, no MLflow store there; give the SQLite "
                         "file the sweep wrote (run the sweep first) or the store's URI")
    if not path.is_file():
        return
    try:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise ValueError(f"{label} {tracking_uri!r}: cannot read {path} ({e.strerror})") from None
    if not header:
        if create:
            return
        raise ValueError(f"{label} {tracking_uri!r}: {path} is empty, not an MLflow store; give the store the "
                         "sweep wrote (mlflow.db)")
    if header != SQLITE_HEADER:
        raise ValueError(f"{label} {tracking_uri!r}: {path} is not an SQLite database; give the MLflow "
                         "store the sweep wrote (mlflow.db)" + (" or a new file name" if create else ""))
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as e:
        raise ValueError(f"{label} {tracking_uri!r}: {path} cannot be read as SQLite ({e})") from None
    if tables and not MLFLOW_TABLES <= tables or not tables and not create:
        raise ValueError(f"{label} {tracking_uri!r}: {path} is an SQLite database but not an MLflow store "
                         f"(no {'/'.join(sorted(MLFLOW_TABLES))} tables); give the store the sweep wrote"
                         + (" or a new file name" if create else ""))


# The first requests to a tracking server: MLflow's defaults (7 retries with exponential back-off, 120 s per
# request) wait about four minutes in silence before a dead server's error. Three tries of 5 s with a 1 s back-off
# answer within ~20 s; a user's own MLFLOW_HTTP_REQUEST_* settings win.
FAST_FAIL_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                      "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


# Artifacts of an `mlflow server --artifacts-destination s3://...` come through the server's proxy, never through a
# presigned URL straight to the store: MLflow 3.17's client otherwise downloads every proxied artifact from such a
# server by presigned URLs that name the store as the *server* reaches it (http://minio:9000 in docker/compose.yaml),
# which a workstation cannot resolve — a report build then retries for minutes (found by tests/docker/
# test_local_cluster.py). Uploads already go through the proxy by default. A user's own setting wins.
PROXY_ARTIFACTS_ENV = {"MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false"}


def prefer_artifact_proxy() -> None:
    """Set :data:`PROXY_ARTIFACTS_ENV` in ``os.environ`` unless the user set it (before any artifact download)."""
    for key, value in PROXY_ARTIFACTS_ENV.items():
        os.environ.setdefault(key, value)


@contextmanager
def bounded_http(tracking_uri: str, label: str) -> Iterator[None]:
    """Within: MLflow's HTTP retries bounded by :data:`FAST_FAIL_HTTP_ENV` (unless the user set them), and a
    server that does not answer becomes one ``ValueError`` line naming ``tracking_uri`` (``label`` says where it came
    from). The sweep and the report both open a store through it."""
    from mlflow.exceptions import MlflowException

    saved = {k: os.environ.get(k) for k in FAST_FAIL_HTTP_ENV}
    os.environ.update({k: v for k, v in FAST_FAIL_HTTP_ENV.items() if saved[k] is None})
    try:
        yield
    except (MlflowException, OSError) as e:       # requests' connection errors are OSErrors
        code = re.search(r"error code (\d{3})", str(e))
        if code:
            raise ValueError(f"{label} {tracking_uri!r}: answers MLflow's API with HTTP {code.group(1)}: not an "
                             "MLflow tracking server, or not its address") from None
        raise ValueError(f"{label} {tracking_uri!r}: the tracking server does not answer ({_short_reason(e)}); "
                         "start it (`mlflow server`) or pass the store's URI") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


def _short_reason(err: BaseException) -> str:
    """The cause in a few words ("Connection refused", "Read timed out") from MLflow's long retry message."""
    text = str(err)
    for pattern in (r"\[Errno -?\d+\] ([^'\")\]]+)", r"(Read timed out|Connection refused|Name or service not known)"):
        found = re.search(pattern, text)
        if found:
            return found.group(1).strip().rstrip(".")
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return first[:160]


# ------------------------------------------------------------------------------------------------ MLflow UI
# What the MLflow UI shows at first open. MLflow 3.17 opens an experiment on its GenAI overview unless the sidebar's
# "Model training" switch (kept per browser) or the URL says otherwise, so every printed link names the runs view
# with ``workflowType=machine_learning``; the experiment also carries MLflow's own kind tag (older MLflow 3 UIs
# choose the tab by it) and a shared view (MLflow's "Share" button stores one the same way) with the columns that
# matter, which the printed link opens.
EXPERIMENT_KIND, EXPERIMENT_KIND_ML = "mlflow.experimentKind", "custom_model_development"
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # + a key: the view's JSON, opened by ?viewStateShareKey=<key>
RUNS_VIEW_KEY = "mutexmatch-trials"
RUN_COLOR = "mlflow.runColor"       # MLflow's own tag: the run's colour in the table and the charts
SOURCE_NAME, SOURCE_TYPE = "mlflow.source.name", "mlflow.source.type"  # MLflow's Source column
SOURCE_GIT_COMMIT = "mlflow.source.git.commit"                        # MLflow's Version column
UI_HOST, UI_PORT = "127.0.0.1", 5000
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


def source_tags(command: str, commit: str) -> dict[str, str]:
    """MLflow's Source and Version columns: the command that made the run and the code's commit."""
    return {SOURCE_NAME: command[:500], SOURCE_TYPE: "LOCAL", SOURCE_GIT_COMMIT: commit}


DATASET_CONTEXT = "mlflow.data.context"  # MLflow's own input tag: what the dataset was used for


def dataset_input(data: dict, split_digest: str, run_id: str) -> dict[str, str]:
    """MLflow's Dataset column for a trial: the dataset and its label budget, identified by the labeled split's
    digest (MLflow keeps 36 characters; 16 identify a split) and found in the run's ``split.json``."""
    labels = data.get("num_labels")
    return {"name": f"{data.get('dataset', '?')} ({labels} labels)" if labels else str(data.get("dataset", "?")),
            "digest": split_digest[:16], "source_type": "local",
            "source": json.dumps({"uri": f"runs:/{run_id}/{SPLIT_ARTIFACT}"})}


def runs_view(axes: Iterable[str]) -> dict:
    """The shared view of the trial runs: one flat row per trial (the filter leaves the parent rows out, so nothing
    is collapsed), sorted by name, with the final and best test accuracy in %, the level on each axis and the fold
    as columns beside the run name, widened so the names fit."""
    run_name = "attributes.`Run Name`"
    metrics = [f"metrics.`{percent_metric(TEST_ACC)}`", f"metrics.`{percent_metric(TEST_BEST_ACC)}`"]
    levels = [f"tags.`{axis_tag(a)}`" for a in axes]
    columns = [*metrics, *levels, f"tags.`{FOLD}`", "attributes.`Source`"]
    # widths in pixels: the header of a tag column is the tag's name, which MLflow cuts to the column
    widths = {run_name: 290, **{m: 140 for m in metrics}, **{t: 195 for t in levels}, f"tags.`{FOLD}`": 130}
    return {"searchFilter": f"tags.`{ROLE}` = '{ROLE_TRIAL}'", "orderByKey": "tags.`mlflow.runName`",
            "orderByAsc": True, "selectedColumns": columns, "columnOrder": [run_name, *columns],
            "columnWidths": widths}


def experiment_tags(axes: Iterable[str]) -> dict[str, str]:
    """The tags a sweep's experiment carries: MLflow's kind (model training, not GenAI) and :func:`runs_view`."""
    return {EXPERIMENT_KIND: EXPERIMENT_KIND_ML, SHARED_VIEW_TAG + RUNS_VIEW_KEY: json.dumps(runs_view(axes))}


def runs_view_url(base: str, experiment_id: str) -> str:
    """The runs view of experiment ``experiment_id`` at ``base`` (a server's address), opened on the shared view."""
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={RUNS_VIEW_KEY}")


def ui_hint(tracking_uri: str, experiment_id: str) -> str:
    """Where to look at the runs: the runs view of an ``mlflow server`` (not its GenAI overview), or for a SQLite
    store the command that serves it on this machine only, and the same view's address once it runs."""
    if tracking_uri.startswith(("http://", "https://")):
        return runs_view_url(tracking_uri, experiment_id)
    return (f"mlflow ui --backend-store-uri {tracking_uri} --host {UI_HOST} --port {UI_PORT}, then open "
            f"{runs_view_url(f'http://{UI_HOST}:{UI_PORT}', experiment_id)}")


TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
DEFAULT_DB = "mlflow.db"


OPTUNA_DB = "optuna.db"  # the search studies, beside a SQLite MLflow store


def optuna_storage_url(storage: str | None, tracking_uri: str, project_dir: str | Path) -> str:
    """Where the Optuna studies live: ``search.storage`` when set, else ``optuna.db`` beside the MLflow SQLite file,
    else (a tracking server) in the project folder. Only the sweep driver opens it (the searcher runs there)."""
    if storage:
        return storage
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:///:memory:"):
        return f"sqlite:///{Path(tracking_uri[len('sqlite:///'):].partition('?')[0]).parent / OPTUNA_DB}"
    return f"sqlite:///{Path(project_dir).resolve() / OPTUNA_DB}"


def study_name(sweep: str, key: str, search_hash: str) -> str:
    """An Optuna study's name: the sweep, the searched trial key and the search's hash (a changed search is a new
    study; a relaunch of the same one continues it)."""
    return f"{sweep}:{key}:{search_hash}"


def resolve_tracking_uri(uri: str | None, project_dir: str | Path | None = None, *, writable: bool = False) -> str:
    """The store a command uses (sweep, report, benchmarks), as a URI any process can use from any folder.

    ``uri`` is ``--tracking-uri``; without it ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<project>/mlflow.db`` —
    the same rule in every command, so a report reads the store its sweep wrote. ``project_dir`` (default: the
    current directory) anchors relative paths: a relative ``sqlite:///`` path or a bare ``*.db`` path becomes an
    absolute ``sqlite:///`` URI (Ray trials run inside a temporary folder); an absolute one is kept as written.
    ``http(s)://`` (an ``mlflow server``) and other URIs pass through unchanged, except that ``writable`` (the
    sweep) refuses MLflow 3's plain file store (``./mlruns``, ``file:``), which raises in every process unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set.
    """
    source = "--tracking-uri"
    if uri is None:
        uri, source = os.environ.get(TRACKING_URI_ENV) or None, f"${TRACKING_URI_ENV}"
    base = Path(project_dir if project_dir is not None else Path.cwd()).resolve()
    if uri is None:
        return f"sqlite:///{base / DEFAULT_DB}"
    if uri.startswith("sqlite:///") or ("://" not in uri and uri.endswith(".db")):
        raw = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri
        path, sep, query = raw.partition("?")
        if path in ("", ":memory:"):  # each process (trial, report) would see its own empty store
            raise ValueError(f"{source}={uri!r}: an in-memory store is gone when the command ends and no other "
                             "process sees it; give a file, e.g. sqlite:////abs/path/mlflow.db")
        if path != ":memory:" and not Path(path).is_absolute():
            path = str((base / path).resolve())
        return f"sqlite:///{path}{sep}{query}"
    if writable and (uri.startswith("file:") or "://" not in uri):
        raise ValueError(f"{source}={uri!r}: use sqlite:////abs/path/mlflow.db (one machine) or "
                         "http://host:port (an mlflow server); MLflow 3 refuses the plain file store")
    return uri
