"""The Ray Tune function trainable: one trial = one :class:`mutexmatch.train.Trainer` run, watched through the
trainer's callback seam (:class:`mutexmatch.callbacks.Callback`).

At every evaluation the callback logs the metrics and the class-count matrices to the trial's MLflow run and calls
``tune.report(metrics, checkpoint=...)``; when the trainer wrote a checkpoint for that step, the checkpoint file,
its checksum and the run files (config, split, run marker, metrics log, best weights) are handed to Tune as a
``tune.Checkpoint``, which Tune persists to the sweep storage. A restarted trial — after its worker died, its node
was removed, or the driver was restarted with ``--resume`` — gets that checkpoint back from ``tune.get_checkpoint()``;
the trainable rebuilds the run folder from it and starts ``Trainer(..., resume="auto")``, which continues bit-exactly
(same data order, augmentations and weights as an uninterrupted run, on CPU). Tune's checkpoint is authoritative:
local files of an earlier attempt are discarded, so the step Tune counts from and the step the trainer resumes at
always agree (Tune may hand back an older checkpoint than the newest one written; the trainer is correct from any).

MLflow: the trial finds its run by the ``mutexmatch.trial_id`` tag (Tune trial ids survive restarts and
``Tuner.restore``) and continues it instead of creating a duplicate; evaluations already logged by an earlier
attempt are not logged twice. A run that is already FINISHED (the trial completed after Tune's last experiment
snapshot, before the driver was killed) is not trained again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from orchestration.env import apply_closed_network_env

apply_closed_network_env()  # before mlflow/ray are imported in a worker process that only imports this module

from mutexmatch.callbacks import Callback, EvalEvent, RunSummary, StartEvent  # noqa: E402
from mutexmatch.config import config_hash, parse_config  # noqa: E402

from orchestration import contract as C  # noqa: E402
from orchestration import tracking  # noqa: E402
from orchestration.plan import GridTrial, SearchStudy  # noqa: E402
from orchestration.spec import deep_merge, param_value, set_dotted  # noqa: E402

__all__ = ["TrialContext", "run_trial", "TrialCallback", "RUN_DIRNAME", "META_FILE"]

RUN_DIRNAME = "run"
META_FILE = "orchestration.json"
# Run files that travel with every Tune checkpoint, so a trial restarted on another node rebuilds its folder.
_RUN_FILES = ("config.yaml", "split.json", "run.json", "metrics.jsonl", "best_model.pt")


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


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # checkpoints and weights are replaced atomically (new inode), so a link is a snapshot
    except OSError:
        shutil.copy2(src, dst)


class TrialCallback(Callback):
    """Trainer → MLflow + Tune. One instance per trial attempt.

    The last evaluation is not reported from inside the training loop: Tune answers the report that reaches the
    scheduler's ``max_t`` by stopping the trial (``SystemExit`` in this thread), which would cut the run short of
    its final weights and artifacts. It is kept in :attr:`final` and reported by :func:`run_trial` after the run
    is complete and its MLflow run FINISHED."""

    def __init__(self, client: Any, run_id: str, out: Path, last_logged_step: int, attempt: int, iterations: int):
        self.client = client
        self.run_id = run_id
        self.out = out
        self.last_logged_step = last_logged_step
        self.attempt = attempt
        self.iterations = iterations
        self.final: tuple[dict[str, float], Path | None] | None = None
        self.hooks_s = 0.0  # time spent here, i.e. added to the training run by orchestration

    def on_start(self, event: StartEvent) -> None:
        with self._timed():
            self._on_start(event)

    def on_eval(self, event: EvalEvent) -> bool | None:
        with self._timed():
            return self._on_eval(event)

    def on_end(self, summary: RunSummary) -> None:
        with self._timed():
            self._on_end(summary)

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.hooks_s += time.perf_counter() - t0

    def _on_start(self, event: StartEvent) -> None:
        tags = {C.SPLIT_DIGEST: event.split_digest, C.attempt_tag(self.attempt, "start_step"): str(event.step)}
        tracking.log_params_and_tags(self.client, self.run_id, {}, tags)
        for name in (C.CONFIG_ARTIFACT, C.SPLIT_ARTIFACT):
            self.client.log_artifact(self.run_id, str(self.out / name))

    def _on_eval(self, event: EvalEvent) -> bool | None:
        if event.step > self.last_logged_step:
            tracking.log_metrics(self.client, self.run_id, event.metrics, event.step)
            counts = {"step": event.step, **{k: v.tolist() for k, v in event.class_counts.items()}}
            self.client.log_text(self.run_id, json.dumps(counts), C.class_counts_artifact(event.step))
            self.last_logged_step = event.step
        metrics = {**event.metrics, "step": event.step}
        stage = self._stage(event) if event.checkpoint is not None else None
        if event.step >= self.iterations:
            self.final = (metrics, stage)
            return None
        report(metrics, stage)
        return None

    def _stage(self, event: EvalEvent) -> Path:
        """A folder Tune can persist as this step's checkpoint: the checkpoint, its checksum and the run files."""
        stage = Path(tempfile.mkdtemp(prefix=".tune_ckpt_", dir=self.out.parent))
        for name in _RUN_FILES:
            if (self.out / name).exists():
                # metrics.jsonl is appended in place, so it is copied rather than linked
                (shutil.copy2 if name == "metrics.jsonl" else _link_or_copy)(self.out / name, stage / name)
        ckpt = Path(event.checkpoint)
        for f in (ckpt, ckpt.with_name(ckpt.name + ".sha256")):
            _link_or_copy(f, stage / "checkpoints" / f.name)
        (stage / META_FILE).write_text(json.dumps({"step": event.step, "run_id": self.run_id}))
        return stage

    def _on_end(self, summary: RunSummary) -> None:
        for path, dest in ((summary.best_weights, C.WEIGHTS_DIR), (summary.final_weights, C.WEIGHTS_DIR)):
            if path is not None and Path(path).exists():
                self.client.log_artifact(self.run_id, str(path), dest)
        if summary.final_checkpoint is not None and summary.final_weights is not None:
            ckpt = Path(summary.final_checkpoint)
            for f in (ckpt, ckpt.with_name(ckpt.name + ".sha256")):
                self.client.log_artifact(self.run_id, str(f), C.CHECKPOINTS_DIR)


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
        raw, kind, cell, fold, name, extra = trial.config, trial.kind, trial.cell, trial.fold, trial.key, {}
    else:
        study = ctx.study
        assert study is not None
        raw = study.config
        for path in study.search.space:
            raw = set_dotted(raw, path, param_value(path, config[path]))
        kind, cell, fold = C.KIND_SEARCH, study.cell, study.fold
        name = C.search_run_name(study.key)
        extra = {C.SEARCH_HASH: study.search_hash, C.SEARCH_PHASE: study.phase}
    threads = raw.get("train", {}).get("num_threads") or ctx.num_threads
    return raw, {"kind": kind, "cell": cell, "fold": fold, "name": name, "extra": extra, "threads": threads}


def run_trial(config: dict[str, Any], ctx: TrialContext) -> None:
    """Tune function trainable (use with ``tune.with_parameters(run_trial, ctx=...)``).

    The time orchestration adds to the training run is recorded on the MLflow run as tags
    ``mutexmatch.overhead.{setup_s,hooks_s,wall_s}`` (MLflow and Tune bookkeeping before training, inside the
    trainer's callbacks, and the whole attempt), which ``benchmarks/orchestration_overhead.py`` reads."""
    import ray
    from ray import tune

    from mutexmatch.train import Trainer  # imports are not counted: the trainer CLI pays them too

    t_entry = time.perf_counter()

    # Tune logs every persisted checkpoint at INFO from the worker; one line per evaluation drowns the console.
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    tctx = tune.get_context()
    trial_id = tctx.get_trial_id()
    out = (Path(tctx.get_trial_dir()) / RUN_DIRNAME).resolve()
    raw, ident = _resolve(config, ctx)
    raw = deep_merge(raw, {"output_dir": str(out), "train": {"device": ctx.device, "num_threads": ident["threads"]}})
    cfg = parse_config(raw)
    client = tracking.MlflowClient(ctx.tracking_uri)

    checkpoint = tune.get_checkpoint()
    run = tracking.find_trial_run(client, ctx.experiment_id, trial_id, ctx.launch_id)
    if run is not None and run.info.status == "FINISHED":
        history = client.get_metric_history(run.info.run_id, C.TRAIN_LOSS)
        tune.report({**run.data.metrics, "step": max((m.step for m in history), default=0)})
        return
    if run is None:
        tags = C.trial_tags(parent_run_id=ctx.parent_run_id, kind=ident["kind"], cell_levels=ident["cell"].levels,
                            cell_id=ident["cell"].id, fold=ident["fold"], variant=cfg.algorithm.name,
                            config_hash=config_hash(cfg), commit=ctx.git_commit, trial_id=trial_id,
                            launch_id=ctx.launch_id)
        tags.update(ident["extra"])
        run = client.create_run(ctx.experiment_id, tags=tags, run_name=ident["name"])
        logged_params: dict[str, str] = {}
        attempt = 1
        last_logged = -1
    else:
        client.update_run(run.info.run_id, "RUNNING")
        client.set_tag(run.info.run_id, C.STOPPED, "false")
        logged_params = run.data.params
        attempt = int(run.data.tags.get(C.ATTEMPTS, "0")) + 1
        history = client.get_metric_history(run.info.run_id, C.TRAIN_LOSS)
        last_logged = max((m.step for m in history), default=-1)
    run_id = run.info.run_id
    # output_dir and the device may differ between attempts (another node); MLflow params are immutable, so the
    # first attempt's values are kept and only params not logged yet are added.
    params = {k: v for k, v in tracking.flatten_params(cfg.to_dict()).items() if k not in logged_params}
    tracking.log_params_and_tags(client, run_id, params, {
        C.ATTEMPTS: str(attempt), C.WORKER_PID: str(os.getpid()),
        C.NODE_ID: ray.get_runtime_context().get_node_id(),
        C.attempt_tag(attempt, "node_id"): ray.get_runtime_context().get_node_id(),
        C.attempt_tag(attempt, "tune_checkpoint"): "none" if checkpoint is None else "yes"})

    try:
        shutil.rmtree(out, ignore_errors=True)
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                shutil.copytree(d, out, ignore=shutil.ignore_patterns(META_FILE))
        callback = TrialCallback(client, run_id, out, last_logged, attempt, cfg.train.iterations)
        setup_s = time.perf_counter() - t_entry
        trainer = Trainer(cfg, callbacks=[callback], resume="auto")
        trainer.fit()
    except SystemExit:
        # tune.report raises SystemExit(0) in the training thread when Tune stops this trial: ASHA stopping it
        # early, or the sweep being interrupted. The trial cannot tell which; the driver can, and turns the run
        # into FINISHED (early stopped) unless the phase was interrupted. The run is left RUNNING for the driver:
        # ending it here raced with the driver's reconciliation (a KILLED written after the driver's FINISHED).
        best = out / "best_model.pt"
        if best.exists():
            client.log_artifact(run_id, str(best), C.WEIGHTS_DIR)
        _remove_run_folder(out)
        raise
    except BaseException as e:
        client.set_tag(run_id, C.ERROR, "".join(traceback.format_exception_only(e)).strip()[:5000])
        tracking.end_run(client, run_id, "FAILED")
        raise
    tracking.log_params_and_tags(client, run_id, {}, {
        C.overhead_tag("setup_s"): f"{setup_s:.3f}",
        C.overhead_tag("hooks_s"): f"{callback.hooks_s:.3f}",
        C.overhead_tag("wall_s"): f"{time.perf_counter() - t_entry:.3f}"})
    tracking.end_run(client, run_id, "FINISHED")
    try:
        if callback.final is not None:
            # may raise SystemExit (the scheduler stops the trial at max_t); the run is complete and FINISHED
            # already, and the exception must reach Tune's thread runner, which waits for it
            report(*callback.final)
    finally:
        _remove_run_folder(out)


def _remove_run_folder(out: Path) -> None:
    """Delete a finished or stopped trial's local run folder. Everything in it is in MLflow (weights, final
    checkpoint, metrics) or in Tune's storage (the last checkpoint), and a restarted attempt rebuilds the folder from
    Tune's checkpoint, never from these files; left in place, the folders of a sweep pile up in Ray's session
    directory (a WRN-28-8 trial's checkpoints are ~0.7 GB) until the node's disk is full. A FAILED trial keeps its
    folder for inspection."""
    shutil.rmtree(out, ignore_errors=True)
