"""Tune phases of a launch, one after another: the grid (``tune.grid_search`` over cell × fold keys), then one
Optuna study per searched cell × fold; ``--resume`` restores each phase with ``Tuner.restore``. After each phase
every MLflow run of it gets its final status (:func:`reconcile_phase`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestration import contract as C
from orchestration import interrupts, tracking
from orchestration.launch import SweepOptions
from orchestration.plan import SweepPlan
from orchestration.search import search_config

__all__ = ["PhaseResult", "run_phase", "reconcile_phase", "run_phases"]


@dataclass
class PhaseResult:
    interrupted: bool
    errors: int


def run_phase(name: str, trainable: Any, *, param_space: dict | None, tune_kwargs: dict[str, Any], expected: int,
               early_stopping: bool, exp_root: str, opts: SweepOptions, client: Any, experiment_id: str,
               parent_run_id: str) -> PhaseResult:
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
    interrupts.IN_FIT.set()
    try:
        results = tuner.fit()
    finally:
        interrupts.IN_FIT.clear()
    # After an interrupt Tune returns normally; trials it stopped may even count as terminated, so the signal
    # handler's flag is what tells an interrupted phase from a finished one (the counts cover in-process callers).
    interrupted = (interrupts.INTERRUPTED.is_set() or len(results) < expected
                   or results.num_terminated + results.num_errors < len(results))
    reconcile_phase(results, interrupted, client, experiment_id, parent_run_id, early_stopping=early_stopping)
    return PhaseResult(interrupted, results.num_errors)


def reconcile_phase(results: Any, interrupted: bool, client: Any, experiment_id: str, parent_run_id: str, *,
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


def run_phases(plan: SweepPlan, opts: SweepOptions, client: Any, experiment_id: str,
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
        res = run_phase("smoke" if plan.smoke else "grid", trainable,
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
        res = run_phase(study.phase, trainable, param_space=None, tune_kwargs=search_config(study),
                         expected=study.n_trials, early_stopping=study.search.scheduler.type == "asha",
                         **common)
        errors += res.errors
        if res.interrupted:
            return True, errors
    return False, errors
