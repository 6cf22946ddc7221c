"""Where a sweep stands, read from MLflow only (no Ray): works from any machine that reaches the tracking server.

    python -m orchestration.status [experiments/X.yaml] [--tracking-uri URI] [--set KEY=VALUE ...] [--watch SECONDS]

Without a YAML: the store's one sweep, as its newest launch recorded it (the YAML's path and ``--set`` items, else
the ``spec.yaml`` it logged); a store with none or several says so and asks for the YAML.

Per cell × fold: FINISHED (final and best test accuracy), RUNNING (step / total, last evaluation, ETA from the
run's own seconds per step between its last logged evaluations), PENDING (in the plan, no run yet), FAILED (the
last line of its error), KILLED; per search study its trials; totals; accelerator-hours spent (the wall time of
every run of the plan × the trial's share of a GPU, or its CPUs) and to go (running trials' ETA, pending trials at
the seconds per step measured on the same cell, else on the sweep); the launches covered. A trial is the plan's
trial only with the same cell, fold and config hash, exactly what a relaunch skips.

The driver writes the same text to its parent run (artifact ``status.md``) and logs ``trials/<state>`` metrics,
refreshed by :class:`StatusReporter`, so the MLflow UI shows progress too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from mutexmatch.cli import add_version, answer_early, entry_point
from mutexmatch.training import format_duration
from orchestration.runtime.env import apply_closed_network_env


# The command line, defined before the imports below: --help, --version and a usage error answer without them.
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestration.status", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", type=Path, nargs="?",
                   help="sweep YAML (experiments/<name>.yaml); default: the one sweep the store holds, with the YAML "
                        "and --set items its newest launch recorded")
    p.add_argument("--tracking-uri", help="MLflow tracking URI or *.db path (default: $MLFLOW_TRACKING_URI, else "
                                          "sqlite:///<cwd>/mlflow.db, as the sweep)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="the --set overrides the sweep was launched with")
    p.add_argument("--experiment-name", help="MLflow experiment name (default: the YAML's name)")
    p.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted")
    p.add_argument("--count", type=int, help="with --watch: stop after this many refreshes")
    return add_version(p)


if __name__ == "__main__":
    answer_early(_parser().parse_args)  # before MLflow, pandas and torch load


apply_closed_network_env()

from orchestration import contract as C  # noqa: E402
from orchestration.trial import tracking  # noqa: E402
from orchestration.spec.plan import SweepPlan  # noqa: E402
from orchestration.launch.summary import format_hours, refit_expected  # noqa: E402
from orchestration.contract.filters import NEWEST_FIRST, tag_equals  # noqa: E402
from orchestration.store.store import Store  # noqa: E402
from orchestration.store import mlflow_ui  # noqa: E402

__all__ = ["TrialState", "SweepStatus", "collect", "format_status", "status_metrics", "StatusReporter", "main",
           "format_duration", "format_hours"]

STATES = ("FINISHED", "RUNNING", "PENDING", "FAILED", "KILLED")
REFRESH_S = 120.0  # the driver's refresh period of the parent run's status


@dataclass
class TrialState:
    cell: str
    fold: str
    kind: str
    state: str
    total: int                         # iterations
    step: int | None = None
    final: float | None = None         # test accuracy, last evaluation
    best: float | None = None
    s_per_step: float | None = None    # measured by the run (wall seconds between evaluations / steps)
    eta_s: float | None = None
    detail: str = ""
    count: dict[str, int] = field(default_factory=dict)  # a search study: trials per state


@dataclass
class SweepStatus:
    name: str
    unit: str                          # "GPU" or "CPU"
    share: float                       # accelerators one trial holds
    trials: list[TrialState]
    launches: list[str]
    spent_s: float                     # wall seconds of the plan's runs (all attempts, all launches)
    to_go_s: float | None              # None: nothing measured yet
    unknown_to_go: int = 0
    ignored: list[str] = field(default_factory=list)  # FINISHED trial runs of other settings (contract.other_settings_label)
    lost: list[str] = field(default_factory=list)     # reused trials whose source is gone (contract.lost_source_line)
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for t in self.trials:
            for state, n in (t.count or {t.state: 1}).items():
                out[state] += n
        return out


def _duration_s(run: Any, now: float) -> float:
    end = run.info.end_time / 1000 if run.info.end_time else now
    return max(0.0, end - run.info.start_time / 1000)


def _progress(client: Any, run: Any) -> tuple[int | None, float | None, float | None]:
    """(last logged step, seconds per step, time of that evaluation) from the run's evaluation history."""
    hist = sorted(client.get_metric_history(run.info.run_id, C.TRAIN_LOSS), key=lambda m: m.step)
    if not hist:
        return None, None, None
    last = hist[-1]
    prev_step, prev_ts = (hist[-2].step, hist[-2].timestamp) if len(hist) > 1 else (0, run.info.start_time)
    rate = (last.timestamp - prev_ts) / 1000 / (last.step - prev_step) if last.step > prev_step else None
    return last.step, rate, last.timestamp / 1000


def _pick(runs: list[Any]) -> Any:
    """The run that speaks for a trial: a FINISHED one, else a RUNNING one, else the newest."""
    for status in ("FINISHED", "RUNNING"):
        found = [r for r in runs if r.info.status == status]
        if found:
            return max(found, key=lambda r: r.info.start_time)
    return max(runs, key=lambda r: r.info.start_time)


def _trial_state(store: Store | None, cell: str, fold: str, kind: str, total: int, runs: list[Any],
                 now: float) -> TrialState:
    if not runs:
        return TrialState(cell, fold, kind, "PENDING", total)
    assert store is not None  # runs come from a store
    run = _pick(runs)
    results = store.results_run(run)  # a reused trial's results are the run it links to
    m, status = results.data.metrics, run.info.status
    st = TrialState(cell, fold, kind, status if status in STATES else "RUNNING", total,
                    final=m.get(C.TEST_ACC), best=m.get(C.TEST_BEST_ACC))
    if status == "FINISHED":
        st.step, st.s_per_step = total, _duration_s(results, now) / max(total, 1)
        if results is not run:
            st.detail = (f"reused: run {results.info.run_id} of experiment "
                         f"{run.data.tags.get(C.REUSED_FROM_EXPERIMENT, '?')!r}")
    elif status == "RUNNING":
        st.step, st.s_per_step, last_ts = _progress(store.client, run)
        if st.step and st.s_per_step:
            st.eta_s = max(0.0, (total - st.step) * st.s_per_step - max(0.0, now - (last_ts or now)))
    elif status == "FAILED":
        error = run.data.tags.get(C.ERROR, "").strip().splitlines()
        st.detail = error[-1] if error else "no error recorded (its worker died?)"
    elif status == "KILLED":
        st.detail = run.data.tags.get(C.ENDED_BY, "interrupted")
    return st


def _study_state(study: Any, runs: list[Any], now: float) -> TrialState:
    """One search study: its trials per state (Optuna replaces a failed trial, so failures are counted apart)."""
    n = {s: sum(1 for r in runs if r.info.status == s) for s in STATES if s != "PENDING"}
    done = min(n["FINISHED"], study.n_trials)
    count = {"FINISHED": done, "RUNNING": n["RUNNING"], "FAILED": n["FAILED"], "KILLED": n["KILLED"],
             "PENDING": max(0, study.n_trials - done - n["RUNNING"])}
    state = "FINISHED" if done >= study.n_trials else "RUNNING" if n["RUNNING"] else "PENDING"
    full = [r for r in runs if r.info.status == "FINISHED" and r.data.tags.get(C.EARLY_STOPPED) != "true"]
    rate = sum(_duration_s(r, now) for r in full) / (len(full) * study.iterations) if full else None
    detail = ", ".join(f"{v} {k.lower()}" for k, v in count.items() if v)
    return TrialState(study.cell.id, str(study.fold), f"search ×{study.n_trials}", state, study.iterations,
                      s_per_step=rate, detail=detail, count=count)


def _to_go(trials: list[TrialState]) -> tuple[float | None, int]:
    """Seconds of trial time left, and how many trials have no rate to estimate theirs with. A FAILED or KILLED
    trial counts in full: a relaunch runs it again."""
    by_cell: dict[str, list[float]] = {}
    for t in trials:
        if t.s_per_step:
            by_cell.setdefault(t.cell, []).append(t.s_per_step)
    every = [r for rates in by_cell.values() for r in rates]
    left, unknown, measured, needed = 0.0, 0, False, False
    for t in trials:
        rates = by_cell.get(t.cell) or every
        rate = t.s_per_step or (sum(rates) / len(rates) if rates else None)
        if t.count:  # a search study
            todo = t.count["PENDING"] + t.count["RUNNING"]
            steps = todo * t.total
        elif t.state == "FINISHED":
            continue
        elif t.state == "RUNNING" and t.eta_s is not None:
            left, measured = left + t.eta_s, True
            continue
        else:
            todo, steps = 1, t.total - (t.step or 0)
        if not todo:
            continue
        needed = True
        if rate is None:
            unknown += todo
        else:
            left, measured = left + steps * rate, True
    return (left if measured or not needed else None), unknown


def _launches(store: Store, plan: SweepPlan) -> list[str]:
    out = []
    for run in store.spec_launches(plan.spec_hash):
        started = datetime.fromtimestamp(run.info.start_time / 1000, timezone.utc)
        out.append(f"{run.data.tags.get(C.LAUNCH_ID, run.info.run_id)} ({run.info.status}, started "
                   f"{started:%Y-%m-%d %H:%M} UTC)")
    return out


def _group_runs(runs: list[Any], plan: SweepPlan) -> dict[tuple, list[Any]]:
    """Trial runs by what they are: (kind, cell, fold, config hash) for grid/smoke and refit (a refit's hash
    follows the search's best parameters), (search, hash) for a search trial."""
    grid_kind = C.KIND_SMOKE if plan.smoke else C.KIND_GRID
    groups: dict[tuple, list[Any]] = {}
    for run in runs:
        tg = run.data.tags
        kind = tg.get(C.KIND)
        if kind in (grid_kind, C.KIND_REFIT):
            key: tuple = (kind, tg.get(C.CELL), tg.get(C.FOLD), tg.get(C.CONFIG_HASH))
        elif kind == C.KIND_SEARCH:
            key = (kind, tg.get(C.SEARCH_HASH))
        else:
            continue
        groups.setdefault(key, []).append(run)
    return groups


def collect(store: Store | None, plan: SweepPlan, now: float | None = None) -> SweepStatus:
    """The status of every trial of ``plan`` in the store's experiment (None: not created yet)."""
    now = time.time() if now is None else now
    runs = list(store.runs(tag_equals(C.ROLE, C.ROLE_TRIAL))) if store else []
    lost = store.lost_sources(runs) if store else {}  # such a link stands for nothing: its trial is to train
    groups = _group_runs([r for r in runs if r.info.run_id not in lost], plan)
    trials, used = [], []
    for t in plan.grid:
        found = [r for h in sorted(t.hashes) for r in groups.get((t.kind, t.cell.id, str(t.fold), h), [])]
        used += found
        trials.append(_trial_state(store, t.cell.id, str(t.fold), t.kind, t.iterations, found, now))
    for s in plan.searches:
        found = groups.get((C.KIND_SEARCH, s.search_hash), [])
        used += found
        trials.append(_study_state(s, found, now))
    refits = refit_expected(store, plan) if store else {}
    for r in plan.refits:
        hashes = sorted(refits[r.key].hashes) if r.key in refits else []
        found = [run for h in hashes for run in groups.get((C.KIND_REFIT, r.tuned_cell.id, str(r.fold), h), [])]
        used += found
        trials.append(_trial_state(store, r.tuned_cell.id, str(r.fold), C.KIND_REFIT, r.iterations, found, now))
    res = plan.spec.resources
    to_go, unknown = _to_go(trials)
    return SweepStatus(plan.spec.name, "GPU" if res.gpu > 0 else "CPU",
                       (res.gpu if res.gpu > 0 else res.cpu) * res.workers,  # a trial's devices, all its workers
                       trials, _launches(store, plan) if store else [],
                       sum(_duration_s(r, now) for r in used), to_go, unknown,
                       _ignored([r for r in runs if r.info.run_id not in lost], used, plan),
                       store.lost_lines(runs, lost) if store else [])


def _ignored(runs: list[Any], used: list[Any], plan: SweepPlan) -> list[str]:
    """FINISHED grid and refit runs that are no trial of ``plan`` (another config hash for their cell and fold)."""
    kinds = (C.KIND_SMOKE if plan.smoke else C.KIND_GRID, C.KIND_REFIT)
    ids = {r.info.run_id for r in used}
    return [C.other_settings_label(r.data.tags.get(C.CELL, "?"), r.data.tags.get(C.FOLD, "?"),
                                   r.data.tags.get(C.CONFIG_HASH, ""))
            for r in runs if r.info.status == "FINISHED" and r.data.tags.get(C.KIND) in kinds
            and r.info.run_id not in ids]


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{C.percent(v):.2f}"


def _row(t: TrialState) -> tuple[str, ...]:
    step = "" if t.step is None else f"{t.step}/{t.total}"
    if t.state == "RUNNING" and not t.count:
        rate = f"{t.s_per_step:.3g} s/step" if t.s_per_step else "no evaluation yet"
        detail = f"ETA {format_duration(t.eta_s)} ({rate})" if t.eta_s is not None else rate
    else:
        detail = t.detail
    return (t.cell, t.fold, t.kind, t.state, step, f"{_pct(t.final)} / {_pct(t.best)}", detail.replace("|", "/"))


def format_status(st: SweepStatus) -> str:
    """The status as Markdown (a table per trial, totals, hours, launches): the console and the artifact."""
    head = ("cell", "fold", "kind", "state", "step", "test acc % (last / best)", "ETA / error")
    lines = [f"# sweep {st.name}: status at {st.at:%Y-%m-%d %H:%M:%S} UTC", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_row(t)) + " |" for t in st.trials]
    counts = st.counts()
    to_go = "unknown (nothing measured yet)" if st.to_go_s is None else "0" if st.to_go_s == 0 else \
        f"≈ {format_hours(st.to_go_s * st.share / 3600)}" + (f" (+{st.unknown_to_go} trial(s) not estimated)"
                                                    if st.unknown_to_go else "")
    lines += ["", "**totals:** " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" ({sum(counts.values())} "
              "trials)",
              f"**{st.unit}-hours:** {format_hours(st.spent_s * st.share / 3600)} spent, {to_go} to go "
              f"({st.share:g} {st.unit} per trial; to go: running trials' ETA, the rest at the measured s/step)",
              "**launches:** " + ("; ".join(st.launches) if st.launches else "none yet")]
    if st.ignored:
        lines.append(f"**{C.other_settings_line(st.ignored)}**")
    if st.lost:
        lines += ["", f"**reused trials whose source run is gone ({len(st.lost)}):**"]
        lines += [f"- {line}" for line in st.lost]
    return "\n".join(lines)


def status_metrics(st: SweepStatus) -> dict[str, float]:
    """``trials/<state>`` counts and ``trials/<unit>_hours_spent`` for the parent run."""
    out = {f"{C.TRIALS_METRIC}{state.lower()}": float(n) for state, n in st.counts().items()}
    out[f"{C.TRIALS_METRIC}{st.unit.lower()}_hours_spent"] = st.spent_s * st.share / 3600
    return out


class StatusReporter:
    """A daemon thread of the sweep driver: every ``interval_s`` the status goes to the parent run (artifact
    ``status.md``, metrics ``trials/*``); :meth:`stop` writes the last one. A failed refresh is reported once and
    never stops the sweep."""

    def __init__(self, plan: SweepPlan, uri: str, experiment_id: str, parent_run_id: str,
                 interval_s: float = REFRESH_S) -> None:
        self.plan, self.uri, self.experiment_id, self.parent_run_id = plan, uri, experiment_id, parent_run_id
        self.interval_s, self.refreshes, self._warned = interval_s, 0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweep-status", daemon=True)

    def start(self) -> "StatusReporter":
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.refresh()
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def refresh(self) -> None:
        try:
            store = Store.at(self.uri, self.experiment_id)
            st, client = collect(store, self.plan), store.client
            client.log_text(self.parent_run_id, format_status(st), C.STATUS_ARTIFACT)
            tracking.log_metrics(client, self.parent_run_id, status_metrics(st), self.refreshes)
            self.refreshes += 1
        except Exception as e:  # noqa: BLE001 - progress reporting must never fail the sweep
            if not self._warned:
                print(f"[sweep] warning: could not write the status to the parent run: {type(e).__name__}: {e}",
                      flush=True)
                self._warned = True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.refresh()


# ------------------------------------------------------------------------------------------------ CLI
def _show(store: Store | None, plan: SweepPlan, clear: bool, uri: str = "") -> None:
    text = format_status(collect(store, plan))
    if store is not None and uri:  # the runs the report counts, by cell (orchestration.store.mlflow_ui)
        text += f"\n\n**MLflow UI:** {mlflow_ui.ui_hint(uri, store.experiment_id, plan.settings_digest)}"
    print(("\033[2J\033[H" if clear else "") + text, flush=True)


def _the_sweep(client: Any, uri: str, workdir: Path) -> tuple[Path, list[str], str]:
    """Without a YAML: the store's one sweep as its newest launch recorded it: the YAML (its path, else the copy the
    launch logged, fetched into ``workdir``), its ``--set`` items and the experiment's name. ``ValueError`` saying
    what the store holds when it holds no sweep or several."""
    found = []
    with C.bounded_http(uri, "--tracking-uri"):
        for exp in client.search_experiments():                      # active ones only
            launch = next(Store(client, exp.experiment_id).sweeps(order_by=NEWEST_FIRST), None)
            if launch is not None:
                found.append((exp.name, launch))
        if len(found) != 1:
            held = "no sweep" if not found else f"{len(found)} sweeps ({', '.join(n for n, _ in found)})"
            raise ValueError(f"{uri} holds {held}: name the sweep YAML, e.g. python -m orchestration.status "
                             "experiments/<name>.yaml")
        name, launch = found[0]
        tags = launch.data.tags
        path = Path(tags.get(C.SPEC_PATH, ""))
        if not path.is_file():
            path = Path(client.download_artifacts(launch.info.run_id, C.SPEC_ARTIFACT, str(workdir)))
    return path, json.loads(tags.get(C.OVERRIDES) or "[]"), name


@entry_point("python -m orchestration.status")
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for bad, message in ((args.watch is not None and args.watch <= 0, f"--watch={args.watch}: must be > 0 seconds"),
                         (args.count is not None and args.count < 1, f"--count={args.count}: must be >= 1")):
        if bad:
            print(f"error: {message}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="mutexmatch-status-") as workdir:
        return _status(args, Path(workdir))


def _status(args: argparse.Namespace, workdir: Path) -> int:
    from orchestration.spec.overrides import load_sweep, plan_sweep
    from orchestration.spec.models import SpecError

    try:
        if args.spec is None:
            uri = tracking.resolve_tracking_uri(args.tracking_uri, Path.cwd(), create=False)
            args.spec, recorded, name = _the_sweep(tracking.MlflowClient(uri), uri, workdir)
            args.overrides, args.experiment_name = args.overrides or recorded, args.experiment_name or name
            print(f"[status] the store's one sweep: experiment {name!r}, {args.spec}"
                  + "".join(f" --set {item}" for item in args.overrides), flush=True)
        loaded = load_sweep(args.spec, Path.cwd(), args.overrides, need_data=False)
        plan = plan_sweep(loaded, Path.cwd())
        uri = tracking.resolve_tracking_uri(args.tracking_uri, Path.cwd(), create=False)  # read-only: never makes one
    except (SpecError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    client = tracking.MlflowClient(uri)
    try:
        with C.bounded_http(uri, "--tracking-uri"):
            exp = client.get_experiment_by_name(args.experiment_name or loaded.spec.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if exp is not None and exp.lifecycle_stage == "deleted":
        print(f"error: {C.deleted_experiment(exp.name, exp.experiment_id, uri)}", file=sys.stderr)
        return 2
    store = Store(client, exp.experiment_id) if exp is not None else None
    shown = 0
    try:
        while True:
            _show(store, plan, clear=args.watch is not None and sys.stdout.isatty(), uri=uri)
            shown += 1
            if args.watch is None or (args.count is not None and shown >= args.count):
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
