"""The Store (orchestration.store): every MLflow search of the orchestration, with the filters of 460dc25."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from orchestration import contract as C
from orchestration.trial import tracking
from orchestration.contract import filters as F
from orchestration.runtime.processes import start_time
from orchestration.store.store import Store, as_store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module (creating its schema takes seconds)."""
    project = tmp_path_factory.mktemp("store")
    uri = tracking.resolve_tracking_uri(None, project)
    return project, uri, MlflowClient(uri)


def test_the_filters_are_the_strings_the_sweep_always_searched_with():
    # Filter semantics must not change (issue 29): these are the strings 460dc25 built by hand.
    assert F.trials_filter("grid") == "tags.`mutexmatch.role` = 'trial' AND tags.`mutexmatch.kind` = 'grid'"
    assert F.all_of(F.sweeps_filter(), F.tag_equals(C.SPEC_HASH, "h"), F.status_is("RUNNING")) == (
        "tags.`mutexmatch.role` = 'sweep' AND tags.`mutexmatch.spec_hash` = 'h' AND attributes.status = 'RUNNING'")
    assert F.all_of(F.children_filter("p"), F.status_is_not("FINISHED")) == (
        "tags.`mlflow.parentRunId` = 'p' AND attributes.status != 'FINISHED'")
    assert F.all_of("", "a", "") == "a" and F.NEWEST_FIRST == ("attributes.start_time DESC",)


def test_a_client_and_an_experiment_id_still_make_a_store(store):
    _, _, client = store
    assert as_store(client, "7") == Store(client, "7")
    assert as_store(Store(client, "7")) == Store(client, "7")
    with pytest.raises(TypeError, match="experiment id"):
        as_store(client)


def test_runs_of_a_dead_driver_are_killed_and_a_live_one_is_left_alone(store):
    _, uri, client = store
    exp_id = tracking.ensure_experiment(client, "reconcile", uri)
    runs = Store(client, exp_id)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # a pid that existed and has exited
    parents = {}
    for label, pid in (("dead", dead_pid), ("alive", os.getppid())):
        info = tracking.create_parent_run(runs, launch_id=label, spec_path=Path("s.yaml"), spec_text="x",
                                          spec_hash="h", commit="c", storage="st", smoke=False, command="cmd")
        client.set_tag(info.run_id, C.DRIVER_PID, str(pid))
        client.set_tag(info.run_id, C.DRIVER_START, start_time(pid))
        child = client.create_run(exp_id, tags={C.PARENT_RUN_ID: info.run_id, C.ROLE: C.ROLE_TRIAL})
        done = client.create_run(exp_id, tags={C.PARENT_RUN_ID: info.run_id, C.ROLE: C.ROLE_TRIAL})
        runs.end_run(done.info.run_id, "FINISHED")
        parents[label] = (info.run_id, child.info.run_id, done.info.run_id)
    killed = runs.kill_dead_launches()
    assert [r.info.run_id for r in killed] == [parents["dead"][0]]
    status = {label: [client.get_run(r).info.status for r in ids] for label, ids in parents.items()}
    assert status == {"dead": ["KILLED", "KILLED", "FINISHED"], "alive": ["RUNNING", "RUNNING", "FINISHED"]}
    found = runs.resumable_parent(spec_hash="h", storage="st", smoke=False)
    assert found is not None and found.data.tags[C.LAUNCH_ID] == "alive"  # the newest launch
    assert runs.resumable_parent(spec_hash="h", storage="other", smoke=False) is None


def test_a_driver_pid_that_another_process_reuses_is_a_dead_driver(store):
    """make test-cluster's finding (issue 31): the head container restarted, the dead driver's pid belonged to another
    process, and the resubmitted --resume auto was refused as 'launch … is running'. The recorded start time tells
    them apart; a parent run from before the start time was recorded keeps the pid-only rule."""
    _, uri, client = store
    runs = Store(client, tracking.ensure_experiment(client, "reused-pid", uri))
    parents = {}
    for label, started in (("reused", str(int(start_time(os.getppid())) + 1)), ("same", start_time(os.getppid())),
                           ("unrecorded", "")):
        info = tracking.create_parent_run(runs, launch_id=label, spec_path=Path("s.yaml"), spec_text="x",
                                          spec_hash="h", commit="c", storage="st", smoke=False, command="cmd")
        client.set_tag(info.run_id, C.DRIVER_PID, str(os.getppid()))  # alive: the process that runs pytest's
        client.set_tag(info.run_id, C.DRIVER_START, started)
        parents[label] = info.run_id
    here, _ = runs.live_launches()
    assert {r.data.tags[C.LAUNCH_ID] for r in here} == {"same", "unrecorded"}
    assert [r.info.run_id for r in runs.kill_dead_launches()] == [parents["reused"]]
    assert {label: client.get_run(i).info.status for label, i in parents.items()} == {
        "reused": "KILLED", "same": "RUNNING", "unrecorded": "RUNNING"}
