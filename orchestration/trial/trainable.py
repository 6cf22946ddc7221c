"""The Ray Tune function trainable: one trial = one :class:`mutexmatch.train.Trainer` run, watched through the
trainer's callback seam (:class:`mutexmatch.training.callbacks.Callback`), its MLflow bookkeeping in
:class:`orchestration.trial.tracking.TrialRun`.

At every evaluation the callback logs the metrics and the class-count matrices to the trial's MLflow run and calls
``tune.report(metrics, checkpoint=...)``; when the trainer wrote a checkpoint for that step, a snapshot of the run
folder (:meth:`mutexmatch.training.runfolder.RunFolder.snapshot`: the checkpoint, its checksum and the run files) is handed
to Tune as a ``tune.Checkpoint``, which Tune persists to the sweep storage. A restarted trial — after its worker
died, its node was removed, or the driver was restarted with ``--resume`` — gets that checkpoint back from
``tune.get_checkpoint()``; the trainable restores the run folder from it and starts ``Trainer(..., resume="auto")``,
which continues bit-exactly (same data order, augmentations and weights as an uninterrupted run, on CPU). Tune's
checkpoint is authoritative: local files of an earlier attempt are discarded, so the step Tune counts from and the
step the trainer resumes at always agree (Tune may hand back an older checkpoint than the newest one written; the
trainer is correct from any).

The run folder and the snapshots live in a scratch folder of the worker (``$TMPDIR/mutexmatch_trials-<uid>``, one
per user: :mod:`orchestration.trial.scratch`), outside the trial folder that Ray copies to the storage: Ray copying
files the trainer replaces at the same time was the "Saving experiment state failed" traceback of every sweep.

MLflow: the trial finds its run by the ``mutexmatch.trial_id`` tag (Tune trial ids survive restarts and
``Tuner.restore``) and continues it instead of creating a duplicate; evaluations already logged by an earlier
attempt are not logged twice. A run that is already FINISHED (the trial completed after Tune's last experiment
snapshot, before the driver was killed) is not trained again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from orchestration.runtime.env import apply_closed_network_env

apply_closed_network_env()  # before mlflow/ray are imported in a worker process that only imports this module

from mutexmatch.training import Callback, EvalEvent, RunSummary, StartEvent  # noqa: E402
from mutexmatch.config import ConfigError, RunConfig, config_hash, parse_config  # noqa: E402
from mutexmatch.plugins import config_plugin_digests  # noqa: E402
from mutexmatch.training import NonFiniteLossError, RunFolder  # noqa: E402

from orchestration import contract as C  # noqa: E402
from orchestration.trial import tracking  # noqa: E402
from orchestration.store import mlflow_ui  # noqa: E402
from orchestration.store.store import Store  # noqa: E402
from orchestration.spec.plan import GridTrial, SearchStudy  # noqa: E402
from orchestration.spec.sweepfile import deep_merge, with_sampled  # noqa: E402
from orchestration.trial.preemption import keep_preempted, retry_backoff_s  # noqa: E402
from mutexmatch.training.preemption import Preempted  # noqa: E402
from orchestration.trial.spanning import Span, fit_spanning  # noqa: E402
from orchestration.trial.scratch import SCRATCH_DIRNAME, scratch_root  # noqa: E402

__all__ = ["TrialContext", "run_trial", "TrialCallback", "DiskFull", "RUN_DIRNAME", "META_FILE", "SCRATCH_DIRNAME"]

RUN_DIRNAME = "run"
META_FILE = "orchestration.json"
STALE_AFTER_S = 24 * 3600  # a scratch folder untouched this long, with no trainer in it, is deleted by any trial


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one Tune phase needs, passed with ``tune.with_parameters``.

    ``grid`` maps the ``trial`` key of Tune's grid ``param_space`` to its :class:`GridTrial`; ``study`` is set
    instead for a search phase, whose trials receive the sampled parameters (dotted RunConfig paths) as config."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    launch_id: str
    git_commit: str
    device: str
    num_threads: int
    grid: dict[str, GridTrial] | None = None
    study: SearchStudy | None = None
    source: str = ""                       # the sweep YAML: MLflow's Source column
    color_axis: str = ""                   # runs are coloured by their level on this axis (contract.run_color)
    color_levels: tuple[str, ...] = ()
    span: Span | None = None               # resources.workers > 1: the trial's worker group (trial/spanning.py)
    tryouts: frozenset[str] = frozenset()  # keys of grid's --set try-outs (spec/tryouts.py): named "· try-out"
    counted_digest: str = ""               # the launch's settings digest: a FINISHED grid/refit run is marked
    system_metrics_s: float | None = None  # tracking.system_metrics_interval; None: off (trial/system_metrics.py)


class TrialCallback(Callback):
    """Trainer → MLflow + Tune. One instance per trial attempt.

    The last evaluation is not reported from inside the training loop: Tune answers the report that reaches the
    scheduler's ``max_t`` by stopping the trial (``SystemExit`` in this thread), which would cut the run short of
    its final weights and artifacts. It is kept in :attr:`final` and reported by :func:`run_trial` after the run
    is complete and its MLflow run FINISHED."""

    def __init__(self, trial_run: tracking.TrialRun, folder: RunFolder, iterations: int):
        self.trial_run = trial_run
        self.folder = folder
        self.iterations = iterations
        self.final: tuple[dict[str, float], Path | None] | None = None
        self.last_metrics: dict[str, float] | None = None   # this attempt's last evaluation (a preemption reports it)
        self.hooks_s = 0.0  # time spent here, i.e. added to the training run by orchestration

    def on_start(self, event: StartEvent) -> None:
        with self._timed():
            self.trial_run.log_start(event)

    def on_eval(self, event: EvalEvent) -> bool | None:
        with self._timed():
            self.trial_run.log_eval(event)
            metrics = self.last_metrics = {**event.metrics, "step": event.step}
            stage = self._stage(event) if event.checkpoint is not None else None
            if event.step >= self.iterations:
                self.final = (metrics, stage)
                return None
            report(metrics, stage)
            return None

    def on_end(self, summary: RunSummary) -> None:
        with self._timed():
            self.trial_run.log_end(summary)

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.hooks_s += time.perf_counter() - t0

    def _stage(self, event: EvalEvent) -> Path:
        return self.stage(event.step, event.checkpoint)

    def stage(self, step: int, checkpoint: Path) -> Path:
        """A folder Tune can persist as this step's checkpoint, beside the run folder (outside the trial folder)."""
        stage = Path(tempfile.mkdtemp(prefix=".tune_ckpt_", dir=self.folder.path.parent))
        self.folder.snapshot(stage, checkpoint)
        (stage / META_FILE).write_text(json.dumps({"step": step, "run_id": self.trial_run.run_id}))
        return stage


def report(metrics: dict[str, float], stage: Path | None) -> None:
    """``tune.report`` with the staged folder as checkpoint (Tune copies it to the storage before returning)."""
    from ray import tune

    try:
        if stage is None:
            tune.report(metrics)
        else:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(stage)))
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _resolve(config: dict[str, Any], ctx: TrialContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """The raw RunConfig of this trial and its identity (kind, cell, fold, run name, extra tags)."""
    if ctx.grid is not None:
        trial = ctx.grid[config["trial"]]
        raw, kind, cell, fold, extra = trial.config, trial.kind, trial.cell, trial.fold, {}
        tryout = trial.key in ctx.tryouts
    else:
        study = ctx.study
        assert study is not None
        sampled = {path: config[path] for path in study.search.space}
        raw = with_sampled(study.config, sampled)
        kind, cell, fold, tryout = C.KIND_SEARCH, study.cell, study.fold, False
        extra = {C.SEARCH_HASH: study.search_hash, C.SEARCH_PHASE: study.phase, C.SAMPLED: C.sampled_json(sampled)}
    threads = raw.get("train", {}).get("num_threads") or ctx.num_threads
    name = C.trial_run_name(cell.levels, fold, kind, tryout)  # runs are found by their tags; the name is for people
    return raw, {"kind": kind, "cell": cell, "fold": fold, "name": name, "extra": extra, "threads": threads}


def trial_config(raw: dict[str, Any], output_dir: Path, *, device: str, threads: int | None,
                 trial_id: str) -> RunConfig | None:
    """The trial's RunConfig in its run folder; None, after one line, when its values break a config rule (values
    a search sampled that the sweep's check could not try: finding #1)."""
    try:
        return parse_config(deep_merge(raw, {"output_dir": str(output_dir),
                                             "train": {"device": device, "num_threads": threads}}))
    except ConfigError as e:
        _not_retried(trial_id, e)
        return None


def _not_retried(trial_id: str, error: ConfigError) -> None:
    print(f"[trial {trial_id}] error: {' '.join(str(error).split())} (a config error: not retried)", file=sys.stderr,
          flush=True)


def _open_trial_run(ctx: TrialContext, trial_id: str, ident: dict[str, Any], cfg: RunConfig) -> tracking.TrialRun:
    """The trial's MLflow run (created with the trial's tags on its first attempt)."""
    tags = C.trial_tags(parent_run_id=ctx.parent_run_id, kind=ident["kind"], cell_levels=ident["cell"].levels,
                        cell_id=ident["cell"].id, fold=ident["fold"], variant=cfg.algorithm.name,
                        config_hash=config_hash(cfg), commit=ctx.git_commit, trial_id=trial_id,
                        launch_id=ctx.launch_id, source=ctx.source,
                        color=C.run_color(ident["cell"].levels, ctx.color_axis, ctx.color_levels))
    tags.update(ident["extra"])
    if code := C.plugin_code_value(config_plugin_digests(cfg.to_dict())):
        tags[C.PLUGIN_CODE] = code
    C.quiet_store_file_errors()  # a full store is said in one line (_disk_full), not MLflow's logged traceback
    try:
        trial_run = tracking.TrialRun.open(Store.at(ctx.tracking_uri, ctx.experiment_id), trial_id=trial_id,
                                           launch_id=ctx.launch_id, tags=tags, run_name=ident["name"])
    except Exception as e:  # a retry on a store whose disk is still full
        if C.disk_full(e):
            raise _disk_full(trial_id, ctx.tracking_uri, e) from None
        raise
    _back_off(trial_run)
    return trial_run


def run_trial(config: dict[str, Any], ctx: TrialContext) -> None:
    """Tune function trainable (use with ``tune.with_parameters(run_trial, ctx=...)``).

    The time orchestration adds to the training run is recorded on the MLflow run as tags
    ``mutexmatch.overhead.{setup_s,hooks_s,wall_s}`` (MLflow and Tune bookkeeping before training, inside the
    trainer's callbacks, and the whole attempt), which ``benchmarks/orchestration_overhead.py`` reads."""
    import ray
    from ray import tune

    from mutexmatch.training import Trainer  # imports are not counted: the trainer CLI pays them too

    t_entry = time.perf_counter()
    # Tune logs every persisted checkpoint at INFO from the worker; one line per evaluation drowns the console.
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    trial_id = tune.get_context().get_trial_id()
    scratch = _scratch(trial_id)
    folder = RunFolder(scratch / RUN_DIRNAME)
    raw, ident = _resolve(config, ctx)
    if (cfg := trial_config(raw, folder.path, device=ctx.device, threads=ident["threads"], trial_id=trial_id)) is None:
        return  # it fails alike on every attempt: ended, not raised, so Tune retries nothing
    trial_run = _open_trial_run(ctx, trial_id, ident, cfg)
    if trial_run.finished:
        shutil.rmtree(scratch, ignore_errors=True)
        tune.report(trial_run.final_metrics())
        return
    checkpoint = tune.get_checkpoint()
    trial_run.start_attempt(cfg.to_dict(), node_id=ray.get_runtime_context().get_node_id(),
                            tune_checkpoint=checkpoint is not None,
                            world_size=ctx.span.workers if ctx.span else 1, system_metrics_s=ctx.system_metrics_s)
    callback = TrialCallback(trial_run, folder, cfg.train.iterations)
    try:
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                folder.restore(d)
        setup_s = time.perf_counter() - t_entry
        if ctx.span is None:
            Trainer(cfg, callbacks=[callback], resume="auto").fit()
        else:
            fit_spanning(ctx.span, deep_merge(raw, {"train": {"device": ctx.device, "num_threads": ident["threads"]}}),
                         folder, callback, trial_id=trial_id)
    except Preempted as stopped:  # SIGTERM/SIGUSR1: every step is in the checkpoint (orchestration.trial.preemption)
        keep_preempted(stopped, callback, trial_run, report=report, study=ctx.study)
    except SystemExit:
        # tune.report raises SystemExit(0) in the training thread when Tune stops this trial: ASHA stopping it
        # early, or the sweep being interrupted. Only the driver can tell which (TrialRun.stopped).
        trial_run.stopped(folder.best_weights)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    except BaseException as e:
        if _failed(trial_run, trial_id, folder, e):  # a divergence: ended without an error, so Tune retries nothing
            return
        raise
    _finish(ctx, ident, trial_run, t_entry, at=(trial_id, folder), setup_s=setup_s, hooks_s=callback.hooks_s)
    try:
        if callback.final is not None:
            # may raise SystemExit (the scheduler stops the trial at max_t); the run is complete and FINISHED
            # already, and the exception must reach Tune's thread runner, which waits for it
            report(*callback.final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _finish(ctx: TrialContext, ident: dict[str, Any], trial_run: tracking.TrialRun, t_entry: float, *,
            at: tuple[str, RunFolder], **overhead: float) -> None:
    """The run FINISHED with its ``overhead`` tags and the attempt's wall time since ``t_entry``; a grid or refit
    run then joins the MLflow view of the runs its settings count at once, not only when the launch ends (issue 34:
    the view was empty through a first launch). The launch's end still marks the whole set
    (:func:`orchestration.launch.summary.publish_counted`: reused runs, older duplicates): a failure to mark costs
    only the early view, never the trial. A run deleted meanwhile is said in one line (:func:`_failed`; ``at``: the
    trial's id and run folder)."""
    try:
        trial_run.finish({**overhead, "wall_s": time.perf_counter() - t_entry})
    except Exception as e:
        if _failed(trial_run, *at, e):
            return
        raise
    if not ctx.counted_digest or ident["kind"] not in (C.KIND_GRID, C.KIND_REFIT):
        return
    try:
        mlflow_ui.mark_counted_run(trial_run.client, ctx.experiment_id, ctx.counted_digest, trial_run.run_id,
                                   ident["cell"].id, ident["fold"])
    except Exception as e:  # noqa: BLE001 - the launch's end marks it again
        print(f"[trial {trial_run.run_id}] not marked in the counted view yet: {type(e).__name__}: {e}", flush=True)


class DiskFull(RuntimeError):
    """A trial stopped by a full disk, in one line (adversarial finding #4): the trial ends ERRORED, which
    ``--resume`` continues from its last checkpoint once there is space."""


def _disk_full(trial_id: str, tracking_uri: str, error: BaseException) -> DiskFull:
    """:class:`DiskFull` naming the file being written (else the store), its line printed."""
    where = getattr(error, "filename", None) or tracking_uri.removeprefix("sqlite:///")
    line = (f"no space left on the disk of {where}; what was written is intact: free space there, then resume the "
            "launch (--resume)")
    print(f"[trial {trial_id}] {line}", file=sys.stderr, flush=True)
    return DiskFull(line)


def _failed(trial_run: tracking.TrialRun, trial_id: str, folder: RunFolder, error: BaseException) -> bool:
    """The run FAILED with the error's line; True for a divergence (:class:`NonFiniteLossError`) or a
    :class:`ConfigError`, which are deterministic (issue 33 item 6): Tune's restart from the last checkpoint would
    fail the same way, twice over (``mutexmatch.attempts=3`` and three tracebacks before; a config error without
    end under ``--max-failures -1``, finding #1), so the caller ends the trial without raising. True too
    for a run deleted while it trained (finding #6: the summary reports it lost); :class:`DiskFull` for a full disk."""
    if tracking.run_deleted(error):
        print(f"[trial {trial_id}] its MLflow run {trial_run.run_id} was deleted while it trained: the trial stops "
              "here, reported lost in the sweep's summary (a new launch of the sweep trains it again)",
              file=sys.stderr, flush=True)
        return True
    if C.disk_full(error):  # the run is not marked FAILED: on a full store MLflow would log its own traceback
        raise _disk_full(trial_id, trial_run.client.tracking_uri, error) from None
    trial_run.failed(error)
    if isinstance(error, NonFiniteLossError):
        print(f"[trial {trial_id}] error: {error} (not retried; run folder kept: {folder.path})", file=sys.stderr)
        return True
    if isinstance(error, ConfigError):  # as deterministic: a dataset's rule a config breaks, found at load
        _not_retried(trial_id, error)
        return True
    print(f"[trial {trial_id}] failed; its run folder is kept for inspection: {folder.path}", file=sys.stderr)
    return False

def _back_off(trial_run: tracking.TrialRun) -> None:
    """A trial whose last attempt FAILED waits before training again (``--max-failures -1`` retries without end)."""
    wait = retry_backoff_s(trial_run.previous_status, trial_run.attempt)
    if wait:
        print(f"[trial {trial_run.run_id}] attempt {trial_run.attempt} after a failure: waiting {wait:.0f} s",
              file=sys.stderr, flush=True)
        time.sleep(wait)


def _scratch(trial_id: str) -> Path:
    """A new folder for this attempt's run folder and snapshots, in the worker's temporary folder, not Ray's trial
    folder (Ray copies that one to the storage while the trainer replaces files in it). Everything in a finished or
    stopped trial's folder is in MLflow (weights, final checkpoint, metrics) or in Tune's storage (the last
    checkpoint), so it is deleted then; a FAILED or killed attempt's stays until the trial's next attempt on this
    machine (which restarts from Tune's checkpoint), or :data:`STALE_AFTER_S` without a trainer in it."""
    root = scratch_root()
    now = time.time()
    for old in root.iterdir():
        with contextlib.suppress(OSError):  # another trial may delete it first
            stale = now - old.stat().st_mtime > STALE_AFTER_S and not RunFolder(old / RUN_DIRNAME).in_use()
            if old.name.startswith(f"{trial_id}_") or stale:
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{trial_id}_", dir=root))
