"""Run a sweep YAML on Ray Tune with MLflow tracking — the command line and :func:`run_sweep`.

``python -m orchestration.sweep experiments/X.yaml [--tracking-uri URI] [--storage PATH_OR_URI] [--resume]
[--force] [--no-reuse] [--reuse any|same-commit] [--dry-run] [--smoke] [--n-trials N] [--max-concurrent N]
[--gpu-policy error|drop] [--register-model NAME]``

1. The YAML is validated completely (every trial's RunConfig) before anything starts.
2. MLflow: the experiment (named by the YAML) is created in this process before trials start; a parent run is
   opened for the launch; a RUNNING parent left by a dead driver on this host is ended as KILLED first.
3. Trials whose cell × fold already has a FINISHED run with the same config hash are skipped (``--force`` runs
   them again); a search study with ``n_trials`` FINISHED runs of the same search is skipped too. A grid trial
   whose config hash has a FINISHED run anywhere else in the store (another sweep or experiment) is reused: a link
   run in this experiment names that run, and the summary, status and report read its results (``--no-reuse``
   trains it again; ``--reuse same-commit`` reuses only runs of this code, and a run of another commit is named in
   one line). A link whose source run was deleted or purged stands for nothing: it is named and trained again.
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
import os
import secrets
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from mutexmatch.cli import add_version, answer_early, entry_point
from orchestration.runtime import signals
from orchestration.runtime.jobs import check_job_paths, require_packages
from orchestration.runtime.processes import start_time

# The command line, defined before the imports below: --help, --version and a usage error answer without them.
_RESUME_AUTO = "--resume-auto"


def _resume_auto(argv: Sequence[str]) -> list[str]:
    """``--resume auto`` (or ``--resume=auto``) as the hidden flag; a bare ``--resume`` stays what it was, so a
    YAML written after it (``--resume x.yaml``) is still the YAML."""
    out, args = [], list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--resume=auto" or (arg == "--resume" and args[:1] == ["auto"]):
            args = args[1:] if arg == "--resume" else args
            arg = _RESUME_AUTO
        out.append(arg)
    return out


def _parser() -> argparse.ArgumentParser:
    from orchestration.contract import MAX_FAILURES, REUSE_ANY, REUSE_POLICIES  # standard library only

    p = argparse.ArgumentParser(prog="python -m orchestration.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", type=Path, help="sweep YAML (experiments/<name>.yaml)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI or a *.db path (default: $MLFLOW_TRACKING_URI, else "
                                          "sqlite:///<cwd>/mlflow.db; the report command uses the same rule)")
    p.add_argument("--storage", help="Ray Tune storage path or URI (default <cwd>/ray_results)")
    p.add_argument("--resume", action="store_true", help="continue the newest launch of this YAML; `--resume auto`: "
                   "continue it unless it finished, else start a launch (what a job that may be requeued or retried "
                   "runs: the same command every time)")
    p.add_argument(_RESUME_AUTO, dest="resume", action="store_const", const="auto",  # `--resume auto`: _resume_auto
                   help=argparse.SUPPRESS)
    p.add_argument("--notify", metavar="URL", help="a webhook (Slack-compatible JSON) told when the sweep ends and "
                   "when a trial has no retry left; never recorded (a webhook URL is a secret)")
    p.add_argument("--force", action="store_true", help="run trials that already have a FINISHED run")
    p.add_argument("--no-reuse", action="store_true", help="train a trial even when another sweep or experiment "
                   "of the store has a FINISHED run of its config (default: reuse that run)")
    p.add_argument("--reuse", choices=REUSE_POLICIES, default=REUSE_ANY,
                   help="which FINISHED runs of a trial's config elsewhere in the store are reused: any (default; "
                        "those trained by another commit are named in one line) or same-commit (only those trained "
                        "by this commit with neither tree dirty; the rest are trained again)")
    p.add_argument("--dry-run", action="store_true", help="print the trial plan and a measured cost estimate")
    p.add_argument("--smoke", action="store_true", help="every cell for a few iterations on the first fold")
    p.add_argument("--n-trials", type=int, help="Optuna trials per search study (overrides search.n_trials)")
    p.add_argument("--max-concurrent", type=int, help="trials running at once (grid and search)")
    p.add_argument("--gpu-policy", choices=("error", "drop"), default="error",
                   help="a GPU request on a cluster without GPUs: refuse (default) or drop it with a warning")
    p.add_argument("--max-failures", type=int, default=MAX_FAILURES,
                   help="restarts of a failed trial from its last checkpoint (default %(default)s; -1: without "
                        "end), each after a back-off of 10 s doubling per attempt up to 10 min")
    p.add_argument("--experiment-name", help="MLflow experiment name (default: the YAML's name)")
    p.add_argument("--register-model", metavar="NAME", help="register each cell's best model (its best fold's, a "
                   "tuned row's too) as a version of MLflow's registered model NAME: models:/NAME/<version>")
    p.add_argument("--tune-verbose", type=int, choices=(0, 1, 2), default=0,
                   help="Tune's own console output (0: one line per trial event, the default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the sweep YAML before validation, e.g. --set base.data.root=/mnt/datasets "
                        "or --set resources.gpu=1 (repeatable; recorded on the parent run and in the resume command)")
    p.add_argument("--per-trial", action="store_true", help="--dry-run: one row per trial, not one per cell")
    p.add_argument("--gpus", type=int, help="--dry-run: wall-clock time on this many GPUs (default: those here)")
    return add_version(p)


if __name__ == "__main__":
    signals.exit_while_importing()  # first: a stop signal while importing ends it resumable, not 138 (issue 40)
    # --help, --version and usage errors: before Ray, MLflow and torch load
    answer_early(lambda words: _parser().parse_args(_resume_auto(words)))
    require_packages()  # before the imports below: one line, not a traceback (a Ray head's Python without them)

from orchestration.runtime.env import apply_closed_network_env  # noqa: E402

apply_closed_network_env()

from orchestration import contract as C  # noqa: E402
from orchestration.trial import tracking  # noqa: E402
from orchestration.launch.cluster import check_cluster, check_resources, init_ray  # noqa: E402
from orchestration.launch.dryrun import dry_run  # noqa: E402
from orchestration.launch import interrupts  # noqa: E402
from orchestration.store import mlflow_ui  # noqa: E402
from orchestration.launch import orphans  # noqa: E402
from orchestration.launch.interrupts import handle_interrupts  # noqa: E402
from orchestration.launch.launchlock import LaunchRunning, launch_lock, lock_path  # noqa: E402
from orchestration.launch.launch import (Launch, SweepError, SweepOptions, SweepOutcome, check_options,  # noqa: E402
                                         command_line, link_reusable, record_expected_runs,
                                         record_without_launch, resolve_storage, resume_or_start,
                                         resumed_selection, save_launch_plan, select)
from orchestration.launch.notify import Notifier, notify_ended  # noqa: E402
from orchestration.launch.register import register_best_models  # noqa: E402
from orchestration.spec.overrides import load_sweep, plan_sweep  # noqa: E402
from orchestration.spec.tryouts import yaml_plan  # noqa: E402
from orchestration.launch.phases import run_phases  # noqa: E402
from orchestration.spec.plan import SweepPlan  # noqa: E402
from orchestration.launch.search import log_best  # noqa: E402
from orchestration.spec.models import SpecError  # noqa: E402
from orchestration.status import StatusReporter  # noqa: E402
from orchestration.store.store import Store  # noqa: E402
from orchestration.launch.summary import format_statuses, grid_summary, publish_counted, trial_statuses  # noqa: E402

__all__ = ["SweepOptions", "SweepOutcome", "SweepError", "run_sweep", "main", "resolve_storage",
           "check_resources"]


# A tracking server has no launch lock file: a link run RUNNING this long (it is RUNNING for milliseconds) is stale.
STALE_LINK_S = 60.0


@dataclass
class _Selection:
    grid_keys: list[str]
    phases: list[str]
    skipped: list[str]
    resumed: Any = None               # the parent run of the launch being resumed


def run_sweep(opts: SweepOptions) -> SweepOutcome:
    """Run (or dry-run, or resume) the sweep described by ``opts``. Raises SpecError/SweepError before anything
    starts when the spec or the cluster cannot work."""
    launch = _prepare(opts)
    if opts.dry_run:
        return dry_run(launch.plan, opts, launch.uri, launch.storage, launch.exp_name)
    # held from before the store is first opened to the end: a second launch is refused, never a duplicate
    with launch_lock(launch.uri, launch.exp_name, command_line(opts, launch.uri, launch.storage,
                                                               resume=opts.resume)) as name_launch, \
            C.store_file_errors(launch.uri, "--tracking-uri"):  # its disk full at any write: one line (finding #4)
        return _run_locked(launch, name_launch)


def _run_locked(launch: Launch, name_launch: Callable[[str], None]) -> SweepOutcome:
    opts = launch.opts
    client = tracking.MlflowClient(launch.uri)
    with C.bounded_http(launch.uri, "--tracking-uri"):  # a dead server: one line within ~20 s, not 4 min of silence
        experiment_id = tracking.ensure_experiment(client, launch.exp_name, launch.uri,
                                                   mlflow_ui.experiment_tags(launch.plan.spec.axes,
                                                                             launch.plan.settings_digest,
                                                                             launch.plan.spec.tables))
    store = launch.store = Store(client, experiment_id)
    resume_cmd = command_line(opts, launch.uri, launch.storage, resume=True)
    for dead in store.kill_dead_launches():
        print(f"[sweep] launch {dead.data.tags.get(C.LAUNCH_ID)} was interrupted (its driver is "
              f"gone); its runs are now KILLED." + ("" if opts.resume else f" To continue it: {resume_cmd}"),
              flush=True)
        ended = orphans.end_orphans(dead.data.tags.get(C.RAY_PROCESSES))
        if ended:
            print(f"[sweep] ended {len(ended)} Ray process(es) that launch left running (pids "
                  f"{', '.join(map(str, ended))})", flush=True)
    _refuse_live_launches(launch)
    # a link run left RUNNING by a launch stopped while linking (with the lock file held, any RUNNING one is)
    stale = store.end_stale_links(0.0 if lock_path(launch.uri) is not None else STALE_LINK_S)
    if stale:
        print(f"[sweep] ended {len(stale)} link run(s) of reused trials left RUNNING by an interrupted launch "
              f"(now KILLED): {', '.join(r.info.run_name for r in stale[:3])}{' …' if len(stale) > 3 else ''}",
              flush=True)
    chosen = _choose(launch)
    if isinstance(chosen, SweepOutcome):
        return chosen
    # Ray and the resource check come before the parent run: a sweep the cluster cannot run leaves no trace.
    started_ray, launch.request = _start_ray(opts, launch.plan)
    launch.commit = _code_commit()
    launch.parent = _open_parent(launch, chosen)
    launch.notifier = Notifier(opts.notify)
    ended = {"exp_name": launch.exp_name, "launch_id": launch.parent.launch_id, "resume": resume_cmd}
    try:
        outcome = _run_launch(launch, chosen, started_ray, resume_cmd, name_launch)
    except KeyboardInterrupt:  # a second Ctrl+C: during Ray's shutdown, the final statuses, the summary
        _abort(launch, resume_cmd)
        notify_ended(launch.notifier, status="aborted", **ended)
        raise interrupts.LaunchAborted from None
    except BaseException as e:
        notify_ended(launch.notifier, status="failed", error=e, **ended)
        raise
    notify_ended(launch.notifier, status=outcome.status, outcome=outcome, **ended)
    return outcome


def _code_commit() -> str:
    return tracking.git_commit(Path(__file__).resolve().parent.parent)  # the code that runs, not the cwd


def _abort(launch: Launch, resume_cmd: str) -> None:
    """The launch's unfinished runs ended KILLED (not left RUNNING) and the resume command printed."""
    store, parent = launch.store, launch.parent

    def end() -> None:
        store.end_open_children(parent.run_id, "KILLED")
        store.end_run(parent.run_id, "KILLED")

    interrupts.uninterruptible(end)
    print(f"\n[sweep] aborted: launch {parent.launch_id} stopped, its unfinished runs are KILLED.\n"
          f"To resume this launch (finished trials are not re-run):\n  {resume_cmd}", flush=True)


def _run_launch(launch: Launch, chosen: _Selection, started_ray: bool, resume_cmd: str,
                name_launch: Callable[[str], None]) -> SweepOutcome:
    """The launch once its parent run is open: the phases, then the final statuses and the summary."""
    opts, store, parent = launch.opts, launch.store, launch.parent
    client, experiment_id = store.client, store.experiment_id
    name_launch(parent.launch_id)
    if started_ray:  # what a SIGKILLed driver would leave running, for the next launch to end
        client.set_tag(parent.run_id, C.RAY_PROCESSES, orphans.describe_children()[:5000])
    tracking.log_params_and_tags(client, parent.run_id, {}, C.parent_display_tags(launch.plan.spec.description,
                                                                                   opts.overrides))
    what = "" if launch.plan.smoke else ", the runs the report counts (each added as it finishes)"
    print(f"[sweep] MLflow UI{what}: {mlflow_ui.ui_hint(launch.uri, experiment_id, launch.plan.settings_digest)}",
          flush=True)
    reporter = StatusReporter(launch.plan, launch.uri, experiment_id, parent.run_id).start()
    interrupts.STOP_HOOKS[:] = [lambda: _stop_signal(launch.uri, experiment_id, parent, resume_cmd)]
    interrupted, errors = False, 0
    try:
        ran = run_phases(launch, chosen.grid_keys, chosen.phases)
        interrupted, errors = ran.interrupted, ran.errors
        chosen.grid_keys = chosen.grid_keys + ran.refit_keys
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        store.end_open_children(parent.run_id, "FAILED")
        store.end_run(parent.run_id, "FAILED")
        raise
    finally:
        interrupts.STOP_HOOKS.clear()
        reporter.stop()
        if started_ray:
            import ray

            ray.shutdown()
    outcome = _finish(launch, chosen, interrupted, errors, resume_cmd)
    reporter.refresh()  # the final statuses (interrupted runs are KILLED only now)
    return outcome


def _refuse_live_launches(launch: Launch) -> None:
    """A launch of this experiment whose driver is alive on this host (a tracking server: the lock file cannot see
    it) is refused in one line; one RUNNING on another host gets a warning, as its driver cannot be checked."""
    here, elsewhere = launch.store.live_launches()
    if here:
        t = here[0].data.tags
        raise LaunchRunning(f"experiment {launch.exp_name!r} in {launch.uri}: launch {t.get(C.LAUNCH_ID)} (driver "
                            f"pid {t.get(C.DRIVER_PID)}, parent run {here[0].info.run_id}) is running; wait for it "
                            "to end, or stop it (Ctrl+C in its terminal) and continue it with --resume; two "
                            "launches at once would train the same trials twice")
    for run in elsewhere:
        print(f"warning: launch {run.data.tags.get(C.LAUNCH_ID)} of experiment {launch.exp_name!r} is RUNNING on "
              f"{run.data.tags.get(C.DRIVER_HOST)}; if it is alive, trials both launches select train twice",
              flush=True)


def _stop_signal(uri: str, experiment_id: str, parent: tracking.ParentInfo, resume_cmd: str) -> None:
    """The first SIGTERM (``ray job stop``, a scheduler): the resume command and the runs marked KILLED at once,
    within the few seconds before a SIGKILL; Tune's graceful stop follows (and ends the launch the same way)."""
    print(f"\n[sweep] stop signal (SIGTERM): the launch's running trials and its parent run are marked KILLED now "
          f"(the driver may be killed within seconds). To resume this launch (finished trials are not re-run):\n  "
          f"{resume_cmd}", flush=True)
    store = Store.at(uri, experiment_id)
    store.end_open_children(parent.run_id, "KILLED")
    store.client.set_tag(parent.run_id, C.ENDED_BY, "stop signal (SIGTERM)")
    store.end_run(parent.run_id, "KILLED")


def _prepare(opts: SweepOptions) -> Launch:
    check_options(opts)
    project = Path(opts.project_dir or Path.cwd()).resolve()
    # a dry run plans without the datasets (it says which are missing); a launch needs them
    loaded = load_sweep(opts.spec_path, project, opts.overrides, need_data=not opts.dry_run)
    plan = plan_sweep(loaded, project, smoke=opts.smoke, n_trials=opts.n_trials, max_concurrent=opts.max_concurrent)
    _check_report_layouts(loaded.spec)
    uri = tracking.resolve_tracking_uri(opts.tracking_uri, project, write=not opts.dry_run)  # a dry run only reads
    storage = resolve_storage(opts.storage, project)
    if not opts.dry_run:
        check_job_paths(uri, storage)   # under `ray job submit`: no store inside the job's temporary folder
    own = None if opts.dry_run else yaml_plan(opts.spec_path, project, opts.overrides, opts.smoke)
    return Launch(opts, plan, uri, storage, opts.experiment_name or loaded.spec.name, project, yaml_plan=own)


def _check_report_layouts(spec: Any) -> None:
    """A table or figure the report would reject is refused now, not after days of training: the contract's layout
    schema, which the report builds from (imported here only when a YAML has a layout: it needs pydantic)."""
    if not (spec.tables or spec.figures):
        return
    from orchestration.contract.layout import validate_report

    from mutexmatch.imb_algorithms import declared_terms   # the algorithms' and imbalance algorithms' terms

    validate_report(spec.model_dump(mode="json"), terms=declared_terms())  # train/<term> of a registered algorithm


def _choose(launch: Launch) -> _Selection | SweepOutcome:
    """The trials this launch runs: those of the launch being resumed, else every one not FINISHED already."""
    plan, opts, store = launch.plan, launch.opts, launch.store
    finished_smoke = False
    if opts.resume == "auto":  # continue the newest launch of these settings unless it FINISHED; else start
        found, line = resume_or_start(store, plan, launch.storage)
        print(f"[sweep] --resume auto: {line}", flush=True)
        resume = found is not None and found.info.status != "FINISHED"
        finished_smoke = found is not None and not resume and plan.smoke  # a smoke launch always trains: not again
        launch.opts = opts = replace(opts, resume=resume)
    if opts.resume:
        found = store.resumable_parent(spec_hash=plan.spec_hash, storage=launch.storage, smoke=plan.smoke)
        if found is None:
            raise SweepError(f"--resume: no earlier launch of {launch.spec_path} (spec hash {plan.spec_hash}, "
                             f"storage {launch.storage}{', smoke' if plan.smoke else ''}) in experiment "
                             f"{launch.exp_name!r}; start it without --resume (a changed YAML is a new sweep)")
        grid_keys, phases, skipped = resumed_selection(store, plan, found,  # its plan, or chosen again if lost
                                                       lambda line: print(f"[sweep] {line}", flush=True))
        return _Selection(grid_keys, phases, skipped, resumed=found)
    for line in store.lost_lines(store.finished_trials(C.KIND_GRID)):  # reused trials whose source is gone
        print(f"[sweep] {line}", flush=True)
    grid_keys, phases, skipped = ([], [], []) if finished_smoke else select(plan, store, force=opts.force)
    if not (opts.force or opts.no_reuse):
        launch.commit = _code_commit()
        grid_keys, reused = link_reusable(plan, store, grid_keys, commit=launch.commit, reuse=opts.reuse,
                                          say=lambda line: print(f"[sweep] {line}", flush=True))
        skipped += reused
        if reused:
            print(f"[sweep] {len(reused)} trial(s) reused from FINISHED runs of the same config elsewhere in the "
                  f"store (not trained again; --no-reuse trains them)", flush=True)
    if grid_keys or phases:
        return _Selection(grid_keys, phases, skipped)
    out = SweepOutcome(status="nothing-to-do", experiment_id=store.experiment_id, skipped=skipped)
    if not record_without_launch(store, plan):  # all reused: a finished launch records them
        launch.commit = _code_commit()
        parent = launch.parent = _open_parent(launch, _Selection([], [], skipped))
        store.end_run(parent.run_id, "FINISHED")
        out.parent_run_id, out.launch_id = parent.run_id, parent.launch_id
    out.summary = grid_summary(store, plan)
    publish_counted(store, plan, launch.uri, launch.opts.overrides, out.summary)
    _register(launch)
    print(f"[sweep] every trial of {launch.spec_path} already has a FINISHED run with the same config in "
          f"experiment {launch.exp_name!r} (or reused from another in the store); nothing to do (--force runs "
          f"them again).\n\n{out.summary}", flush=True)
    return out


def _start_ray(opts: SweepOptions, plan: SweepPlan) -> tuple[bool, dict[str, float]]:
    """Ray started (or joined) and the per-trial request checked against it; (we started it, the request)."""
    import ray

    # a stop signal while Ray starts is held, then acted on (finding #17: Ray's handler exited 15 without a word)
    with signals.held() if opts.handle_signals else nullcontext([]) as received:
        started_ray = init_ray(interrupted=lambda: bool(received))
    try:
        if opts.handle_signals:
            handle_interrupts()  # again: ray.init installs its own (aborting) SIGTERM handler
            interrupts.act_on(received)
        request, warns = check_cluster(plan.spec.resources, opts.gpu_policy)
    except BaseException:
        if started_ray:
            ray.shutdown()
        raise
    for w in warns:
        warnings.warn(w, RuntimeWarning, stacklevel=3)
        print(f"warning: {w}", flush=True)
    return started_ray, request


def _open_parent(launch: Launch, chosen: _Selection) -> tracking.ParentInfo:
    """The launch's parent run: the resumed one set RUNNING again, or a new one with the launch plan saved."""
    store = launch.store
    client = store.client
    if chosen.resumed is not None:
        found = chosen.resumed
        parent = tracking.ParentInfo(found.info.run_id, found.data.tags[C.LAUNCH_ID], launch.storage)
        client.update_run(parent.run_id, "RUNNING")
        client.set_tag(parent.run_id, C.DRIVER_PID, str(os.getpid()))
        client.set_tag(parent.run_id, C.DRIVER_START, start_time())
        print(f"[sweep] resuming launch {parent.launch_id} (parent run {parent.run_id})", flush=True)
        return parent
    launch_id = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    parent = tracking.create_parent_run(
        store, launch_id=launch_id, spec_path=launch.spec_path.resolve(),
        spec_text=launch.spec_path.read_text(), spec_hash=launch.plan.spec_hash, commit=launch.commit,
        storage=launch.storage, smoke=launch.plan.smoke,
        command=command_line(launch.opts, launch.uri, launch.storage, resume=False))
    save_launch_plan(client, parent.run_id, {"grid": chosen.grid_keys, "phases": chosen.phases,
                                             "skipped": chosen.skipped})
    record_expected_runs(client, parent.run_id, launch.plan)
    print(f"[sweep] launch {launch_id}: {len(chosen.grid_keys)} grid trial(s), {len(chosen.phases)} search "
          f"stud(y/ies); {len(chosen.skipped)} skipped; MLflow {launch.uri} experiment {launch.exp_name!r} "
          f"parent run {parent.run_id}", flush=True)
    return parent


def _finish(launch: Launch, chosen: _Selection, interrupted: bool, errors: int, resume_cmd: str) -> SweepOutcome:
    """Final statuses, the best search parameters, the parent run ended, and the summary printed."""
    plan, store, parent = launch.plan, launch.store, launch.parent
    if interrupted:
        store.end_open_children(parent.run_id, "KILLED")
    st = trial_statuses(store, parent.run_id, plan, chosen.grid_keys, chosen.phases, chosen.skipped)
    outcome = SweepOutcome(status="finished", experiment_id=store.experiment_id, parent_run_id=parent.run_id,
                           launch_id=parent.launch_id, skipped=chosen.skipped, finished=st.finished,
                           failed=st.failed, not_finished=st.not_finished)
    outcome.status = "interrupted" if interrupted else "failed" if (errors or st.failed or st.not_finished) \
        else "finished"
    outcome.best = log_best(plan, store, parent.run_id)
    store.end_run(parent.run_id, {"interrupted": "KILLED", "failed": "FAILED"}.get(outcome.status, "FINISHED"))
    outcome.summary = grid_summary(store, plan)
    publish_counted(store, plan, launch.uri, launch.opts.overrides, outcome.summary)
    _register(launch)
    print(f"\n[sweep] {outcome.status}: launch {parent.launch_id}, MLflow experiment {launch.exp_name!r} "
          f"(parent run {parent.run_id})\n{format_statuses(st)}\n\nTest accuracy per cell "
          f"(mean ± std over folds; final = last evaluation, best = max over evaluations):\n{outcome.summary}\n"
          f"MLflow UI, these runs by cell: {mlflow_ui.ui_hint(launch.uri, store.experiment_id, plan.settings_digest)}",
          flush=True)
    for key, params in outcome.best.items():
        print(f"best parameters of search {key}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    if outcome.status != "finished":
        outcome.resume_command = resume_cmd
        print(f"\nTo resume this launch (finished trials are not re-run):\n  {resume_cmd}", flush=True)
    return outcome


def _register(launch: Launch) -> None:
    """``--register-model NAME``: every complete cell's best model a version of NAME (launch/register.py)."""
    if launch.opts.register_model is not None:
        register_best_models(launch.store, launch.plan, launch.opts.register_model,
                             lambda line: print(f"[sweep] {line}", flush=True))


# ------------------------------------------------------------------------------------------------ CLI
@entry_point("python -m orchestration.sweep")
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(_resume_auto(sys.argv[1:] if argv is None else argv))
    opts = SweepOptions(spec_path=args.spec, tracking_uri=args.tracking_uri, storage=args.storage,
                        resume=args.resume, force=args.force, dry_run=args.dry_run, smoke=args.smoke,
                        n_trials=args.n_trials, max_concurrent=args.max_concurrent, gpu_policy=args.gpu_policy,
                        max_failures=args.max_failures, experiment_name=args.experiment_name,
                        verbose=args.tune_verbose, handle_signals=True, overrides=tuple(args.overrides),
                        per_trial=args.per_trial, gpus=args.gpus, no_reuse=args.no_reuse, reuse=args.reuse,
                        notify=args.notify, register_model=args.register_model)
    t0 = time.perf_counter()
    try:
        handle_interrupts()
        outcome = run_sweep(opts)
    except (SpecError, SweepError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except interrupts.LaunchAborted:
        return 130  # the runs are KILLED and the resume command printed
    except interrupts.LinkingInterrupted as e:
        print(f"interrupted while linking reused trials: {e.linked} of {e.total} link run(s) written, each "
              "FINISHED (none left RUNNING); nothing was trained and no launch was opened. The same command links "
              "the rest and trains what is left", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(signals.before_start_line(interrupts.last_signal()), file=sys.stderr)
        return 130
    print(f"[sweep] wall time {time.perf_counter() - t0:.1f} s", flush=True)
    return {"finished": 0, "dry-run": 0, "nothing-to-do": 0, "interrupted": 130}.get(outcome.status, 1)


if __name__ == "__main__":
    raise SystemExit(main())
