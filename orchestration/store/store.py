"""One experiment of an MLflow store, as the sweep, its status and its summary query it.

Every MLflow search the orchestration makes is a method here, its filter built from the contract's tag names
(:mod:`orchestration.contract.filters`); the rest of the package passes a :class:`Store` instead of a client and an
experiment id. Writing a trial's run (:class:`orchestration.trial.tracking.TrialRun`) and creating the launch's parent
run stay in :mod:`orchestration.trial.tracking`.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from orchestration import contract as C
from orchestration.contract.filters import (NEWEST_FIRST, OLDEST_FIRST, all_of, children_filter, status_is,
                                            status_is_not, sweeps_filter, tag_equals, trials_filter)
from orchestration.runtime.env import apply_closed_network_env
from orchestration.runtime.processes import running

apply_closed_network_env()

from mlflow import MlflowClient  # noqa: E402  (telemetry must be off before mlflow is imported)
from mlflow.entities import Run, ViewType  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

__all__ = ["Store", "as_store", "end_run"]

_PAGE = 1000
_EXPERIMENTS_PER_SEARCH = 100  # MLflow searches at most 100 experiments at once


def end_run(client: MlflowClient, run_id: str, status: str) -> None:
    client.set_terminated(run_id, status, end_time=int(time.time() * 1000))


def _driver_alive(tags: dict[str, str]) -> bool:
    """Whether a parent run's driver (its recorded pid and start time, on this host) still runs."""
    pid = tags.get(C.DRIVER_PID, "")
    return pid.isdigit() and int(pid) != os.getpid() and running(int(pid), tags.get(C.DRIVER_START, ""))


@dataclass(frozen=True)
class Store:
    """The experiment ``experiment_id`` of the store ``client`` talks to."""

    client: MlflowClient
    experiment_id: str

    @classmethod
    def at(cls, tracking_uri: str, experiment_id: str) -> "Store":
        return cls(MlflowClient(tracking_uri), experiment_id)

    # ---------------------------------------------------------------------------------------------- searching
    def runs(self, *clauses: str, order_by: Iterable[str] = ()) -> Iterator[Run]:
        """Every active run of the experiment matching all ``clauses``, page by page."""
        token, flt, order = None, all_of(*clauses), list(order_by) or None
        while True:
            page = self.client.search_runs([self.experiment_id], flt, ViewType.ACTIVE_ONLY, max_results=_PAGE,
                                           order_by=order, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    def deleted_children(self, parent_run_id: str) -> list[Run]:
        """The runs of one launch in MLflow's trash (deleted while or after the launch ran)."""
        return self.client.search_runs([self.experiment_id], children_filter(parent_run_id), ViewType.DELETED_ONLY,
                                       max_results=_PAGE)

    def sweeps(self, *clauses: str, order_by: Iterable[str] = ()) -> Iterator[Run]:
        """The launches' parent runs matching ``clauses``."""
        return self.runs(sweeps_filter(), *clauses, order_by=order_by)

    def children(self, parent_run_id: str, *clauses: str) -> Iterator[Run]:
        """The runs of one launch matching ``clauses``."""
        return self.runs(children_filter(parent_run_id), *clauses)

    def finished_trials(self, kind: str, *clauses: str, order_by: Iterable[str] = ()) -> Iterator[Run]:
        """FINISHED trial runs of ``kind`` matching ``clauses``."""
        return self.runs(trials_filter(kind), *clauses, status_is("FINISHED"), order_by=order_by)

    def resumable_parent(self, *, spec_hash: str, storage: str, smoke: bool) -> Run | None:
        """The newest launch of this spec (same hash, storage and smoke flag) — what ``--resume`` continues."""
        for run in self.sweeps(tag_equals(C.SPEC_HASH, spec_hash), tag_equals(C.SMOKE, str(smoke).lower()),
                               order_by=NEWEST_FIRST):
            if run.data.tags.get(C.STORAGE) == storage:
                return run
        return None

    def spec_launches(self, spec_hash: str) -> Iterator[Run]:
        """Every launch of the spec with ``spec_hash``, oldest first."""
        return self.sweeps(tag_equals(C.SPEC_HASH, spec_hash), order_by=OLDEST_FIRST)

    def trial_run(self, trial_id: str, launch_id: str) -> Run | None:
        """The run of Tune trial ``trial_id`` of launch ``launch_id`` (Tune keeps trial ids across restarts and
        ``Tuner.restore``; the launch id guards against the rare id reused by another launch)."""
        runs = self.runs(tag_equals(C.TRIAL_ID, trial_id), tag_equals(C.LAUNCH_ID, launch_id), order_by=OLDEST_FIRST)
        return next(runs, None)

    def newest_run_of_trial(self, trial_id: str) -> Run | None:
        """The newest run tagged with ``trial_id`` (a single run's id: no launch)."""
        return next(self.runs(tag_equals(C.TRIAL_ID, trial_id), order_by=NEWEST_FIRST), None)

    def finished_grid_hashes(self, kind: str = C.KIND_GRID) -> dict[str, set[str]]:
        """``<cell id>/fold<k>`` → config hashes of FINISHED trial runs of ``kind`` (what a relaunch may skip); a
        link whose source is lost (:meth:`lost_sources`) stands for nothing, so its trial is trained again."""
        done: dict[str, set[str]] = {}
        runs = list(self.finished_trials(kind))
        lost = self.lost_sources(runs)
        for run in runs:
            if run.info.run_id in lost:
                continue
            t = run.data.tags
            done.setdefault(C.trial_key(t.get(C.CELL), t.get(C.FOLD)), set()).add(t.get(C.CONFIG_HASH, ""))
        return done

    def finished_search_runs(self, search_hash: str) -> list[Run]:
        return list(self.finished_trials(C.KIND_SEARCH, tag_equals(C.SEARCH_HASH, search_hash)))

    def finished_runs_by_hash(self, hashes: Iterable[str],
                              accept: Callable[[Run], bool] | None = None) -> dict[str, Run]:
        """Config hash (of ``hashes``) → the newest FINISHED grid or refit run with it in any experiment of the
        store, links to reused runs left out (their source is found itself): what a new sweep reuses instead of
        training. ``accept``: only runs it accepts (``--reuse same-commit``: those of this code)."""
        wanted = set(hashes)
        experiments = [e.experiment_id for e in self.client.search_experiments(ViewType.ACTIVE_ONLY)]
        found: dict[str, Run] = {}
        for kind in (C.KIND_GRID, C.KIND_REFIT):
            flt = all_of(trials_filter(kind), status_is("FINISHED"))
            for i in range(0, len(experiments), _EXPERIMENTS_PER_SEARCH):
                token = None
                while True:
                    page = self.client.search_runs(experiments[i:i + _EXPERIMENTS_PER_SEARCH], flt,
                                                   ViewType.ACTIVE_ONLY, max_results=_PAGE, page_token=token)
                    for run in page:
                        h, tags = run.data.tags.get(C.CONFIG_HASH), run.data.tags
                        if h in wanted and C.REUSED_FROM not in tags and (accept is None or accept(run)) and (
                                h not in found or run.info.start_time > found[h].info.start_time):
                            found[h] = run
                    token = page.token
                    if not token:
                        break
        return found

    def lost_sources(self, runs: Iterable[Run]) -> dict[str, str]:
        """Link run id → why its source holds no results (:func:`orchestration.contract.source_lost`: deleted,
        in a deleted experiment, purged), for each FINISHED link of a reused trial among ``runs`` whose source is
        lost (a link left RUNNING and ended KILLED stands for nothing already)."""
        by_source: dict[str, list[str]] = {}
        for run in runs:
            if run.data.tags.get(C.REUSED_FROM) and run.info.status == "FINISHED":
                by_source.setdefault(run.data.tags[C.REUSED_FROM], []).append(run.info.run_id)
        lost: dict[str, str] = {}
        experiments: dict[str, str] = {}
        for source_id, links in by_source.items():
            try:
                source = self.client.get_run(source_id)
            except MlflowException as e:
                if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                why = C.source_lost(False)
            else:
                exp = source.info.experiment_id
                if exp not in experiments:
                    experiments[exp] = self.client.get_experiment(exp).lifecycle_stage
                why = C.source_lost(True, source.info.lifecycle_stage, experiments[exp])
            if why:
                lost.update(dict.fromkeys(links, why))
        return lost

    def lost_lines(self, runs: Iterable[Run], lost: dict[str, str] | None = None) -> list[str]:
        """One line per reused trial among ``runs`` whose source is lost (:func:`orchestration.contract.lost_source_line`;
        ``lost``: :meth:`lost_sources` of them, when the caller has it)."""
        runs = list(runs)
        lost = self.lost_sources(runs) if lost is None else lost
        return [C.lost_source_line(r.info.run_name, r.data.tags.get(C.REUSED_FROM, ""),
                                   r.data.tags.get(C.REUSED_FROM_EXPERIMENT, ""), lost[r.info.run_id])
                for r in sorted(runs, key=lambda r: r.info.run_name or "") if r.info.run_id in lost]

    def end_stale_links(self, min_age_s: float = 0.0) -> list[Run]:
        """End as KILLED (``mutexmatch.ended_by`` says why) every link run of a reused trial left RUNNING by a
        launch stopped between creating and ending it (issue 33 item 8; no parent run, so
        :meth:`kill_dead_launches` never sees one). A link is RUNNING for milliseconds: with the store's launch lock
        held any RUNNING one is stale (``min_age_s`` 0); a tracking server has no lock file, so there only those
        older than ``min_age_s``."""
        now_ms = time.time() * 1000
        stale = [r for r in self.runs(tag_equals(C.ROLE, C.ROLE_TRIAL), status_is("RUNNING"))
                 if r.data.tags.get(C.REUSED_FROM) and now_ms - (r.info.start_time or 0) >= min_age_s * 1000]
        for run in stale:
            self.client.set_tag(run.info.run_id, C.ENDED_BY, C.STALE_LINK_REASON)
            self.end_run(run.info.run_id, "KILLED")
        return stale

    def results_run(self, run: Run) -> Run:
        """The run holding ``run``'s results: itself, or for a reused trial's link the run it names."""
        source = C.results_run_id(run.info.run_id, run.data.tags)
        return run if source == run.info.run_id else self.client.get_run(source)

    def unfinished_phase_runs(self, parent_run_id: str, phase: str) -> list[Run]:
        """The runs of one Tune phase of a launch that did not finish (a search phase is tagged by name, the grid
        and refit phases by kind)."""
        tag = C.SEARCH_PHASE if phase.startswith("search") else C.KIND
        return list(self.children(parent_run_id, tag_equals(tag, phase), status_is_not("FINISHED")))

    def open_or_stopped_children(self, parent_run_id: str) -> list[Run]:
        """A launch's runs still RUNNING, then those Tune stopped (KILLED, ``mutexmatch.stopped=true``)."""
        return [*self.children(parent_run_id, status_is("RUNNING")),
                *self.children(parent_run_id, status_is("KILLED"), tag_equals(C.STOPPED, "true"))]

    # ---------------------------------------------------------------------------------------------- ending runs
    def end_run(self, run_id: str, status: str) -> None:
        end_run(self.client, run_id, status)

    def end_open_children(self, parent_run_id: str, status: str, keep: set[str] = frozenset()) -> list[Run]:
        """End every RUNNING child of ``parent_run_id`` (except run ids in ``keep``) with ``status``; return them."""
        ended = [r for r in self.children(parent_run_id, status_is("RUNNING")) if r.info.run_id not in keep]
        for run in ended:
            self.client.set_tag(run.info.run_id, C.ENDED_BY, "driver")
            self.end_run(run.info.run_id, status)
        return ended

    def kill_dead_launches(self) -> list[Run]:
        """Parent runs left RUNNING by a driver on this host that no longer exists (SIGKILL, power loss): end them
        and their RUNNING children as KILLED, so the store never shows work as running that is not. Returns the
        parents."""
        host = socket.gethostname()
        dead = []
        for run in self.sweeps(status_is("RUNNING")):
            t = run.data.tags
            pid = t.get(C.DRIVER_PID, "")
            if t.get(C.DRIVER_HOST) != host or not pid.isdigit() or int(pid) == os.getpid() or _driver_alive(t):
                continue
            self.end_open_children(run.info.run_id, "KILLED")
            self.client.set_tag(run.info.run_id, C.ENDED_BY, "next launch (driver process was gone)")
            self.end_run(run.info.run_id, "KILLED")
            dead.append(run)
        return dead

    def live_launches(self) -> tuple[list[Run], list[Run]]:
        """Parent runs of other launches still RUNNING: (those whose driver is alive on this host, those on other
        hosts, whose liveness cannot be seen from here). Call after :meth:`kill_dead_launches`."""
        host, here, elsewhere = socket.gethostname(), [], []
        for run in self.sweeps(status_is("RUNNING")):
            if run.data.tags.get(C.DRIVER_HOST) != host:
                elsewhere.append(run)
            elif _driver_alive(run.data.tags):
                here.append(run)
        return here, elsewhere


def as_store(store: Store | MlflowClient, experiment_id: str | None = None) -> Store:
    """``store``, or the Store of a client and an experiment id as callers passed them before issue 29:
    ``tests/orchestration/test_migration.py`` (pinned, never edited) calls :func:`orchestration.launch.select` and
    :func:`orchestration.refit.best_by_cell` so."""
    if isinstance(store, Store):
        return store
    if experiment_id is None:
        raise TypeError("a Store, or an MlflowClient and an experiment id")
    return Store(store, experiment_id)
