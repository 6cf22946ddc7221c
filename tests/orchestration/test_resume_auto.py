"""``--resume auto`` (issue 31): which launch it continues, decided on a real MLflow store of parent runs. The launch
of the tiny sweep relaunched with it (``tests/orchestration/test_sweep.py``) trains nothing; a sweep started by it
and relaunched by it after a SIGKILLed driver is ``test_resume_auto_e2e`` (heavy)."""

from __future__ import annotations

import time

import pytest
from mlflow import MlflowClient

from orchestration import contract as C
from orchestration.launch.launch import AUTO_OTHER_SETTINGS, SweepOptions, command_line, resume_or_start
from orchestration.store.store import Store
from orchestration.trial import tracking


class _Plan:
    def __init__(self, spec_hash: str, smoke: bool = False):
        self.spec_hash, self.smoke = spec_hash, smoke


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One SQLite store for the module (creating its schema takes seconds); an experiment per test."""
    return MlflowClient(tracking.resolve_tracking_uri(None, tmp_path_factory.mktemp("auto")))


@pytest.fixture
def store(client, request):
    return Store(client, client.create_experiment(request.node.name))


def _launch(store: Store, launch_id: str, status: str, spec_hash: str = "h1", storage: str = "/s",
            smoke: bool = False) -> str:
    run = store.client.create_run(store.experiment_id, tags={
        C.ROLE: C.ROLE_SWEEP, C.LAUNCH_ID: launch_id, C.SPEC_HASH: spec_hash, C.STORAGE: storage,
        C.SMOKE: str(smoke).lower()})
    store.client.set_terminated(run.info.run_id, status)
    time.sleep(0.01)  # distinct start times: "newest" is by start time
    return run.info.run_id


def test_a_first_launch_starts(store):
    found, line = resume_or_start(store, _Plan("h1"), "/s")
    assert found is None and line == "no earlier launch of these settings: starting one"


@pytest.mark.parametrize("status", ["KILLED", "FAILED", "RUNNING"])
def test_the_newest_unfinished_launch_of_the_same_settings_is_continued(store, status):
    _launch(store, "old", "KILLED")
    newest = _launch(store, "new", status)
    found, line = resume_or_start(store, _Plan("h1"), "/s")
    assert found.info.run_id == newest and line == f"continuing launch new (it ended {status})"


def test_a_finished_launch_is_not_trained_again(store):
    _launch(store, "done", "FINISHED")
    found, line = resume_or_start(store, _Plan("h1"), "/s")
    assert found.info.status == "FINISHED" and line == "launch done of these settings FINISHED: nothing of it is " \
                                                       "trained again"


def test_a_newest_launch_of_other_settings_is_left_alone_and_said_so(store):
    mine = _launch(store, "mine", "KILLED")
    _launch(store, "other", "KILLED", spec_hash="h2")
    found, line = resume_or_start(store, _Plan("h1"), "/s")
    assert found.info.run_id == mine
    assert line == (f"continuing launch mine (it ended KILLED); the newest launch, other, has other settings (spec "
                    f"hash h2, storage /s, smoke false): {AUTO_OTHER_SETTINGS}")
    # only launches of other settings (another storage, a smoke run): a new launch starts
    found, line = resume_or_start(store, _Plan("h1"), "/elsewhere")
    assert found is None and line.startswith("no earlier launch of these settings: starting one; the newest launch")
    assert resume_or_start(store, _Plan("h1", smoke=True), "/s")[0] is None


def test_the_command_of_an_auto_launch_repeats_it_and_the_resume_command_is_unchanged(tmp_path):
    opts = SweepOptions(spec_path=tmp_path / "x.yaml", resume="auto", max_failures=-1,
                        notify="https://hooks.example/secret-token")
    auto = command_line(opts, "sqlite:///m.db", "/s", resume=opts.resume)
    assert auto.endswith("--max-failures -1 --resume auto") and "secret-token" not in auto
    assert command_line(opts, "sqlite:///m.db", "/s", resume=True).endswith("--max-failures -1 --resume")


@pytest.mark.heavy  # two sweep launches (minutes on 2 cores)
def test_resume_auto_twice_in_a_row_trains_once_and_the_webhook_hears_the_end(tmp_path, data_root, run_cli):
    """The same command twice, as a requeued job runs it: the first ``--resume auto`` starts and finishes the sweep
    (a local webhook is told "finished"), the second trains nothing and adds no run."""
    import http.server
    import json
    import threading

    received: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    (tmp_path / "auto.yaml").write_text(
        f"name: auto\nbase:\n  data: {{dataset: digits, num_labels: 20, root: {data_root}}}\n"
        "  model: {backbone: small_cnn}\n  train: {iterations: 4, eval_interval: 2, batch_size: 4, mu: 2}\n"
        "folds: [0, 1]\naxes:\n  method:\n    fixmatch: {algorithm: {name: fixmatch}}\nresources: {cpu: 1, gpu: 0}\n")
    args = ("auto.yaml", "--resume", "auto", "--max-failures", "-1", "--max-concurrent", "1", "--notify", url)
    try:
        first = run_cli(tmp_path, *args, timeout=600)
        assert first.returncode == 0, first.output
        assert "--resume auto: no earlier launch of these settings: starting one" in first.output, first.output
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.get_experiment_by_name("auto")
        runs = client.search_runs([exp.experiment_id], max_results=100)
        assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}  # the parent and two trials
        [parent] = [r for r in runs if r.data.tags.get(C.ROLE) == C.ROLE_SWEEP]
        assert received == [{"text": f"mutexmatch sweep 'auto' (launch {parent.data.tags[C.LAUNCH_ID]}) finished: "
                                     "2 finished"}]
        second = run_cli(tmp_path, *args, timeout=300)
        assert second.returncode == 0, second.output
        assert "FINISHED: nothing of it is trained again" in second.output and "nothing to do" in second.output
        assert len(client.search_runs([exp.experiment_id], max_results=100)) == 3
    finally:
        server.shutdown()
        server.server_close()


class _Trial:
    def __init__(self, cell: str, fold: int, config_hash: str):
        self.key, self.hashes = C.trial_key(cell, fold), {config_hash}


class _GridPlan:
    def __init__(self, *trials: _Trial):
        self.grid, self.searches, self.refits, self.smoke = list(trials), [], None, False


def test_a_resumed_launch_whose_plan_artifact_is_lost_chooses_its_trials_again(store):
    """Fresh finding #5: ``--resume`` after the parent run's artifacts were deleted died with "failed unexpectedly:
    Failed to download artifacts from path 'launch_plan.json'". The trials are chosen again from the plan and the
    store's runs (every one not FINISHED), said in one line naming the lost artifact, and the plan saved again."""
    import shutil
    from urllib.parse import urlparse

    from orchestration.launch.launch import load_launch_plan, resumed_selection, save_launch_plan

    parent = _launch(store, "lost", "KILLED")
    save_launch_plan(store.client, parent, {"grid": ["m=a/fold0", "m=b/fold0"], "phases": [], "skipped": []})
    done = store.client.create_run(store.experiment_id, tags={
        C.ROLE: C.ROLE_TRIAL, C.KIND: C.KIND_GRID, C.CELL: "m=a", C.FOLD: "0", C.CONFIG_HASH: "ha"})
    store.client.set_terminated(done.info.run_id, "FINISHED")
    run = store.client.get_run(parent)
    shutil.rmtree(urlparse(run.info.artifact_uri).path)            # the parent run's artifacts, deleted
    said: list[str] = []
    grid, phases, skipped = resumed_selection(store, _GridPlan(_Trial("m=a", 0, "ha"), _Trial("m=b", 0, "hb")),
                                              run, said.append)
    assert (grid, phases, skipped) == (["m=b/fold0"], [], ["m=a/fold0"])
    assert len(said) == 1 and "launch lost" in said[0] and "launch_plan.json is missing" in said[0], said
    assert "chosen again" in said[0] and "1 grid trial(s)" in said[0]
    assert load_launch_plan(store.client, parent) == {"grid": grid, "phases": phases, "skipped": skipped}
    said.clear()                                                   # saved again: the next resume reads it
    assert resumed_selection(store, _GridPlan(), run, said.append) == (grid, phases, skipped) and said == []
