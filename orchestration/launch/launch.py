"""What one launch of a sweep is: its options and outcome, where Tune stores it, the command that repeats it, which
trials it runs (finished ones are skipped) and the launch plan saved to the parent run so ``--resume`` runs exactly
the same trials."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from orchestration import contract as C
from orchestration.trial import tracking
from orchestration.trial.tracking import ParentInfo
from orchestration.spec.plan import REFIT_PHASE, GridTrial, SweepPlan, expected_runs
from orchestration.launch.refit import best_by_cell, pending_refits, refit_trials
from orchestration.launch import interrupts
from orchestration.launch.notify import check_url
from orchestration.spec.models import NAME_RULE, is_name, name_fault
from orchestration.store.store import Store, as_store
from orchestration.contract.filters import NEWEST_FIRST

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["SweepError", "SweepOptions", "Launch", "SweepOutcome", "check_options", "resolve_storage",
           "command_line", "select", "reusable", "link_reusable", "save_launch_plan", "load_launch_plan",
           "resumed_selection", "record_expected_runs", "record_without_launch", "resume_or_start",
           "AUTO_OTHER_SETTINGS"]


class SweepError(RuntimeError):
    """A sweep that cannot start (nothing to resume, resources the cluster cannot provide, …)."""


@dataclass
class SweepOptions:
    spec_path: Path
    tracking_uri: str | None = None
    storage: str | None = None
    resume: bool | str = False        # True: --resume; "auto": --resume auto (resume_or_start decides)
    force: bool = False
    dry_run: bool = False
    smoke: bool = False
    n_trials: int | None = None
    max_concurrent: int | None = None
    gpu_policy: str = "error"
    max_failures: int = C.MAX_FAILURES
    experiment_name: str | None = None
    project_dir: Path | None = None
    reuse_actors: bool = True
    verbose: int = 0
    handle_signals: bool = False      # the CLI: Ctrl+C and SIGTERM end the launch gracefully (see _on_interrupt)
    overrides: tuple[str, ...] = ()   # --set key=value on the sweep YAML (orchestration.spec.overrides)
    per_trial: bool = False           # --dry-run: one row per trial instead of one per cell
    gpus: int | None = None           # --dry-run: wall-clock days on this many GPUs
    no_reuse: bool = False            # --no-reuse: train a config even if another sweep of the store finished it
    reuse: str = C.REUSE_ANY          # --reuse same-commit: reuse only runs of this code (contract.reuse)
    notify: str | None = None         # --notify URL: a Slack-compatible webhook (orchestration.launch.notify)
    register_model: str | None = None  # --register-model NAME: each cell's best model (orchestration.launch.register)


@dataclass
class Launch:
    """One launch of a sweep YAML, as each of its steps sees it: the options and the plan, where it writes (the
    MLflow store and experiment, Tune's storage, the Optuna studies) and, once it has them, the open store, its
    parent run, the code's commit and what each trial requests of Ray. The sweep builds it; the selection, the
    phases and the end of the launch take it whole (nothing of it is pickled: a trial gets a
    :class:`orchestration.trial.trainable.TrialContext`)."""

    opts: SweepOptions
    plan: SweepPlan
    uri: str                          # the MLflow tracking URI (contract.resolve_tracking_uri)
    storage: str                      # Tune's storage (resolve_storage)
    exp_name: str
    project: Path
    store: Store | None = None        # once the experiment exists
    parent: ParentInfo | None = None  # once the parent run is open
    commit: str = ""
    request: dict[str, float] = field(default_factory=dict)   # per trial, as checked against the cluster
    notifier: Any = None              # orchestration.launch.notify.Notifier (--notify), once the launch starts
    yaml_plan: SweepPlan | None = None  # the YAML's plan without --set: tells its try-outs (spec/tryouts.py)

    @property
    def spec_path(self) -> Path:
        return Path(self.opts.spec_path)

    @property
    def optuna_storage(self) -> str:
        """The Optuna storage URL of the search studies, a database or a journal file (contract.optuna_storage_url)."""
        search = self.plan.spec.search
        return C.optuna_storage_url(search.storage if search else None, self.uri, self.project)

    @property
    def exp_root(self) -> str:
        """Tune's folder of this launch: one experiment per phase below it."""
        assert self.parent is not None, "the parent run opens before any phase"
        return f"{self.storage.rstrip('/')}/{self.exp_name}/{self.parent.launch_id}"

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


def check_options(opts: SweepOptions) -> None:
    """Refuse command-line values that cannot work, naming the flag, before anything is read or started."""
    for flag, value, low in (("--max-concurrent", opts.max_concurrent, 1), ("--n-trials", opts.n_trials, 1),
                             ("--max-failures", opts.max_failures, -1), ("--gpus", opts.gpus, 1)):
        if value is not None and value < low:
            raise ValueError(f"{flag}={value}: must be >= {low}" + (" (-1: retry without end, as Ray's -1)"
                                                                     if flag == "--max-failures" else ""))
    if opts.notify is not None:
        check_url(opts.notify)
    if opts.reuse not in C.REUSE_POLICIES:
        raise ValueError(f"--reuse {opts.reuse!r}: give one of {', '.join(C.REUSE_POLICIES)} (same-commit: reuse "
                         "only runs trained by this code; --no-reuse: reuse none)")
    if opts.resume not in (False, True, "auto"):
        raise ValueError(f"--resume {opts.resume!r}: give --resume (continue the newest launch) or --resume auto "
                         "(continue it if it did not finish, else start)")
    if opts.experiment_name is not None and not is_name(opts.experiment_name):
        # it is also the folder of the launch under --storage: `../x` would write outside it
        raise ValueError(f"--experiment-name={opts.experiment_name!r}: {NAME_RULE}{name_fault(opts.experiment_name)}")
    if opts.register_model is not None:
        if opts.smoke:
            raise ValueError(f"--register-model {opts.register_model!r} with --smoke: smoke trials log no model "
                             "(grid and refit trials do); leave out one of the two")
        from orchestration.launch.register import check_model_name

        check_model_name(opts.register_model)


# What Ray Tune's storage (pyarrow's file systems) takes besides a local folder.
STORAGE_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "abfs", "abfss")


def resolve_storage(storage: str | None, project_dir: Path) -> str:
    """Ray Tune's storage: default ``<project>/ray_results``; relative paths made absolute (trials run elsewhere);
    URIs (``s3://``, ``gs://``, ``file://``) passed through — a multi-node cluster needs shared storage."""
    if storage is None:
        return str(Path(project_dir).resolve() / "ray_results")
    if "://" in storage:
        scheme = storage.split("://", 1)[0].lower()
        if scheme not in STORAGE_SCHEMES:
            raise ValueError(f"--storage {storage!r}: unknown scheme {scheme!r}; give a folder or a "
                             f"{', '.join(f'{s}://' for s in STORAGE_SCHEMES)} URI that every node reaches")
        return storage
    p = Path(storage)
    p = p if p.is_absolute() else (Path(project_dir) / p).resolve()
    existing = next(a for a in (p, *p.parents) if a.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        why = "a file" if not existing.is_dir() else "not writable"
        what = "is a file" if existing == p else f"cannot be created ({existing} is {why})"
        raise ValueError(f"--storage {storage!r}: {what}; give a folder Ray Tune can write its state to")
    return str(p)


def command_line(opts: SweepOptions, uri: str, storage: str, *, resume: bool | str) -> str:
    """The exact command that repeats (``resume=True``: resumes) this launch. ``--notify`` is left out: a webhook
    URL is a secret (Slack's carries its token), and this command is printed and logged to the parent run."""
    parts = ["python", "-m", "orchestration.sweep", str(Path(opts.spec_path)), "--tracking-uri", uri,
             "--storage", storage]
    for item in opts.overrides:  # the same spec hash: --resume finds this launch
        parts += ["--set", item]
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
    if opts.no_reuse:
        parts.append("--no-reuse")
    if opts.reuse != C.REUSE_ANY:
        parts += ["--reuse", opts.reuse]
    if opts.register_model is not None:  # the resume registers what this launch did not get to
        parts += ["--register-model", opts.register_model]
    if resume:
        parts += ["--resume", "auto"] if resume == "auto" else ["--resume"]
    return " ".join(shlex.quote(p) for p in parts)


def select(plan: SweepPlan, store: Store | MlflowClient, experiment_id: str | None = None,
           force: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Grid keys and phases to run (search phases, then ``refit``), and what is skipped as already FINISHED with
    the same config. Refit trials are known only once every search is done; until then the refit phase is kept.
    (``experiment_id``: only with a client for ``store``, see :func:`orchestration.store.store.as_store`.)"""
    store = as_store(store, experiment_id)
    refit = [REFIT_PHASE] if plan.refits else []
    if force or plan.smoke:  # smoke runs check the machinery: they always run
        return [t.key for t in plan.grid], [s.phase for s in plan.searches] + refit, []
    done = store.finished_grid_hashes()
    grid, skipped = [], []
    for t in plan.grid:
        (skipped if t.hashes & done.get(t.key, set()) else grid).append(t.key)
    phases = []
    for s in plan.searches:
        n_done = len(store.finished_search_runs(s.search_hash))
        if n_done >= s.n_trials:
            skipped.append(f"search {s.key} ({n_done} trials)")
        else:
            phases.append(s.phase)
    if refit and not phases:
        trials, _ = refit_trials(plan, best_by_cell(plan, store))
        todo, finished = pending_refits(trials, store, force=False)
        skipped += finished
        refit = refit if todo else []
    return grid, phases + refit, skipped


def reusable(plan: SweepPlan, store: Store, grid_keys: Iterable[str],
             accept: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    """Grid key (of ``grid_keys``: trials this experiment has not FINISHED) → a FINISHED run of one of its config
    hashes (:attr:`GridTrial.hashes`) anywhere in the store, under any sweep or experiment: trained already, so
    reused instead of trained twice (issue 24). Smoke trials check the machinery and are never reused. ``accept``:
    only runs it accepts (:meth:`Store.finished_runs_by_hash`)."""
    if plan.smoke:
        return {}
    keys = set(grid_keys)
    todo = [t for t in plan.grid if t.key in keys]
    found = store.finished_runs_by_hash({h for t in todo for h in t.hashes}, accept)
    out = {}
    for t in todo:
        hit = next((found[h] for h in sorted(t.hashes) if h in found), None)
        if hit is not None:
            out[t.key] = hit
    return out


def reused_label(key: str, run: Any) -> str:
    return f"{key} (reused: FINISHED run {run.info.run_id} of the same config)"


def _commit(run: Any) -> str:
    return run.data.tags.get(C.GIT_COMMIT, "")


def link_reusable(plan: SweepPlan, store: Store, grid_keys: list[str], *, commit: str = "",
                  reuse: str = C.REUSE_ANY, say: Callable[[str], None] = lambda line: None
                  ) -> tuple[list[str], list[str]]:
    """(the grid keys still to train, labels of the reused ones): every trial with a FINISHED run of its config
    elsewhere in the store gets a link run in the store's experiment (:func:`tracking.link_reused`), which the
    summary, the status and the report read as that trial's run, labelled reused. Sources trained by other code
    than ``commit`` are said in one line (``say``); ``reuse`` :data:`C.REUSE_SAME_COMMIT` trains them instead
    (:func:`orchestration.contract.same_code`). A SIGINT or SIGTERM is held while one link is written (created
    and ended: never left RUNNING) and then raises :class:`interrupts.LinkingInterrupted`, counting the links."""
    if line := plugin_code_line(plan, store, grid_keys):
        say(line)
    found = reusable(plan, store, grid_keys)
    if reuse == C.REUSE_SAME_COMMIT:
        same = reusable(plan, store, grid_keys, accept=lambda r: C.same_code(_commit(r), commit))
        other, found = [r for k, r in found.items() if k not in same], same
    else:
        other = list(found.values())
    line = C.code_version_line(map(_commit, other), commit, refused=reuse == C.REUSE_SAME_COMMIT)
    if line:
        say(line)
    trials, linked = {t.key: t for t in plan.grid}, []
    try:
        with interrupts.held_signals() as held:
            for key, run in found.items():
                if held:
                    break
                t = trials[key]
                tracking.link_reused(store, kind=t.kind, cell_levels=t.cell.levels, cell_id=t.cell.id,
                                     fold=t.fold, source=run)
                linked.append(key)
    except KeyboardInterrupt:
        raise interrupts.LinkingInterrupted(len(linked), len(found)) from None
    return [k for k in grid_keys if k not in found], [reused_label(k, r) for k, r in found.items()]


def plugin_code_line(plan: SweepPlan, store: Store, grid_keys: Iterable[str]) -> str:
    """One line for the trials of ``grid_keys`` (to be trained) whose FINISHED run in this experiment was trained
    by other plugin code (:data:`C.PLUGIN_CODE`; the plugin's digest is in the config hash, so that run is not
    this trial's): how many, and each plugin's digest then and now. '' when there are none."""
    from mutexmatch.plugins import config_plugin_digests

    keys = set(grid_keys)
    now = {t.key: C.plugin_code_value(config_plugin_digests(t.config)) for t in plan.grid if t.key in keys}
    changed: dict[tuple[str, str], set[str]] = {}
    for run in store.finished_trials(C.KIND_GRID) if any(now.values()) else ():
        tags = run.data.tags
        key, then = C.trial_key(tags.get(C.CELL), tags.get(C.FOLD)), tags.get(C.PLUGIN_CODE)
        if now.get(key) and then and then != now[key]:
            changed.setdefault((then, now[key]), set()).add(key)
    if not changed:
        return ""
    what = "; ".join(f"{then} → {new}" for then, new in sorted(changed))
    n = len(set().union(*changed.values()))
    return (f"{n} trial(s) trained again: their FINISHED runs were trained by other plugin code ({what}); a run is "
            "reused only by the plugin code that trained it")


def save_launch_plan(client: MlflowClient, run_id: str, data: dict[str, Any]) -> None:
    client.log_text(run_id, json.dumps(data, indent=2), C.LAUNCH_PLAN_ARTIFACT)


def record_expected_runs(client: MlflowClient, run_id: str, plan: SweepPlan, refits: Iterable[GridTrial] = ()) -> None:
    """File on parent run ``run_id`` the runs ``plan`` counts (:func:`orchestration.spec.plan.expected_runs`, refit
    trials ``refits`` included) under the plan's settings digest, where ``reports.build`` finds them: the report cannot
    compute config hashes (it never imports the trainer), so the sweep that can writes them down. A smoke launch
    records nothing (the report reads grid runs)."""
    if plan.smoke or not plan.settings_digest:
        return
    client.log_text(run_id, json.dumps(expected_runs(plan, refits), indent=1, sort_keys=True),
                    C.expected_runs_artifact(plan.settings_digest))
    client.set_tag(run_id, C.SETTINGS_TAG + plan.settings_digest, "true")


def record_without_launch(store: Store, plan: SweepPlan) -> bool:
    """A relaunch with nothing to do opens no parent run; its settings' expected runs go to the newest parent run of
    the experiment (whose trials they are), so a report of exactly these settings finds them. False: the experiment
    has no parent run (every trial was reused from other experiments), the caller opens one."""
    for run in store.sweeps(order_by=NEWEST_FIRST):
        refits = refit_trials(plan, best_by_cell(plan, store))[0] if plan.refits else {}
        record_expected_runs(store.client, run.info.run_id, plan, refits.values())
        return True
    return False


AUTO_OTHER_SETTINGS = ("--resume auto continues only a launch of these settings (the YAML's spec hash after --set, "
                       "--storage, --smoke): a launch of other settings is left as it is, and without one of these "
                       "settings a new launch starts, which skips every trial FINISHED with the same config")


def resume_or_start(store: Store, plan: SweepPlan, storage: str) -> tuple[Any, str]:
    """``--resume auto``: (the newest launch of these settings (:meth:`Store.resumable_parent`) or None, the line
    that says what happens). It is continued unless it FINISHED; a FINISHED one, or none, means a new launch, whose
    selection skips every trial FINISHED already (after a FINISHED launch: nothing to do; a smoke launch, which
    always trains, is not started again). When the newest launch of the experiment has other settings,
    :data:`AUTO_OTHER_SETTINGS` is what happens."""
    found = store.resumable_parent(spec_hash=plan.spec_hash, storage=storage, smoke=plan.smoke)
    newest = next(iter(store.sweeps(order_by=NEWEST_FIRST)), None)
    other = ""
    if newest is not None and (found is None or newest.info.run_id != found.info.run_id):
        t = newest.data.tags
        other = (f"; the newest launch, {t.get(C.LAUNCH_ID)}, has other settings (spec hash "
                 f"{t.get(C.SPEC_HASH)}, storage {t.get(C.STORAGE)}, smoke {t.get(C.SMOKE)}): {AUTO_OTHER_SETTINGS}")
    if found is None:
        return None, f"no earlier launch of these settings: starting one{other}"
    launch_id = found.data.tags.get(C.LAUNCH_ID)
    if found.info.status == "FINISHED":
        return found, f"launch {launch_id} of these settings FINISHED: nothing of it is trained again{other}"
    return found, f"continuing launch {launch_id} (it ended {found.info.status}){other}"


def load_launch_plan(client: MlflowClient, run_id: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(run_id, C.LAUNCH_PLAN_ARTIFACT, tmp)
        return json.loads(Path(path).read_text())


def resumed_selection(store: Store, plan: SweepPlan, parent: Any,
                      say: Callable[[str], None]) -> tuple[list[str], list[str], list[str]]:
    """(grid keys, phases, skipped) of the launch being resumed, whose parent run is ``parent``: its saved plan
    (:data:`~orchestration.contract.LAUNCH_PLAN_ARTIFACT`). When that artifact is lost (the parent run's artifacts
    deleted, or the file unreadable: fresh finding #5), the trials are chosen again as :func:`select` chooses them
    (every trial of the YAML not FINISHED in the store; the launch's own trial runs are found by their trial ids),
    said through ``say`` in one line, and the plan saved again for the next resume."""
    from mlflow.exceptions import MlflowException

    run_id = parent.info.run_id
    try:
        saved = load_launch_plan(store.client, run_id)
        return list(saved["grid"]), list(saved["phases"]), list(saved["skipped"])
    except (MlflowException, OSError) as e:
        how = f"is missing ({type(e).__name__})"
    except (ValueError, KeyError, TypeError) as e:
        how = f"is unreadable ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    grid, phases, skipped = select(plan, store)
    say(f"--resume: launch {parent.data.tags.get(C.LAUNCH_ID)}'s {C.LAUNCH_PLAN_ARTIFACT} {how} in its parent run "
        f"{run_id} ({parent.info.artifact_uri}); its trials are chosen again from the YAML and the store's runs: "
        f"{len(grid)} grid trial(s) and {len(phases)} phase(s) not FINISHED, {len(skipped)} FINISHED")
    save_launch_plan(store.client, run_id, {"grid": grid, "phases": phases, "skipped": skipped})
    return grid, phases, skipped
