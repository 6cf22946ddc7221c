"""The MLflow layout of a sweep (fixed; the reports read it — see orchestration/README.md, "MLflow layout"). Every name in it
is defined in :mod:`orchestration.contract`.

- one MLflow experiment per sweep YAML, named by its ``name``;
- one *parent* run per sweep launch (``mutexmatch.role=sweep``, spec hash and path, git commit, the YAML as the
  artifact ``spec.yaml``), open (RUNNING) while the launch runs;
- one *child* run per trial (``mlflow.parentRunId``, ``mutexmatch.role=trial``, ``mutexmatch.kind``, the cell and
  its axes, fold, variant, config hash, split digest, git commit, trial id), named ``<cell id>/fold<k>``;
  params = the resolved RunConfig flattened with dots; metrics at ``step=`` the training step; artifacts
  ``config.yaml``, ``split.json``, ``weights/{best,final}_model.pt``, ``class_counts/step_<step>.json``, and the
  final checkpoint under ``checkpoints/``.

Only :class:`mlflow.MlflowClient` is used (no fluent ``mlflow.start_run`` state), so the driver and every trial
process address runs by id and a restarted trial continues *its* run. Terminal statuses: FINISHED (trained to the
end, or stopped early by ASHA — tagged ``mutexmatch.early_stopped=true``), FAILED (raised), KILLED (interrupted).
No run is left RUNNING: the trial ends its own run, the driver reconciles what a dead process could not end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import yaml

from mutexmatch.callbacks import EvalEvent, RunSummary, StartEvent
from mutexmatch.dotted import flatten_dotted
from mutexmatch.runfolder import checkpoint_pair

from orchestration import contract as C
from orchestration.env import apply_closed_network_env

apply_closed_network_env()

from mlflow import MlflowClient  # noqa: E402  (telemetry must be off before mlflow is imported)
from mlflow.entities import (Dataset, DatasetInput, InputTag, Metric, Param, Run, RunTag,  # noqa: E402
                             ViewType)

__all__ = [
    "resolve_tracking_uri", "artifact_location", "ensure_experiment", "git_commit", "flatten_params",
    "create_parent_run", "find_resumable_parent", "find_trial_run", "iter_runs",
    "finished_grid_hashes", "finished_search_runs", "finished_runs_by_hash", "link_reused", "results_run", "end_run", "kill_dead_launches", "live_launches",
    "end_open_children",
    "log_metrics", "log_params_and_tags", "ParentInfo", "TrialRun",
]

_PAGE = 1000


def resolve_tracking_uri(uri: str | None, project_dir: Path, *, create: bool = True) -> str:
    """The store the sweep writes and its trials use from any working directory: the contract's rule
    (:func:`orchestration.contract.resolve_tracking_uri`: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else
    ``sqlite:///<project>/mlflow.db``), refusing MLflow 3's plain file store and an SQLite path that holds something
    else than an MLflow store (:func:`orchestration.contract.check_sqlite_store`; ``create=False`` for a command
    that only reads: a missing or empty file is refused too, never made a store)."""
    resolved = C.resolve_tracking_uri(uri, project_dir, writable=True)
    if resolved.startswith("sqlite:///") and not resolved.startswith("sqlite:///:memory:"):
        C.check_sqlite_store(uri or resolved, Path(resolved[len("sqlite:///"):].partition("?")[0]), "--tracking-uri",
                             create=create)
    return resolved


def artifact_location(tracking_uri: str) -> str | None:
    """For a SQLite store: ``<db folder>/mlruns`` as an absolute file URI, so artifacts land beside the database
    whatever the working directory of the process that creates the experiment. Servers choose their own."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri[len("sqlite:///"):]).parent / "mlruns").as_uri()
    return None


def ensure_experiment(client: MlflowClient, name: str, tracking_uri: str, tags: Mapping[str, str] = {}) -> str:
    """The id of experiment ``name``, created (or restored from the trash) if needed, with ``tags`` set (the UI's
    :func:`orchestration.contract.experiment_tags`, refreshed at every launch). Called in the driver before any
    trial starts, so trials never race on creating the SQLite schema or the experiment."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        experiment_id = client.create_experiment(name, artifact_location=artifact_location(tracking_uri))
    else:
        experiment_id = exp.experiment_id
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(experiment_id)
            print(f"[sweep] {C.deleted_experiment(name, experiment_id, tracking_uri, restored=True)}", flush=True)
    for key, value in tags.items():
        client.set_experiment_tag(experiment_id, key, value)
    return experiment_id


def git_commit(project_dir: Path) -> str:
    """``$MUTEXMATCH_GIT_COMMIT`` if set (a job's working dir has no .git), else ``git rev-parse HEAD`` with a
    ``-dirty`` suffix when tracked files differ from it, else ``unknown``."""
    if os.environ.get("MUTEXMATCH_GIT_COMMIT"):
        return os.environ["MUTEXMATCH_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project_dir, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=project_dir,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The resolved RunConfig as MLflow params: ``algorithm.tau`` → ``"0.95"`` (``str`` of each leaf value)."""
    return {k: json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
            for k, v in flatten_dotted(config, prefix).items()}


def iter_runs(client: MlflowClient, experiment_id: str, filter_string: str = "",
              order_by: list[str] | None = None) -> Iterator[Run]:
    """Every active run matching ``filter_string``, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string, ViewType.ACTIVE_ONLY, max_results=_PAGE,
                                  order_by=order_by, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass(frozen=True)
class ParentInfo:
    run_id: str
    launch_id: str
    storage: str


def create_parent_run(client: MlflowClient, experiment_id: str, *, launch_id: str, spec_path: Path,
                      spec_text: str, spec_hash: str, commit: str, storage: str, smoke: bool,
                      command: str) -> ParentInfo:
    """The parent run of one sweep launch, RUNNING until :func:`end_run`. ``mutexmatch.driver_*`` tags let a later
    launch on the same host tell whether this driver is still alive."""
    tags = {C.ROLE: C.ROLE_SWEEP, C.SPEC_HASH: spec_hash, C.SPEC_PATH: str(spec_path), C.GIT_COMMIT: commit,
            C.LAUNCH_ID: launch_id, C.STORAGE: storage, C.SMOKE: str(smoke).lower(),
            C.DRIVER_HOST: socket.gethostname(), C.DRIVER_PID: str(os.getpid()), C.COMMAND: command[:5000],
            **C.source_tags(str(spec_path), commit)}
    run = client.create_run(experiment_id, tags=tags, run_name=C.parent_run_name(Path(spec_path).stem, datetime.now(),
                                                                                  smoke))
    client.log_text(run.info.run_id, spec_text, C.SPEC_ARTIFACT)
    return ParentInfo(run.info.run_id, launch_id, storage)


def find_resumable_parent(client: MlflowClient, experiment_id: str, *, spec_hash: str, storage: str,
                          smoke: bool) -> Run | None:
    """The newest launch of this spec (same hash, storage and smoke flag) — what ``--resume`` continues."""
    flt = (f"tags.`{C.ROLE}` = '{C.ROLE_SWEEP}' AND tags.`{C.SPEC_HASH}` = '{spec_hash}' AND "
           f"tags.`{C.SMOKE}` = '{str(smoke).lower()}'")
    for run in iter_runs(client, experiment_id, flt, order_by=["attributes.start_time DESC"]):
        if run.data.tags.get(C.STORAGE) == storage:
            return run
    return None


def find_trial_run(client: MlflowClient, experiment_id: str, trial_id: str, launch_id: str) -> Run | None:
    """The run of Tune trial ``trial_id`` of launch ``launch_id`` (Tune keeps trial ids across restarts and
    ``Tuner.restore``; the launch id guards against the rare id reused by another launch)."""
    flt = f"tags.`{C.TRIAL_ID}` = '{trial_id}' AND tags.`{C.LAUNCH_ID}` = '{launch_id}'"
    runs = list(iter_runs(client, experiment_id, flt, order_by=["attributes.start_time ASC"]))
    return runs[0] if runs else None


def finished_grid_hashes(client: MlflowClient, experiment_id: str, kind: str = C.KIND_GRID) -> dict[str, set[str]]:
    """``<cell id>/fold<k>`` → config hashes of FINISHED trial runs of ``kind`` (what a relaunch may skip)."""
    flt = f"{C.trials_filter(kind)} AND attributes.status = 'FINISHED'"
    done: dict[str, set[str]] = {}
    for run in iter_runs(client, experiment_id, flt):
        t = run.data.tags
        done.setdefault(C.trial_key(t.get(C.CELL), t.get(C.FOLD)), set()).add(t.get(C.CONFIG_HASH, ""))
    return done


def finished_runs_by_hash(client: MlflowClient, hashes: Iterable[str]) -> dict[str, Run]:
    """Config hash (of ``hashes``) → the newest FINISHED grid or refit run with it in any experiment of the store,
    links to reused runs left out (their source is found itself): what a new sweep reuses instead of training."""
    wanted = set(hashes)
    experiments = [e.experiment_id for e in client.search_experiments(ViewType.ACTIVE_ONLY)]
    found: dict[str, Run] = {}
    for kind in (C.KIND_GRID, C.KIND_REFIT):
        flt = f"{C.trials_filter(kind)} AND attributes.status = 'FINISHED'"
        for i in range(0, len(experiments), 100):  # MLflow searches at most 100 experiments at once
            token = None
            while True:
                page = client.search_runs(experiments[i:i + 100], flt, ViewType.ACTIVE_ONLY, max_results=_PAGE,
                                          page_token=token)
                for run in page:
                    h, tags = run.data.tags.get(C.CONFIG_HASH), run.data.tags
                    if h in wanted and C.REUSED_FROM not in tags and (
                            h not in found or run.info.start_time > found[h].info.start_time):
                        found[h] = run
                token = page.token
                if not token:
                    break
    return found


def link_reused(client: MlflowClient, experiment_id: str, *, kind: str, cell_levels: Iterable[tuple[str, str]],
                cell_id: str, fold: int, source: Run) -> str:
    """A FINISHED link run in ``experiment_id`` standing for a trial whose config ``source`` already trained
    (tags: :func:`orchestration.contract.reused_trial_tags`; no metric, param or artifact copied). Its run id."""
    exp, levels = client.get_experiment(source.info.experiment_id), list(cell_levels)
    tags = C.reused_trial_tags(kind=kind, cell_levels=levels, cell_id=cell_id, fold=fold,
                               source_id=source.info.run_id, source_tags=source.data.tags, source_experiment=exp.name,
                               source_artifact_uri=source.info.artifact_uri or "")
    run = client.create_run(experiment_id, tags=tags, run_name=f"{C.trial_run_name(levels, fold, kind)} · reused")
    end_run(client, run.info.run_id, "FINISHED")
    return run.info.run_id


def results_run(client: MlflowClient, run: Run) -> Run:
    """The run holding ``run``'s results: itself, or for a reused trial's link the run it names."""
    source = C.results_run_id(run.info.run_id, run.data.tags)
    return run if source == run.info.run_id else client.get_run(source)


def finished_search_runs(client: MlflowClient, experiment_id: str, search_hash: str) -> list[Run]:
    flt = (f"{C.trials_filter(C.KIND_SEARCH)} AND tags.`{C.SEARCH_HASH}` = '{search_hash}' AND "
           "attributes.status = 'FINISHED'")
    return list(iter_runs(client, experiment_id, flt))


def end_run(client: MlflowClient, run_id: str, status: str) -> None:
    client.set_terminated(run_id, status, end_time=int(time.time() * 1000))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_open_children(client: MlflowClient, experiment_id: str, parent_run_id: str, status: str,
                      keep: set[str] = frozenset()) -> list[Run]:
    """End every RUNNING child of ``parent_run_id`` (except run ids in ``keep``) with ``status``; return them."""
    flt = f"tags.`{C.PARENT_RUN_ID}` = '{parent_run_id}' AND attributes.status = 'RUNNING'"
    ended = [r for r in iter_runs(client, experiment_id, flt) if r.info.run_id not in keep]
    for run in ended:
        client.set_tag(run.info.run_id, C.ENDED_BY, "driver")
        end_run(client, run.info.run_id, status)
    return ended


def kill_dead_launches(client: MlflowClient, experiment_id: str) -> list[Run]:
    """Parent runs left RUNNING by a driver on this host that no longer exists (SIGKILL, power loss): end them and
    their RUNNING children as KILLED, so the store never shows work as running that is not. Returns the parents."""
    host = socket.gethostname()
    flt = f"tags.`{C.ROLE}` = '{C.ROLE_SWEEP}' AND attributes.status = 'RUNNING'"
    dead = []
    for run in iter_runs(client, experiment_id, flt):
        t = run.data.tags
        pid = t.get(C.DRIVER_PID, "")
        if t.get(C.DRIVER_HOST) != host or not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(
                int(pid)):
            continue
        end_open_children(client, experiment_id, run.info.run_id, "KILLED")
        client.set_tag(run.info.run_id, C.ENDED_BY, "next launch (driver process was gone)")
        end_run(client, run.info.run_id, "KILLED")
        dead.append(run)
    return dead


def live_launches(client: MlflowClient, experiment_id: str) -> tuple[list[Run], list[Run]]:
    """Parent runs of other launches still RUNNING: (those whose driver is alive on this host, those on other hosts,
    whose liveness cannot be seen from here). Call after :func:`kill_dead_launches`."""
    host, here, elsewhere = socket.gethostname(), [], []
    flt = f"tags.`{C.ROLE}` = '{C.ROLE_SWEEP}' AND attributes.status = 'RUNNING'"
    for run in iter_runs(client, experiment_id, flt):
        pid = run.data.tags.get(C.DRIVER_PID, "")
        if run.data.tags.get(C.DRIVER_HOST) != host:
            elsewhere.append(run)
        elif pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
            here.append(run)
    return here, elsewhere


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float], step: int,
                tags: Mapping[str, str] = {}) -> None:
    """``metrics`` at ``step``; ``tags`` go with the last request, so they are set only once every metric is."""
    ts = int(time.time() * 1000)
    batch = [Metric(k, float(v), ts, step) for k, v in metrics.items()]
    chunks = [batch[i:i + 1000] for i in range(0, len(batch), 1000)] or [[]]  # MLflow's per-request limit
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        client.log_batch(run_id, metrics=chunk, tags=[RunTag(k, v) for k, v in tags.items()] if last else [])


def log_params_and_tags(client: MlflowClient, run_id: str, params: Mapping[str, str],
                        tags: Mapping[str, str] = {}) -> None:
    ps = [Param(k, v) for k, v in params.items()]
    ts = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, max(len(ps), len(ts), 1), 100):  # MLflow accepts at most 100 params per request
        client.log_batch(run_id, params=ps[i:i + 100], tags=ts[i:i + 100])


class TrialRun:
    """One Tune trial's MLflow run, across the trial's attempts: the bookkeeping of :func:`orchestration.trainable
    .run_trial` (find or create the run, one attempt's params and tags, the trainer's events, how the attempt ended).

    A restarted trial finds its run by the trial id (:func:`find_trial_run`) and continues it; evaluations an earlier
    attempt logged (up to the :data:`~orchestration.contract.LAST_STEP` tag, written in the request that logs their
    metrics) are not logged twice. A run already FINISHED is :attr:`finished`: the trial must not train again."""

    def __init__(self, client: MlflowClient, run: Run, attempt: int, last_logged_step: int):
        self.client = client
        self.run_id = run.info.run_id
        self.finished = run.info.status == "FINISHED"
        self.attempt = attempt
        self.last_logged_step = last_logged_step
        self._run = run
        self._last_counts: dict | None = None    # the latest evaluation's class counts, drawn at the end

    @classmethod
    def open(cls, client: MlflowClient, experiment_id: str, *, trial_id: str, launch_id: str,
             tags: Mapping[str, str], run_name: str) -> "TrialRun":
        """The trial's run, created with ``tags`` on its first attempt; an unfinished one is set RUNNING again."""
        run = find_trial_run(client, experiment_id, trial_id, launch_id)
        if run is None:
            return cls(client, client.create_run(experiment_id, tags=dict(tags), run_name=run_name), 1, -1)
        last = _last_logged_step(client, run)
        if run.info.status == "FINISHED":
            return cls(client, run, int(run.data.tags.get(C.ATTEMPTS, "1")), last)
        client.update_run(run.info.run_id, "RUNNING")
        client.set_tag(run.info.run_id, C.STOPPED, "false")
        return cls(client, run, int(run.data.tags.get(C.ATTEMPTS, "0")) + 1, last)

    def final_metrics(self) -> dict[str, float]:
        """A FINISHED run's last metrics and step (what the trial reports to Tune instead of training again)."""
        return {**self._run.data.metrics, "step": max(self.last_logged_step, 0)}

    def start_attempt(self, config: Mapping[str, Any], *, node_id: str, tune_checkpoint: bool) -> None:
        """This attempt's tags, and the config's params not logged yet: MLflow params are immutable, and
        ``output_dir`` or the device may differ between attempts (another node), so the first attempt's stay."""
        logged = self._run.data.params
        params = {k: v for k, v in flatten_params(config).items() if k not in logged}
        log_params_and_tags(self.client, self.run_id, params, {
            C.ATTEMPTS: str(self.attempt), C.WORKER_PID: str(os.getpid()), C.NODE_ID: node_id,
            C.attempt_tag(self.attempt, "node_id"): node_id, C.attempt_tag(self.attempt, "host"): socket.gethostname(),
            C.attempt_tag(self.attempt, "tune_checkpoint"): "yes" if tune_checkpoint else "none"})

    def log_start(self, event: StartEvent) -> None:
        tags = {C.SPLIT_DIGEST: event.split_digest, C.attempt_tag(self.attempt, "start_step"): str(event.step)}
        log_params_and_tags(self.client, self.run_id, {}, tags)
        config_text = event.run.config.read_text()
        self.client.log_text(self.run_id, config_text, C.CONFIG_ARTIFACT)
        self.client.log_text(self.run_id, event.run.split.read_text(), C.SPLIT_ARTIFACT)
        self._log_dataset((yaml.safe_load(config_text) or {}).get("data", {}), event.split_digest)

    def _log_dataset(self, data: dict, split_digest: str) -> None:
        """MLflow's Dataset column: the training data, identified by the split's digest (once per split)."""
        logged = self._run.inputs.dataset_inputs if self._run.inputs else []
        if any(d.dataset.digest == split_digest[:16] for d in logged):
            return
        dataset = Dataset(**C.dataset_input(data, split_digest, self.run_id))
        self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset, [InputTag(C.DATASET_CONTEXT, "train")])])

    def log_eval(self, event: EvalEvent) -> None:
        """The evaluation's metrics and class counts, unless an earlier attempt logged this step."""
        if event.step <= self.last_logged_step:
            return
        log_metrics(self.client, self.run_id, C.with_percent(event.metrics), event.step,
                    tags={C.LAST_STEP: str(event.step)})
        counts = {"step": event.step, **{k: v.tolist() for k, v in event.class_counts.items()}}
        self.client.log_text(self.run_id, json.dumps(counts), C.class_counts_artifact(event.step))
        self.last_logged_step = event.step
        self._last_counts = event.class_counts

    def log_end(self, summary: RunSummary) -> None:
        """The best and final weights; with the final weights, the final checkpoint and its checksum."""
        for path in (summary.best_weights, summary.final_weights):
            if path is not None and Path(path).exists():
                self.client.log_artifact(self.run_id, str(path), C.WEIGHTS_DIR)
        if summary.final_checkpoint is not None and summary.final_weights is not None:
            for f in checkpoint_pair(summary.final_checkpoint):
                self.client.log_artifact(self.run_id, str(f), C.CHECKPOINTS_DIR)
        self._log_heatmap()

    def _log_heatmap(self) -> None:
        """The last evaluation's class counts as a heat-map PNG (the report's own drawing), so the MLflow UI shows
        the matrices instead of raw JSON. A picture never fails a trial: a drawing error is a warning."""
        if not self._last_counts or "pseudo_label_counts" not in self._last_counts:
            return
        try:
            from reports.figures import plot_heatmaps

            with tempfile.TemporaryDirectory(prefix="mm_heatmap_") as tmp:
                files = plot_heatmaps(np.asarray(self._last_counts["pseudo_label_counts"]),
                                      self._last_counts.get("comp_label_counts"), Path(tmp) / "heatmap_final")
                png = next(f for f in files if f.suffix == ".png")
                self.client.log_artifact(self.run_id, str(png), str(Path(C.HEATMAP_ARTIFACT).parent))
        except Exception as e:  # noqa: BLE001 - see the docstring
            warnings.warn(f"run {self.run_id}: class-count heat map not drawn ({type(e).__name__}: {e})",
                          RuntimeWarning, stacklevel=2)

    def stopped(self, best_weights: Path) -> None:
        """Tune stopped the trial (ASHA or an interrupted sweep): keep its best weights; the run stays RUNNING for
        the driver, which alone can tell the two apart (ending it here raced with the driver's reconciliation)."""
        if best_weights.exists():
            self.client.log_artifact(self.run_id, str(best_weights), C.WEIGHTS_DIR)

    def failed(self, error: BaseException) -> None:
        self.client.set_tag(self.run_id, C.ERROR, "".join(traceback.format_exception_only(error)).strip()[:5000])
        end_run(self.client, self.run_id, "FAILED")

    def finish(self, overhead_s: Mapping[str, float]) -> None:
        """FINISHED, with the seconds orchestration added (``mutexmatch.overhead.<what>`` tags)."""
        log_params_and_tags(self.client, self.run_id, {},
                            {C.overhead_tag(what): f"{s:.3f}" for what, s in overhead_s.items()})
        end_run(self.client, self.run_id, "FINISHED")


def _last_logged_step(client: MlflowClient, run: Run) -> int:
    """The step of the run's last logged evaluation, -1 if none. Runs logged before the ``LAST_STEP`` tag existed
    are read from the history of the metric every evaluation logs."""
    if C.LAST_STEP in run.data.tags:
        return int(run.data.tags[C.LAST_STEP])
    history = client.get_metric_history(run.info.run_id, C.TRAIN_LOSS)
    return max((m.step for m in history), default=-1)
