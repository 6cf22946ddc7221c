"""Tune phases of a launch, one after another: the grid (``tune.grid_search`` over cell × fold keys), then one
Optuna study per searched cell × fold; ``--resume`` restores each phase with ``Tuner.restore``. After each phase
every MLflow run of it gets its final status (:func:`reconcile_phase`)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from orchestration import contract as C
from orchestration.launch import interrupts
from orchestration.launch.launch import Launch, record_expected_runs
from orchestration.spec.plan import REFIT_PHASE, SearchStudy, SweepPlan
from orchestration.spec.tryouts import tryout_keys
from orchestration.launch.refit import best_by_cell, pending_refits, refit_trials
from orchestration.launch.search import fail_stale_trials, search_config, study_for_store
from orchestration.contract.filters import status_is, tag_equals
from orchestration.store.store import Store

__all__ = ["Phase", "PhaseResult", "PhasesOutcome", "run_phase", "reconcile_phase", "run_phases"]


@dataclass(frozen=True)
class Phase:
    """One Tune phase of a launch: its name (``grid``, ``smoke``, a study's ``search…``, ``refit``), what Tune
    samples (``param_space``; a search's come from its searcher in ``tune_kwargs``), how many trials it expects,
    and whether its scheduler stops trials early (ASHA)."""

    name: str
    param_space: dict | None
    tune_kwargs: dict[str, Any]
    expected: int
    early_stopping: bool = False


@dataclass
class PhaseResult:
    interrupted: bool
    errors: int


def run_phase(launch: Launch, phase: Phase, trainable: Any) -> PhaseResult:
    """``phase`` run (or, with ``--resume``, restored) by Tune, then every MLflow run of it given its final
    status."""
    from ray import tune

    from orchestration.launch.oomkill import tolerate_memory_kills
    from orchestration.launch.progress import ProgressPrinter, quiet_said_failures, quiet_tune_console
    from orchestration.launch.trialsignals import PassOnUsr1, checkpoint_trials

    opts, store, parent_run_id, name = launch.opts, launch.store, launch.parent.run_id, phase.name
    exp_root = launch.exp_root
    path = f"{exp_root}/{name}"
    restored = opts.resume and tune.Tuner.can_restore(path)
    if restored:
        print(f"[sweep] restoring phase {name} from {path}", flush=True)
        tuner = tune.Tuner.restore(path, trainable, resume_errored=True)
    else:
        run_config = tune.RunConfig(
            name=name, storage_path=exp_root, verbose=opts.verbose,
            failure_config=tune.FailureConfig(max_failures=opts.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2), callbacks=[ProgressPrinter(), PassOnUsr1()])
        tuner = tune.Tuner(trainable, param_space=phase.param_space, run_config=run_config,
                           tune_config=tune.TuneConfig(reuse_actors=opts.reuse_actors, **phase.tune_kwargs))
    quiet_tune_console(opts.verbose)
    quiet_said_failures()
    tolerate_memory_kills()   # a trial killed by Ray's memory monitor is a retried trial failure, not a crash
    interrupts.IN_FIT.set()
    interrupts.PREEMPT_HOOKS[:] = [lambda: checkpoint_trials(store, parent_run_id)]  # the driver's SIGUSR1
    try:
        results = tuner.fit()
    finally:
        interrupts.IN_FIT.clear()
        interrupts.PREEMPT_HOOKS.clear()
    # After an interrupt Tune returns normally; trials it stopped may even count as terminated, so the signal
    # handler's flag is what tells an interrupted phase from a finished one (the counts cover in-process callers).
    interrupted = (interrupts.INTERRUPTED.is_set() or len(results) < phase.expected
                   or results.num_terminated + results.num_errors < len(results))
    if restored:
        _delete_forgotten_runs(name, results, store, parent_run_id)
    reconcile_phase(results, interrupted, store, parent_run_id, early_stopping=phase.early_stopping)
    if not interrupted:
        _notify_failed_trials(launch, name, results)
    return PhaseResult(interrupted, results.num_errors)


def _notify_failed_trials(launch: Launch, phase: str, results: Any) -> None:
    """A trial Tune returns errored from a phase that ran to its end has no retry left: ``--notify`` hears it."""
    if launch.notifier is None:
        return
    from orchestration.launch.notify import trial_text

    for r in results:
        if r.error is not None:
            lines = [ln for ln in str(r.error).splitlines() if ln.strip()]
            trial = f"{Path(str(r.path)).name if r.path else '?'} (phase {phase})"
            launch.notifier.send(trial_text(launch.exp_name, trial, launch.opts.max_failures,
                                            (lines[-1] if lines else type(r.error).__name__)[:300]))


def _delete_forgotten_runs(name: str, results: Any, store: Store, parent_run_id: str) -> None:
    """A driver killed between a trial's start and Tune's next save of its state leaves a run whose trial the
    restored phase never heard of (a search then samples a new trial in its place). Such a run would stay KILLED
    forever beside its replacement: it is deleted (MLflow's soft delete; ``mlflow gc`` removes it for good)."""
    runs = store.unfinished_phase_runs(parent_run_id, name)
    known = _trial_ids(results, {r.data.tags.get(C.TRIAL_ID, "") for r in runs})
    for run in runs:
        if run.data.tags.get(C.TRIAL_ID) not in known:
            print(f"[sweep] deleting run {run.info.run_id} ({run.info.run_name}): its trial started after the "
                  "last saved state of the killed launch and was replaced", flush=True)
            store.client.delete_run(run.info.run_id)


def reconcile_phase(results: Any, interrupted: bool, store: Store, parent_run_id: str, *,
                    early_stopping: bool) -> None:
    """Give every run of the phase its final status, once Tune is done with its trials.

    A trial that Tune stops ends its run as KILLED with ``mutexmatch.stopped=true`` — it cannot tell ASHA's stop
    from an interrupt — or, if its worker is torn down first, leaves it RUNNING. In a phase whose scheduler stops
    trials early and that was not interrupted, such a run was stopped by ASHA: FINISHED with
    ``mutexmatch.early_stopped=true``. Otherwise a RUNNING run is FAILED if its trial errored or the phase has no
    early stopping (its process died), KILLED if the phase was interrupted."""
    client, open_runs = store.client, store.open_or_stopped_children(parent_run_id)
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
        store.end_run(run.info.run_id, status)


def _errored_trial_ids(results: Any, candidates: set[str]) -> set[str]:
    """Tune trial ids of the errored results."""
    return _trial_ids([r for r in results if r.error is not None], candidates)


def _trial_ids(results: Any, candidates: set[str]) -> set[str]:
    """Tune trial ids of ``results``: from each result's metrics, or (an error before the first report leaves
    none) from the trial folder name, which contains the id."""
    ids = set()
    for r in results:
        tid = (r.metrics or {}).get("trial_id")
        if tid:
            ids.add(tid)
        elif r.path:
            name = Path(str(r.path)).name
            ids |= {c for c in candidates if c and f"_{c}_" in name}
    return ids


def _run(launch: Launch, phase: Phase, **trials: Any) -> PhaseResult:
    """One Tune phase whose trials are ``trials`` (``grid=`` keyed trials or ``study=``)."""
    from ray import tune

    from orchestration.trial.spanning import concurrency_cap, trial_request
    from orchestration.trial.preemption import preemptible
    from orchestration.trial.trainable import TrialContext, run_trial

    # resources.workers > 1 (issue 30): the trial's process holds a token, its worker group the checked request
    request, span = trial_request(launch.request, launch.plan.spec.resources.workers, launch.exp_root)
    space = launch.plan.spec.search.space if launch.plan.spec.search else {}
    tryouts = tryout_keys(launch.yaml_plan, trials.get("grid", {}).values(), space)
    if tryouts:
        print(f"[sweep] {len(tryouts)} {phase.name} trial(s) are try-outs of --set (configs the YAML alone does not "
              "plan): their runs end in '· try-out' and the YAML's report and view do not count them", flush=True)
    ctx = TrialContext(tracking_uri=launch.uri, experiment_id=launch.store.experiment_id,
                       parent_run_id=launch.parent.run_id, launch_id=launch.parent.launch_id,
                       git_commit=launch.commit, device="cuda" if launch.request["gpu"] > 0 else "cpu",
                       num_threads=max(1, round(launch.request["cpu"])), source=str(launch.opts.spec_path),
                       **_colors(launch.plan), span=span, tryouts=tryouts,
                       counted_digest="" if launch.plan.smoke else launch.plan.settings_digest,
                       system_metrics_s=_system_metrics_s(launch.plan), **trials)
    trainable = tune.with_resources(preemptible(tune.with_parameters(run_trial, ctx=ctx)), request)
    if span is not None:
        phase = replace(phase, tune_kwargs=concurrency_cap(phase.tune_kwargs, launch.request["groups"]))
    return run_phase(launch, phase, trainable)


def _system_metrics_s(plan: SweepPlan) -> float | None:
    """Seconds between a trial's system-metrics samples; None when the YAML turns them off (``tracking``) or
    MLflow's monitor cannot run here (psutil missing from an environment made before it was a dependency: said in
    one line before the phase; its trials train without them)."""
    tracking = plan.spec.tracking
    if tracking.system_metrics and importlib.util.find_spec("psutil") is None:
        print("warning: tracking.system_metrics=true: MLflow's system metrics need psutil, not installed here "
              "(`make install` or `pip install psutil`; `tracking: {system_metrics: false}` silences this); trials "
              "run without them", flush=True)
        return None
    return tracking.system_metrics_interval if tracking.system_metrics else None


def _colors(plan: SweepPlan) -> dict[str, Any]:
    """Which axis colours the runs and its levels in YAML order (:func:`orchestration.contract.run_color`)."""
    axis = C.color_axis(plan.spec.axes, plan.spec.tables)
    return {"color_axis": axis, "color_levels": tuple(plan.spec.axes.get(axis, ()))}


@dataclass
class PhasesOutcome:
    interrupted: bool = False
    errors: int = 0
    refit_keys: list[str] = field(default_factory=list)   # the refit trials this launch ran


def run_phases(launch: Launch, grid_keys: list[str], phases: list[str]) -> PhasesOutcome:
    """The grid phase, the search phases, then the refit phase, in order; stops at an interrupted phase."""
    from ray import tune

    plan, opts, out = launch.plan, launch.opts, PhasesOutcome()
    concurrency = {"max_concurrent_trials": opts.max_concurrent} if opts.max_concurrent else {}
    steps: list[Callable[[], PhaseResult | None]] = []
    if grid_keys:
        by_key = {t.key: t for t in plan.grid}
        todo = _not_finished_here(launch, grid_keys)
        if todo:
            grid = Phase("smoke" if plan.smoke else "grid", {"trial": tune.grid_search(todo)}, concurrency, len(todo))
            steps.append(lambda: _run(launch, grid, grid={k: by_key[k] for k in grid_keys}))
    steps += [lambda study=study: _run_search(launch, study) for study in plan.searches if study.phase in phases]
    if REFIT_PHASE in phases:
        steps.append(lambda: _run_refit(launch, concurrency, out))
    for step in steps:
        res = step()
        if res is None:
            continue
        out.errors += res.errors
        if res.interrupted:
            out.interrupted = True
            break
    return out


def _not_finished_here(launch: Launch, keys: list[str]) -> list[str]:
    """``keys`` less those with a FINISHED run under this launch's parent. A fresh launch has none; a resumed one
    whose Tune storage was lost would otherwise train its finished trials again — MLflow says they finished, and
    it is trusted. (A restored phase keeps its own trial list; this only shapes a phase started afresh.)"""
    done = {C.trial_key(r.data.tags.get(C.CELL), r.data.tags.get(C.FOLD))
            for r in launch.store.children(launch.parent.run_id, status_is("FINISHED"),
                                           tag_equals(C.ROLE, C.ROLE_TRIAL))
            if r.data.tags.get(C.KIND) in (C.KIND_GRID, C.KIND_SMOKE)}
    if done & set(keys):
        print(f"[sweep] {len(done & set(keys))} grid trial(s) of this launch already FINISHED in MLflow: not run "
              "again", flush=True)
    return [k for k in keys if k not in done]


def _run_search(launch: Launch, study: SearchStudy) -> PhaseResult:
    """One search study as a Tune phase; a relaunch runs only the trials its durable study still misses."""
    finished = len(launch.store.finished_search_runs(study.search_hash))
    name = study_for_store(launch.store, launch.optuna_storage, C.study_name(launch.plan.spec.name, study.key,
                           study.search_hash), mode=study.search.mode, ran_here=finished > 0)
    config = search_config(study, storage=launch.optuna_storage, finished=finished, name=name)
    phase = Phase(study.phase, None, config, config["num_samples"], study.search.scheduler.type == "asha")
    res = _run(launch, phase, study=study)
    if not res.interrupted:
        fail_stale_trials(launch.optuna_storage, name)
    return res


def _run_refit(launch: Launch, concurrency: dict[str, Any], out: PhasesOutcome) -> PhaseResult | None:
    """The refit phase: the best parameters known now (the searches are done) set on every refit slot; trials
    FINISHED with the same parameters are skipped (every trial stays known to the trainable, so a restored phase
    finds the ones it ran)."""
    from ray import tune

    plan = launch.plan
    best = best_by_cell(plan, launch.store)
    trials, problems = refit_trials(plan, best)
    for problem in problems:
        print(f"warning: {problem}", flush=True)
    # the report's tuned rows: these only
    record_expected_runs(launch.store.client, launch.parent.run_id, plan, trials.values())
    todo, _ = pending_refits(trials, launch.store, force=launch.opts.force)
    out.refit_keys = todo
    if not todo:
        return None
    metric = plan.searches[0].search.metric
    for cell, found in best.items():
        print(f"[sweep] refit {cell} with the search's best ({metric}={found.value:.4g}, run {found.run_id}): "
              + ", ".join(f"{k}={v}" for k, v in found.params.items()), flush=True)
    return _run(launch, Phase(REFIT_PHASE, {"trial": tune.grid_search(todo)}, concurrency, len(todo)), grid=trials)
