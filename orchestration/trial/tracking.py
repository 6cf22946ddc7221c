"""The MLflow layout of a sweep (fixed; the reports read it — see orchestration/README.md, "MLflow layout"). Every name in it
is defined in :mod:`orchestration.contract`.

- one MLflow experiment per sweep YAML, named by its ``name``;
- one *parent* run per sweep launch (``mutexmatch.role=sweep``, spec hash and path, git commit, the YAML as the
  artifact ``spec.yaml``), open (RUNNING) while the launch runs;
- one *child* run per trial (``mlflow.parentRunId``, ``mutexmatch.role=trial``, ``mutexmatch.kind``, the cell and
  its axes, fold, variant, config hash, split digest, git commit, trial id), named ``<cell id>/fold<k>``;
  params = the resolved RunConfig flattened with dots; metrics at ``step=`` the training step; artifacts
  ``config.yaml``, ``split.json``, ``dataset.json``, ``weights/{best,final}_model.pt``,
  ``class_counts/step_<step>.json``, ``confusion_matrix.json`` and the final checkpoint under ``checkpoints/``.

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
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from mutexmatch.training import EvalEvent, RunFolder, RunSummary, StartEvent
from mutexmatch.dotted import flatten_dotted
from mutexmatch.yamlfile import load_text
from mutexmatch.training import checkpoint_pair

from orchestration import contract as C
from orchestration.store import mlflow_ui
from orchestration.runtime.env import apply_closed_network_env
from orchestration.runtime.processes import start_time
from orchestration.store.store import Store, end_run
from orchestration.store.concurrent import create_or_get_experiment, idempotent
from orchestration.store.location import check_artifact_home
from orchestration.trial.model_log import MODEL_KINDS, log_classifier
from orchestration.trial.system_metrics import TrialSystemMetrics

apply_closed_network_env()

from mlflow import MlflowClient  # noqa: E402  (telemetry must be off before mlflow is imported)
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, Run, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

__all__ = [
    "resolve_tracking_uri", "artifact_location", "ensure_experiment", "git_commit", "flatten_params",
    "create_parent_run", "link_reused", "end_run",
    "log_metrics", "log_params_and_tags", "ParentInfo", "TrialRun", "run_deleted",
]

def resolve_tracking_uri(uri: str | None, project_dir: Path, *, create: bool = True, write: bool | None = None) -> str:
    """The store the sweep writes and its trials use from any working directory: the contract's rule
    (:func:`orchestration.contract.resolve_tracking_uri`: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else
    ``sqlite:///<project>/mlflow.db``), refusing MLflow 3's plain file store and an SQLite path that holds something
    else than an MLflow store (:func:`orchestration.contract.check_sqlite_store`; ``create=False`` for a command
    that only reads: a missing or empty file is refused too, never made a store; ``write=False``: a read-only file
    passes, as for a dry run)."""
    resolved = C.resolve_tracking_uri(uri, project_dir, writable=True)
    if resolved.startswith("sqlite:///") and not resolved.startswith("sqlite:///:memory:"):
        C.check_sqlite_store(uri or resolved, Path(resolved[len("sqlite:///"):].partition("?")[0]), "--tracking-uri",
                             create=create, write=write)
    return resolved


def artifact_location(tracking_uri: str) -> str | None:
    """For a SQLite store: ``<db folder>/mlruns`` as an absolute file URI, so artifacts land beside the database
    whatever the working directory of the process that creates the experiment. Servers choose their own."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri[len("sqlite:///"):]).parent / "mlruns").as_uri()
    return None


def ensure_experiment(client: MlflowClient, name: str, tracking_uri: str, tags: Mapping[str, str] = {}) -> str:
    """The id of experiment ``name``, created (or restored from the trash) if needed, with ``tags`` set (the UI's
    :func:`orchestration.store.mlflow_ui.experiment_tags`, refreshed at every launch). Called in the driver before any
    trial starts, so trials never race on creating the SQLite schema or the experiment. A copied SQLite store first
    gets its own artifact folder, or is refused (:func:`orchestration.store.location.check_artifact_home`)."""
    check_artifact_home(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:  # another launch of a tracking server may create it at the same moment: the same experiment
        experiment_id = create_or_get_experiment(client, name, artifact_location(tracking_uri))
    else:
        experiment_id = exp.experiment_id
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(experiment_id)
            print(f"[sweep] {C.deleted_experiment(name, experiment_id, tracking_uri, restored=True)}", flush=True)
    for key, value in tags.items():
        idempotent(lambda: client.set_experiment_tag(experiment_id, key, value))
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


@dataclass(frozen=True)
class ParentInfo:
    run_id: str
    launch_id: str
    storage: str


def create_parent_run(store: Store, *, launch_id: str, spec_path: Path, spec_text: str, spec_hash: str,
                      commit: str, storage: str, smoke: bool, command: str) -> ParentInfo:
    """The parent run of one sweep launch, RUNNING until :func:`end_run`. ``mutexmatch.driver_*`` tags let a later
    launch on the same host tell whether this driver is still alive."""
    tags = {C.ROLE: C.ROLE_SWEEP, C.SPEC_HASH: spec_hash, C.SPEC_PATH: str(spec_path), C.GIT_COMMIT: commit,
            C.LAUNCH_ID: launch_id, C.STORAGE: storage, C.SMOKE: str(smoke).lower(),
            C.DRIVER_HOST: socket.gethostname(), C.DRIVER_PID: str(os.getpid()), C.DRIVER_START: start_time(), C.COMMAND: command[:5000],
            **C.source_tags(str(spec_path), commit)}
    run = store.client.create_run(store.experiment_id, tags=tags,
                                  run_name=C.parent_run_name(Path(spec_path).stem, datetime.now(), smoke))
    store.client.log_text(run.info.run_id, spec_text, C.SPEC_ARTIFACT)
    return ParentInfo(run.info.run_id, launch_id, storage)


def link_reused(store: Store, *, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
                source: Run) -> str:
    """A FINISHED link run in the store's experiment standing for a trial whose config ``source`` already trained
    (tags: :func:`orchestration.contract.reused_trial_tags`; no metric, param or artifact copied). Its run id."""
    client = store.client
    exp, levels = client.get_experiment(source.info.experiment_id), list(cell_levels)
    tags = C.reused_trial_tags(kind=kind, cell_levels=levels, cell_id=cell_id, fold=fold,
                               source_id=source.info.run_id, source_tags=source.data.tags, source_experiment=exp.name,
                               source_artifact_uri=source.info.artifact_uri or "")
    run = client.create_run(store.experiment_id, tags=tags,
                            run_name=f"{C.trial_run_name(levels, fold, kind)} · reused")
    store.end_run(run.info.run_id, "FINISHED")
    return run.info.run_id


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
    """One Tune trial's MLflow run, across the trial's attempts: the bookkeeping of :func:`orchestration.trial.trainable
    .run_trial` (find or create the run, one attempt's params and tags, the trainer's events, how the attempt ended).

    A restarted trial finds its run by the trial id (:meth:`orchestration.store.store.Store.trial_run`) and continues
    it; evaluations an earlier attempt logged (up to the :data:`~orchestration.contract.LAST_STEP` tag, written in the
    request that logs their metrics) are not logged twice. A run already FINISHED is :attr:`finished`: the trial must
    not train again."""

    def __init__(self, client: MlflowClient, run: Run, attempt: int, last_logged_step: int):
        self.client = client
        self.run_id = run.info.run_id
        self.finished = run.info.status == "FINISHED"
        self.previous_status = run.info.status   # as the last attempt left it (a FAILED one: back off first)
        self.attempt = attempt
        self.last_logged_step = last_logged_step
        self._run = run
        self.system = TrialSystemMetrics(client.tracking_uri, self.run_id, None)  # started by start_attempt

    @classmethod
    def open(cls, store: Store, *, trial_id: str, launch_id: str, tags: Mapping[str, str],
             run_name: str) -> "TrialRun":
        """The trial's run, created with ``tags`` on its first attempt; an unfinished one is set RUNNING again."""
        client, run = store.client, store.trial_run(trial_id, launch_id)
        if run is None:
            return cls(client, client.create_run(store.experiment_id, tags=dict(tags), run_name=run_name), 1, -1)
        last = _last_logged_step(client, run)
        if run.info.status == "FINISHED":
            return cls(client, run, int(run.data.tags.get(C.ATTEMPTS, "1")), last)
        client.update_run(run.info.run_id, "RUNNING")
        client.set_tag(run.info.run_id, C.STOPPED, "false")
        return cls(client, run, int(run.data.tags.get(C.ATTEMPTS, "0")) + 1, last)

    def final_metrics(self) -> dict[str, float]:
        """A FINISHED run's last metrics and step (what the trial reports to Tune instead of training again)."""
        return {**self._run.data.metrics, "step": max(self.last_logged_step, 0)}

    def start_attempt(self, config: Mapping[str, Any], *, node_id: str, tune_checkpoint: bool,
                      world_size: int = 1, system_metrics_s: float | None = None) -> None:
        """This attempt's tags, and the config's params not logged yet: MLflow params are immutable, and
        ``output_dir`` or the device may differ between attempts (another node), so the first attempt's stay.
        ``world_size``: the attempt's data-parallel ranks (``resources.workers``; a resumed trial may change it).
        ``system_metrics_s``: MLflow's system metrics sampled at this interval until the attempt ends (None: off)."""
        logged = self._run.data.params
        params = {k: v for k, v in flatten_params(config).items() if k not in logged}
        log_params_and_tags(self.client, self.run_id, params, {
            C.ATTEMPTS: str(self.attempt), C.WORKER_PID: str(os.getpid()), C.NODE_ID: node_id,
            C.attempt_tag(self.attempt, "node_id"): node_id, C.attempt_tag(self.attempt, "host"): socket.gethostname(),
            C.attempt_tag(self.attempt, "tune_checkpoint"): "yes" if tune_checkpoint else "none",
            C.attempt_tag(self.attempt, "world_size"): str(world_size)})
        self.system = TrialSystemMetrics(self.client.tracking_uri, self.run_id, system_metrics_s).start()

    def log_start(self, event: StartEvent) -> None:
        tags = {C.SPLIT_DIGEST: event.split_digest, C.attempt_tag(self.attempt, "start_step"): str(event.step)}
        log_params_and_tags(self.client, self.run_id, {}, tags)
        config_text = event.run.config.read_text()
        self.client.log_text(self.run_id, config_text, C.CONFIG_ARTIFACT)
        self.client.log_text(self.run_id, event.run.split.read_text(), C.SPLIT_ARTIFACT)
        self.client.log_artifact(self.run_id, str(event.run.dataset))  # beside config.yaml: what predict needs
        self._log_dataset((load_text(config_text, str(event.run.config)) or {}).get("data", {}), event.split_digest)

    def _log_dataset(self, data: dict, split_digest: str) -> None:
        """MLflow's Dataset column: the training data and this run's split (once per split,
        :func:`orchestration.store.mlflow_ui.dataset_input`: a dataset of its own, so its source is this run's
        ``split.json`` and no other trial inserts the same row at the same moment; one that did would be used)."""
        dataset = Dataset(**mlflow_ui.dataset_input(data, split_digest, self.run_id))
        logged = self._run.inputs.dataset_inputs if self._run.inputs else []
        if any(d.dataset.digest == dataset.digest for d in logged):
            return
        context = InputTag(C.DATASET_CONTEXT, "train")
        idempotent(lambda: self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset, [context])]))

    def log_eval(self, event: EvalEvent) -> None:
        """The evaluation's metrics and class counts, unless an earlier attempt logged this step."""
        if event.step <= self.last_logged_step:
            return
        log_metrics(self.client, self.run_id, C.with_percent(event.metrics), event.step,
                    tags={C.LAST_STEP: str(event.step)})
        counts = {"step": event.step, **{k: v.tolist() for k, v in event.class_counts.items()}}
        self.client.log_text(self.run_id, json.dumps(counts), C.class_counts_artifact(event.step))
        self.last_logged_step = event.step

    def log_end(self, summary: RunSummary) -> None:
        """The best and final weights, the final (else best) as an MLflow model for a run whose model is used
        (:mod:`.model_log`); with the final weights, the final checkpoint and its checksum; the run folder's
        ``confusion_matrix.json`` (the last evaluation's; every evaluation's is in its ``class_counts`` file)."""
        confusion = RunFolder(summary.output_dir).confusion
        if confusion.is_file():
            self.client.log_artifact(self.run_id, str(confusion))
        kept = [Path(p) for p in (summary.best_weights, summary.final_weights) if p is not None and Path(p).exists()]
        for path in kept:
            self.client.log_artifact(self.run_id, str(path), C.WEIGHTS_DIR)
        if kept and self._run.data.tags.get(C.KIND) in MODEL_KINDS:
            log_classifier(self.client, self.run_id, kept[-1])
        if summary.final_checkpoint is not None and summary.final_weights is not None:
            for f in checkpoint_pair(summary.final_checkpoint):
                self.client.log_artifact(self.run_id, str(f), C.CHECKPOINTS_DIR)

    def stopped(self, best_weights: Path) -> None:
        """Tune stopped the trial (ASHA or an interrupted sweep): keep its best weights; the run stays RUNNING for
        the driver, which alone can tell the two apart (ending it here raced with the driver's reconciliation)."""
        self.system.stop()
        if best_weights.exists():
            self.client.log_artifact(self.run_id, str(best_weights), C.WEIGHTS_DIR)

    def failed(self, error: BaseException) -> None:
        self.system.stop()
        self.client.set_tag(self.run_id, C.ERROR, "".join(traceback.format_exception_only(error)).strip()[:5000])
        end_run(self.client, self.run_id, "FAILED")

    def finish(self, overhead_s: Mapping[str, float]) -> None:
        """FINISHED, with the seconds orchestration added (``mutexmatch.overhead.<what>`` tags); the system metrics
        stopped first, so their last sample is in when the run is FINISHED."""
        self.system.stop()
        log_params_and_tags(self.client, self.run_id, {},
                            {C.overhead_tag(what): f"{s:.3f}" for what, s in overhead_s.items()})
        end_run(self.client, self.run_id, "FINISHED")


def run_deleted(error: BaseException) -> bool:
    """Whether ``error`` is MLflow refusing a write to a run someone deleted (MLflow's trash) while it was used."""
    return isinstance(error, MlflowException) and "must be in the 'active' state" in str(error) and \
        "deleted" in str(error)


def _last_logged_step(client: MlflowClient, run: Run) -> int:
    """The step of the run's last logged evaluation, -1 if none. Runs logged before the ``LAST_STEP`` tag existed
    are read from the history of the metric every evaluation logs."""
    if C.LAST_STEP in run.data.tags:
        return int(run.data.tags[C.LAST_STEP])
    history = client.get_metric_history(run.info.run_id, C.TRAIN_LOSS)
    return max((m.step for m in history), default=-1)
