"""Run a sweep YAML on Ray Tune with MLflow tracking — the command line and :func:`run_sweep`.

``python -m orchestration.sweep experiments/X.yaml [--tracking-uri URI] [--storage PATH_OR_URI] [--resume]
[--force] [--dry-run] [--smoke] [--n-trials N] [--max-concurrent N] [--gpu-policy error|drop]``

1. The YAML is validated completely (every trial's RunConfig) before anything starts.
2. MLflow: the experiment (named by the YAML) is created in this process before trials start; a parent run is
   opened for the launch; a RUNNING parent left by a dead driver on this host is ended as KILLED first.
3. Trials whose cell × fold already has a FINISHED run with the same config hash are skipped (``--force`` runs
   them again); a search study with ``n_trials`` FINISHED runs of the same search is skipped too.
4. Ray: a local Ray is started (``include_dashboard=False``, all CPUs) unless ``RAY_ADDRESS`` is set — as it is
   inside ``ray job submit`` — in which case the driver connects to that cluster. The per-trial resources are
   checked against the cluster first: a GPU request on a cluster without GPUs is an error (or, with
   ``--gpu-policy drop``, dropped with a warning), never a trial left PENDING forever.
5. Tune phases run one after another: the grid (one trial per cell × fold, ``tune.grid_search``), then one
   Optuna (TPE) study per searched cell × search fold with ASHA stopping (``training_iteration`` = evaluations).
   ``FailureConfig(max_failures)`` restarts a failed trial from its last checkpoint.
6. The end: a summary table (test accuracy mean ± std per cell), the best search parameters (printed and logged
   to the parent run as ``best.<param>``), what finished and what did not, and — if interrupted (Ctrl+C, SIGTERM)
   or failed — the exact command that resumes the launch (``--resume``: ``Tuner.restore(...,
   resume_errored=True)`` per phase; finished trials are not re-run and restarted trials continue their runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shlex
import signal
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from orchestration.env import apply_closed_network_env

apply_closed_network_env()

from orchestration import contract as C  # noqa: E402
from orchestration import tracking  # noqa: E402
from orchestration.plan import SearchStudy, SweepPlan, build_plan, format_plan  # noqa: E402
from orchestration.spec import (CategoricalParam, FloatParam, IntParam, Resources, SpecError,  # noqa: E402
                                load_spec)
from orchestration.summary import (best_search_trial, format_statuses, grid_summary,  # noqa: E402
                                   trial_statuses)

__all__ = ["SweepOptions", "SweepOutcome", "SweepError", "run_sweep", "main", "resolve_storage",
           "check_resources"]


class SweepError(RuntimeError):
    """A sweep that cannot start (nothing to resume, resources the cluster cannot provide, …)."""


@dataclass
class SweepOptions:
    spec_path: Path
    tracking_uri: str | None = None
    storage: str | None = None
    resume: bool = False
    force: bool = False
    dry_run: bool = False
    smoke: bool = False
    n_trials: int | None = None
    max_concurrent: int | None = None
    gpu_policy: str = "error"
    max_failures: int = 2
    experiment_name: str | None = None
    project_dir: Path | None = None
    reuse_actors: bool = True
    verbose: int = 0
    handle_signals: bool = False      # the CLI: Ctrl+C and SIGTERM end the launch gracefully (see _on_interrupt)


@dataclass
class SweepOutcome:
    status: str                       # finished | failed | interrupted | dry-run | nothing-to-do
    experiment_id: str | None = None
    parent_run_id: str | None = None
    launch_id: str | None = None
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    best: dict[str, dict[str, str]] = field(default_factory=dict)
    resume_command: str | None = None
    summary: str = ""


def resolve_storage(storage: str | None, project_dir: Path) -> str:
    """Ray Tune's storage: default ``<project>/ray_results``; relative paths made absolute (trials run elsewhere);
    URIs (``s3://``, ``gs://``, ``file://``) passed through — a multi-node cluster needs shared storage."""
    if storage is None:
        return str(Path(project_dir).resolve() / "ray_results")
    if "://" in storage:
        return storage
    p = Path(storage)
    return str(p if p.is_absolute() else (Path(project_dir) / p).resolve())


def command_line(opts: SweepOptions, uri: str, storage: str, *, resume: bool) -> str:
    """The exact command that repeats (``resume=True``: resumes) this launch."""
    parts = ["python", "-m", "orchestration.sweep", str(Path(opts.spec_path)), "--tracking-uri", uri,
             "--storage", storage]
    if opts.smoke:
        parts.append("--smoke")
    if opts.n_trials is not None:
        parts += ["--n-trials", str(opts.n_trials)]
    if opts.max_concurrent is not None:
        parts += ["--max-concurrent", str(opts.max_concurrent)]
    if opts.gpu_policy != "error":
        parts += ["--gpu-policy", opts.gpu_policy]
    if opts.max_failures != SweepOptions.max_failures:
        parts += ["--max-failures", str(opts.max_failures)]
    if opts.experiment_name:
        parts += ["--experiment-name", opts.experiment_name]
    if resume:
        parts.append("--resume")
    return " ".join(shlex.quote(p) for p in parts)


# ------------------------------------------------------------------------------------------------ resources
def check_resources(resources: Resources, policy: str, nodes: list[dict[str, Any]]) -> tuple[dict[str, float],
                                                                                              list[str]]:
    """The per-trial request Tune gets, checked against the alive ``nodes`` (``ray.nodes()``): a request no node
    can satisfy would leave trials PENDING forever, so it is refused (a GPU request is dropped with a warning
    under ``policy='drop'``). Returns the request and the warnings."""
    if policy not in ("error", "drop"):
        raise ValueError(f"--gpu-policy={policy!r}: must be `error` or `drop`")
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", False))]
    max_cpu = max((r.get("CPU", 0.0) for r in alive), default=0.0)
    max_gpu = max((r.get("GPU", 0.0) for r in alive), default=0.0)
    total_gpu = sum(r.get("GPU", 0.0) for r in alive)
    warns = []
    gpu = resources.gpu
    if gpu > 0 and total_gpu == 0:
        msg = (f"resources.gpu={gpu:g}: the Ray cluster has no GPU ({len(alive)} node(s), largest has "
               f"{max_cpu:g} CPUs)")
        if policy == "error":
            raise SweepError(msg + "; set `resources: {gpu: 0}` or pass --gpu-policy drop to train on CPU")
        warns.append(msg + "; --gpu-policy drop: trials run on CPU")
        gpu = 0.0
    elif gpu > max_gpu:
        raise SweepError(f"resources.gpu={gpu:g}: no node of the Ray cluster has {gpu:g} GPUs (largest: "
                         f"{max_gpu:g})")
    if resources.cpu > max_cpu:
        raise SweepError(f"resources.cpu={resources.cpu:g}: no node of the Ray cluster has {resources.cpu:g} CPUs "
                         f"(largest: {max_cpu:g})")
    return {"cpu": resources.cpu, "gpu": gpu}, warns


def _init_ray() -> bool:
    """Connect to ``$RAY_ADDRESS`` (a cluster, or the one running this ``ray job``) or start a local Ray.
    Returns True if this call initialised Ray (so the driver shuts it down at the end)."""
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto", logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    return True


# ------------------------------------------------------------------------------------------------ tune phases
def _optuna_space(study: SearchStudy) -> dict[str, Any]:
    import optuna

    space = {}
    for path, p in study.search.space.items():
        if isinstance(p, FloatParam):
            space[path] = optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, IntParam):
            space[path] = optuna.distributions.IntDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, CategoricalParam):
            space[path] = optuna.distributions.CategoricalDistribution(p.choices)
    return space


def _search_config(study: SearchStudy) -> dict[str, Any]:
    import optuna
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    s = study.search
    # TPE needs a few random trials before it models anything; in small searches give it half of them.
    sampler = optuna.samplers.TPESampler(seed=study.index, n_startup_trials=min(10, max(2, study.n_trials // 2)))
    searcher: Any = OptunaSearch(space=_optuna_space(study), metric=s.metric, mode=s.mode, sampler=sampler)
    if study.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=study.max_concurrent)
    if s.scheduler.type == "asha":
        scheduler: Any = ASHAScheduler(time_attr="training_iteration", metric=s.metric, mode=s.mode,
                                       max_t=study.evaluations, grace_period=s.scheduler.grace_period,
                                       reduction_factor=s.scheduler.reduction_factor)
    else:
        scheduler = FIFOScheduler()
    return {"search_alg": searcher, "scheduler": scheduler, "num_samples": study.n_trials}


@dataclass
class _PhaseResult:
    interrupted: bool
    errors: int


def _run_phase(name: str, trainable: Any, *, param_space: dict | None, tune_kwargs: dict[str, Any], expected: int,
               early_stopping: bool, exp_root: str, opts: SweepOptions, client: Any, experiment_id: str,
               parent_run_id: str) -> _PhaseResult:
    from ray import tune

    from orchestration.progress import ProgressPrinter

    path = f"{exp_root}/{name}"
    if opts.resume and tune.Tuner.can_restore(path):
        print(f"[sweep] restoring phase {name} from {path}", flush=True)
        tuner = tune.Tuner.restore(path, trainable, resume_errored=True)
    else:
        run_config = tune.RunConfig(
            name=name, storage_path=exp_root, verbose=opts.verbose,
            failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2), callbacks=[ProgressPrinter()])
        tuner = tune.Tuner(trainable, param_space=param_space, run_config=run_config,
                           tune_config=tune.TuneConfig(reuse_actors=opts.reuse_actors, **tune_kwargs))
    _IN_FIT.set()
    try:
        results = tuner.fit()
    finally:
        _IN_FIT.clear()
    # After an interrupt Tune returns normally; trials it stopped may even count as terminated, so the signal
    # handler's flag is what tells an interrupted phase from a finished one (the counts cover in-process callers).
    interrupted = (_INTERRUPTED.is_set() or len(results) < expected
                   or results.num_terminated + results.num_errors < len(results))
    _reconcile_phase(results, interrupted, client, experiment_id, parent_run_id, early_stopping=early_stopping)
    return _PhaseResult(interrupted, results.num_errors)


def _reconcile_phase(results: Any, interrupted: bool, client: Any, experiment_id: str, parent_run_id: str, *,
                     early_stopping: bool) -> None:
    """Give every run of the phase its final status, once Tune is done with its trials.

    A trial that Tune stops ends its run as KILLED with ``mutexmatch.stopped=true`` — it cannot tell ASHA's stop
    from an interrupt — or, if its worker is torn down first, leaves it RUNNING. In a phase whose scheduler stops
    trials early and that was not interrupted, such a run was stopped by ASHA: FINISHED with
    ``mutexmatch.early_stopped=true``. Otherwise a RUNNING run is FAILED if its trial errored or the phase has no
    early stopping (its process died), KILLED if the phase was interrupted."""
    children = f"tags.`{C.PARENT_RUN_ID}` = '{parent_run_id}'"
    open_runs = list(tracking.iter_runs(client, experiment_id, f"{children} AND attributes.status = 'RUNNING'"))
    open_runs += tracking.iter_runs(client, experiment_id, f"{children} AND attributes.status = 'KILLED' AND "
                                    f"tags.`{C.STOPPED}` = 'true'")
    errored = _errored_trial_ids(results, {r.data.tags.get(C.TRIAL_ID, "") for r in open_runs})
    for run in open_runs:
        tid = run.data.tags.get(C.TRIAL_ID)
        running = run.info.status == "RUNNING"
        if tid in errored:
            status = "FAILED"
        elif early_stopping and not interrupted:
            status = "FINISHED"
            client.set_tag(run.info.run_id, C.EARLY_STOPPED, "true")
            client.set_tag(run.info.run_id, C.STOPPED, "false")
        elif not running:
            continue  # stopped by the interrupt: stays KILLED
        else:
            status = "KILLED" if interrupted else "FAILED"
        client.set_tag(run.info.run_id, C.ENDED_BY, "driver")
        tracking.end_run(client, run.info.run_id, status)


def _errored_trial_ids(results: Any, candidates: set[str]) -> set[str]:
    """Tune trial ids of the errored results: from the result's metrics, or (an error before the first report
    leaves none) from the trial folder name, which contains the id."""
    ids = set()
    for r in results:
        if r.error is None:
            continue
        tid = (r.metrics or {}).get("trial_id")
        if tid:
            ids.add(tid)
        elif r.path:
            name = Path(str(r.path)).name
            ids |= {c for c in candidates if c and f"_{c}_" in name}
    return ids


# Set by the CLI's SIGINT/SIGTERM handler; _IN_FIT while Tuner.fit runs (Tune then stops gracefully on SIGUSR1).
_INTERRUPTED = threading.Event()
_IN_FIT = threading.Event()


def _on_interrupt(signum: int, frame: Any) -> None:
    """First Ctrl+C/SIGTERM: ask Tune to stop gracefully (its SIGUSR1 handler saves the experiment state and stops
    the trials) and remember that the launch was interrupted. A second one, or one outside ``fit``, aborts."""
    first = not _INTERRUPTED.is_set()
    _INTERRUPTED.set()
    tune_listens = hasattr(signal, "SIGUSR1") and signal.getsignal(signal.SIGUSR1) not in (
        signal.SIG_DFL, signal.SIG_IGN, None)
    if first and _IN_FIT.is_set() and tune_listens:
        print("\n[sweep] interrupted: stopping the trials and saving the state (interrupt again to abort at once)",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
        return
    raise KeyboardInterrupt


def _handle_interrupts() -> None:
    """Route SIGINT and SIGTERM (``kill``, a scheduler's preemption) through :func:`_on_interrupt`. Called again
    after ``ray.init``, which installs its own aborting SIGTERM handler."""
    if threading.current_thread() is threading.main_thread():
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # Tune's own SIGINT handler would hide the interrupt
        signal.signal(signal.SIGINT, _on_interrupt)
        signal.signal(signal.SIGTERM, _on_interrupt)


# ------------------------------------------------------------------------------------------------ selection
def _select(plan: SweepPlan, client: Any, experiment_id: str, force: bool) -> tuple[list[str], list[str],
                                                                                    list[str]]:
    """Grid keys and search phases to run, and what is skipped as already FINISHED with the same config."""
    if force or plan.smoke:  # smoke runs check the machinery: they always run
        return [t.key for t in plan.grid], [s.phase for s in plan.searches], []
    done = tracking.finished_grid_hashes(client, experiment_id)
    grid, skipped = [], []
    for t in plan.grid:
        (skipped if t.config_hash in done.get(t.key, set()) else grid).append(t.key)
    phases = []
    for s in plan.searches:
        n_done = len(tracking.finished_search_runs(client, experiment_id, s.search_hash))
        if n_done >= s.n_trials:
            skipped.append(f"search {s.key} ({n_done} trials)")
        else:
            phases.append(s.phase)
    return grid, phases, skipped


def _save_launch_plan(client: Any, run_id: str, data: dict[str, Any]) -> None:
    client.log_text(run_id, json.dumps(data, indent=2), C.LAUNCH_PLAN_ARTIFACT)


def _load_launch_plan(client: Any, run_id: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(run_id, C.LAUNCH_PLAN_ARTIFACT, tmp)
        return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------------------------------ main flow
def _dry_run(plan: SweepPlan, opts: SweepOptions, uri: str, storage: str, exp_name: str) -> SweepOutcome:
    import torch

    from orchestration.cost import estimate_plan

    skipped: set[str] = set()
    db = Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None
    if not opts.force and (db is None or db.exists()):  # never create a store just to look at it
        try:
            client = tracking.MlflowClient(uri)
            exp = client.get_experiment_by_name(exp_name)
            if exp is not None:
                grid, phases, _ = _select(plan, client, exp.experiment_id, opts.force)
                skipped = {t.key for t in plan.grid if t.key not in grid}
                skipped |= {f"search:{s.key}" for s in plan.searches if s.phase not in phases}
        except Exception as e:  # noqa: BLE001 - the plan is still worth printing
            print(f"[dry-run] could not read MLflow at {uri}: {e}")
    res = plan.spec.resources
    device = "cuda" if res.gpu > 0 and torch.cuda.is_available() else "cpu"
    threads = max(1, round(res.cpu))
    per_trial, costs, problems = estimate_plan(plan, device=device, num_threads=threads, skip=skipped)
    print(f"Sweep {plan.spec.name!r} (spec hash {plan.spec_hash}): {len(plan.grid)} grid trials, "
          f"{len(plan.searches)} search studies ({sum(s.n_trials for s in plan.searches)} trials)"
          + (" [smoke]" if plan.smoke else ""))
    print(f"tracking URI: {uri}\nstorage: {storage}\n")
    print(format_plan(plan, per_trial, skipped))
    for p in problems:
        print(f"warning: {p}")
    total = sum(v for k, v in per_trial.items() if not k.startswith("search:"))
    total += sum(per_trial.get(f"search:{s.key}", 0.0) * s.n_trials for s in plan.searches)
    unit = "GPU" if device == "cuda" else "CPU"
    slots = max(1, int((os.cpu_count() or 1) // res.cpu)) if device == "cpu" else max(
        1, int(torch.cuda.device_count() / res.gpu))
    if opts.max_concurrent:
        slots = min(slots, opts.max_concurrent)
    print()
    for ck, c in costs.items():
        k = json.loads(ck)
        print(f"measured on {c.device} ({threads} thread(s)): {k['backbone']} {k['dataset']} {k['alg']} "
              f"B={k['b']} mu={k['mu']}{' +val split' if k['val'] else ''}: {c.step_s * 1000:.1f} ms/step, "
              f"{c.eval_s:.2f} s/evaluation")
    print(f"estimated cost: {total / 3600:.3f} {unit}-hours ({total:.0f} s of trial time; search trials counted at "
          f"full length, ASHA stops some early; Ray/MLflow overhead not included); "
          f"≈ {total / slots / 60:.1f} min wall time at {slots} concurrent trial(s) on this machine")
    return SweepOutcome(status="dry-run", skipped=sorted(skipped))


def run_sweep(opts: SweepOptions) -> SweepOutcome:
    """Run (or dry-run, or resume) the sweep described by ``opts``. Raises SpecError/SweepError before anything
    starts when the spec or the cluster cannot work."""
    project = Path(opts.project_dir or Path.cwd()).resolve()
    spec_path = Path(opts.spec_path)
    spec = load_spec(spec_path, project)
    plan = build_plan(spec, project, smoke=opts.smoke, n_trials=opts.n_trials, max_concurrent=opts.max_concurrent)
    uri = tracking.resolve_tracking_uri(opts.tracking_uri, project)
    storage = resolve_storage(opts.storage, project)
    exp_name = opts.experiment_name or spec.name
    if opts.max_failures < 0:
        raise ValueError(f"--max-failures={opts.max_failures}: must be >= 0")
    if opts.dry_run:
        return _dry_run(plan, opts, uri, storage, exp_name)

    client = tracking.MlflowClient(uri)
    experiment_id = tracking.ensure_experiment(client, exp_name, uri)
    resume_cmd = command_line(opts, uri, storage, resume=True)
    for dead in tracking.kill_dead_launches(client, experiment_id):
        print(f"[sweep] launch {dead.data.tags.get(C.LAUNCH_ID)} was interrupted (its driver is "
              f"gone); its runs are now KILLED." + ("" if opts.resume else f" To continue it: {resume_cmd}"),
              flush=True)

    commit = tracking.git_commit(Path(__file__).resolve().parent.parent)  # the code that runs, not the cwd
    found = None
    if opts.resume:
        found = tracking.find_resumable_parent(client, experiment_id, spec_hash=plan.spec_hash, storage=storage,
                                               smoke=plan.smoke)
        if found is None:
            raise SweepError(f"--resume: no earlier launch of {spec_path} (spec hash {plan.spec_hash}, storage "
                             f"{storage}{', smoke' if plan.smoke else ''}) in experiment {exp_name!r}; start it "
                             "without --resume (a changed YAML is a new sweep)")
        launch = _load_launch_plan(client, found.info.run_id)
        grid_keys, phases, skipped = launch["grid"], launch["phases"], launch["skipped"]
    else:
        grid_keys, phases, skipped = _select(plan, client, experiment_id, opts.force)
        if not grid_keys and not phases:
            out = SweepOutcome(status="nothing-to-do", experiment_id=experiment_id, skipped=skipped)
            out.summary = grid_summary(client, experiment_id, plan)
            print(f"[sweep] every trial of {spec_path} already has a FINISHED run with the same config in "
                  f"experiment {exp_name!r}; nothing to do (--force runs them again).\n\n{out.summary}", flush=True)
            return out

    # Ray and the resource check come before the parent run: a sweep the cluster cannot run leaves no trace.
    started_ray = _init_ray()
    if opts.handle_signals:
        _handle_interrupts()  # again: ray.init installs its own (aborting) SIGTERM handler
    try:
        import ray

        request, warns = check_resources(plan.spec.resources, opts.gpu_policy, ray.nodes())
    except BaseException:
        if started_ray:
            ray.shutdown()
        raise
    for w in warns:
        warnings.warn(w, RuntimeWarning, stacklevel=2)
        print(f"warning: {w}", flush=True)

    if found is not None:
        parent = tracking.ParentInfo(found.info.run_id, found.data.tags[C.LAUNCH_ID], storage)
        client.update_run(parent.run_id, "RUNNING")
        client.set_tag(parent.run_id, C.DRIVER_PID, str(os.getpid()))
        print(f"[sweep] resuming launch {parent.launch_id} (parent run {parent.run_id})", flush=True)
    else:
        launch_id = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        parent = tracking.create_parent_run(
            client, experiment_id, launch_id=launch_id, spec_path=spec_path.resolve(),
            spec_text=spec_path.read_text(), spec_hash=plan.spec_hash, commit=commit, storage=storage,
            smoke=plan.smoke, command=command_line(opts, uri, storage, resume=False))
        _save_launch_plan(client, parent.run_id, {"grid": grid_keys, "phases": phases, "skipped": skipped})
        print(f"[sweep] launch {launch_id}: {len(grid_keys)} grid trial(s), {len(phases)} search stud(y/ies); "
              f"{len(skipped)} skipped; MLflow {uri} experiment {exp_name!r} parent run {parent.run_id}",
              flush=True)

    outcome = SweepOutcome(status="finished", experiment_id=experiment_id, parent_run_id=parent.run_id,
                           launch_id=parent.launch_id, skipped=skipped)
    interrupted, errors = False, 0
    try:
        interrupted, errors = _run_phases(plan, opts, client, experiment_id, parent, grid_keys, phases, commit,
                                          storage, exp_name, uri, request)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        tracking.end_open_children(client, experiment_id, parent.run_id, "FAILED")
        tracking.end_run(client, parent.run_id, "FAILED")
        raise
    finally:
        if started_ray:
            import ray

            ray.shutdown()

    if interrupted:
        tracking.end_open_children(client, experiment_id, parent.run_id, "KILLED")
    st = trial_statuses(client, experiment_id, parent.run_id, plan, grid_keys, phases, skipped)
    outcome.finished, outcome.failed, outcome.not_finished = st.finished, st.failed, st.not_finished
    outcome.status = "interrupted" if interrupted else "failed" if (errors or st.failed or st.not_finished) \
        else "finished"
    outcome.best = _log_best(plan, client, experiment_id, parent.run_id)
    tracking.end_run(client, parent.run_id, {"interrupted": "KILLED", "failed": "FAILED"}.get(outcome.status,
                                                                                              "FINISHED"))
    outcome.summary = grid_summary(client, experiment_id, plan)
    print(f"\n[sweep] {outcome.status}: launch {parent.launch_id}, MLflow experiment {exp_name!r} "
          f"(parent run {parent.run_id})\n{format_statuses(st)}\n\nTest accuracy per cell "
          f"(mean ± std over folds; final = last evaluation, best = max over evaluations):\n{outcome.summary}",
          flush=True)
    for key, params in outcome.best.items():
        print(f"best parameters of search {key}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    if outcome.status != "finished":
        outcome.resume_command = resume_cmd
        print(f"\nTo resume this launch (finished trials are not re-run):\n  {resume_cmd}", flush=True)
    return outcome


def _run_phases(plan: SweepPlan, opts: SweepOptions, client: Any, experiment_id: str,
                parent: tracking.ParentInfo, grid_keys: list[str], phases: list[str], commit: str, storage: str,
                exp_name: str, uri: str, request: dict[str, float]) -> tuple[bool, int]:
    """Run the grid phase and the search phases in order; (interrupted, number of errored trials)."""
    from ray import tune

    from orchestration.trainable import TrialContext, run_trial

    ctx_args = dict(tracking_uri=uri, experiment_id=experiment_id, parent_run_id=parent.run_id,
                    launch_id=parent.launch_id,
                    git_commit=commit, device="cuda" if request["gpu"] > 0 else "cpu",
                    num_threads=max(1, round(request["cpu"])))
    exp_root = f"{storage.rstrip('/')}/{exp_name}/{parent.launch_id}"
    common = dict(exp_root=exp_root, opts=opts, client=client, experiment_id=experiment_id,
                  parent_run_id=parent.run_id)
    errors = 0
    if grid_keys:
        by_key = {t.key: t for t in plan.grid}
        ctx = TrialContext(**ctx_args, grid={k: by_key[k] for k in grid_keys})
        trainable = tune.with_resources(tune.with_parameters(run_trial, ctx=ctx), request)
        tune_kwargs = {"max_concurrent_trials": opts.max_concurrent} if opts.max_concurrent else {}
        res = _run_phase("smoke" if plan.smoke else "grid", trainable,
                         param_space={"trial": tune.grid_search(grid_keys)}, tune_kwargs=tune_kwargs,
                         expected=len(grid_keys), early_stopping=False, **common)
        errors += res.errors
        if res.interrupted:
            return True, errors
    for study in plan.searches:
        if study.phase not in phases:
            continue
        ctx = TrialContext(**ctx_args, study=study)
        trainable = tune.with_resources(tune.with_parameters(run_trial, ctx=ctx), request)
        res = _run_phase(study.phase, trainable, param_space=None, tune_kwargs=_search_config(study),
                         expected=study.n_trials, early_stopping=study.search.scheduler.type == "asha",
                         **common)
        errors += res.errors
        if res.interrupted:
            return True, errors
    return False, errors


def _log_best(plan: SweepPlan, client: Any, experiment_id: str, parent_run_id: str) -> dict[str, dict[str, str]]:
    """Best parameters of every search study → printed, and logged to the parent run as params and tags
    ``best.<param>`` (prefixed with the cell and fold when the sweep has several studies)."""
    from mlflow.exceptions import MlflowException

    best: dict[str, dict[str, str]] = {}
    for study in plan.searches:
        found = best_search_trial(client, experiment_id, study)
        if found is None:
            continue
        params, value, run = found
        best[study.key] = {**params, study.search.metric: f"{value:.6g}"}
        prefix = C.best_param_prefix(study.cell.id, study.fold) if len(plan.searches) > 1 else C.BEST_PREFIX
        entries = {f"{prefix}{k}": v for k, v in params.items()}
        entries[f"{prefix}run_id"] = run.info.run_id
        for k, v in entries.items():
            client.set_tag(parent_run_id, k, v)
            try:
                client.log_param(parent_run_id, k, v)
            except MlflowException:  # a resumed launch that logged another best earlier: the tag holds the latest
                pass
        client.log_metric(parent_run_id, f"{prefix}{study.search.metric}", value)
    return best


# ------------------------------------------------------------------------------------------------ CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestration.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", type=Path, help="sweep YAML (experiments/<name>.yaml)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI or a *.db path (default: $MLFLOW_TRACKING_URI, else "
                                          "sqlite:///<cwd>/mlflow.db; the report command uses the same rule)")
    p.add_argument("--storage", help="Ray Tune storage path or URI (default <cwd>/ray_results)")
    p.add_argument("--resume", action="store_true", help="continue the newest launch of this YAML")
    p.add_argument("--force", action="store_true", help="run trials that already have a FINISHED run")
    p.add_argument("--dry-run", action="store_true", help="print the trial plan and a measured cost estimate")
    p.add_argument("--smoke", action="store_true", help="every cell for a few iterations on the first fold")
    p.add_argument("--n-trials", type=int, help="Optuna trials per search study (overrides search.n_trials)")
    p.add_argument("--max-concurrent", type=int, help="trials running at once (grid and search)")
    p.add_argument("--gpu-policy", choices=("error", "drop"), default="error",
                   help="a GPU request on a cluster without GPUs: refuse (default) or drop it with a warning")
    p.add_argument("--max-failures", type=int, default=SweepOptions.max_failures,
                   help="restarts of a failed trial from its last checkpoint (default %(default)s)")
    p.add_argument("--experiment-name", help="MLflow experiment name (default: the YAML's name)")
    p.add_argument("--tune-verbose", type=int, choices=(0, 1, 2), default=0,
                   help="Tune's own console output (0: one line per trial event, the default)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    opts = SweepOptions(spec_path=args.spec, tracking_uri=args.tracking_uri, storage=args.storage,
                        resume=args.resume, force=args.force, dry_run=args.dry_run, smoke=args.smoke,
                        n_trials=args.n_trials, max_concurrent=args.max_concurrent, gpu_policy=args.gpu_policy,
                        max_failures=args.max_failures, experiment_name=args.experiment_name,
                        verbose=args.tune_verbose, handle_signals=True)
    _handle_interrupts()
    t0 = time.perf_counter()
    try:
        outcome = run_sweep(opts)
    except (SpecError, SweepError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted before the sweep started", file=sys.stderr)
        return 130
    print(f"[sweep] wall time {time.perf_counter() - t0:.1f} s", flush=True)
    return {"finished": 0, "dry-run": 0, "nothing-to-do": 0, "interrupted": 130}.get(outcome.status, 1)


if __name__ == "__main__":
    raise SystemExit(main())
