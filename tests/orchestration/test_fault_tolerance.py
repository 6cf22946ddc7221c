"""Fault tolerance with real processes: a trial's worker SIGKILLed mid-run resumes from its last checkpoint and ends
with the weights of an uninterrupted run; a SIGKILLed sweep driver is resumed with ``--resume`` without re-running
or duplicating anything; on two simulated nodes, removing the node that runs a trial moves it to the other node,
where it continues from its checkpoint."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch
import yaml
from mlflow import MlflowClient

SPEC = """
name: {name}
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: {iterations}, eval_interval: {eval_interval}, batch_size: 8, mu: 2, eval_batch_size: 512}}
folds: {folds}
axes:
  method:
{methods}
resources: {{cpu: 1, gpu: {gpu}}}
"""
METHOD = "    {m}: {{algorithm: {{name: {m}}}}}"


def write_spec(project: Path, data_root: Path, *, name: str, iterations: int, folds: list[int],
               methods: list[str], gpu: float = 0, eval_interval: int = 20) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    spec = project / f"{name}.yaml"
    spec.write_text(SPEC.format(name=name, root=data_root, iterations=iterations, folds=folds, gpu=gpu,
                                eval_interval=eval_interval,
                                methods="\n".join(METHOD.format(m=m) for m in methods)))
    return spec


def grid_runs(client: MlflowClient, name: str) -> list:
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], "tags.`mutexmatch.role` = 'trial'", max_results=100)


def logged_steps(client: MlflowClient, run) -> list[int]:
    return [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]


def running_trial_checkpoint_saved(exp_dir: Path) -> bool:
    """Whether the newest Tune experiment state under ``exp_dir`` holds a checkpoint of an unfinished trial."""
    from ray.tune import ExperimentAnalysis

    for state_dir in {p.parent for p in exp_dir.glob("*/grid/experiment_state-*.json")}:
        try:
            trials = ExperimentAnalysis(str(state_dir)).trials
        except Exception:  # noqa: BLE001 - the driver may be writing the file; the caller polls again
            continue
        # a loaded state reports an unfinished trial as PENDING (what Tune would restart), not RUNNING
        if any(t.status not in ("TERMINATED", "ERROR") and t.checkpoint is not None for t in trials):
            return True
    return False


def final_weights(client: MlflowClient, run, dest: Path) -> dict[str, torch.Tensor]:
    path = client.download_artifacts(run.info.run_id, "weights/final_model.pt", str(dest))
    return torch.load(path, weights_only=True)


def uninterrupted_weights(client: MlflowClient, run, dest: Path) -> dict[str, torch.Tensor]:
    """Train the same resolved config with the plain trainer, in this process, without any interruption."""
    from mutexmatch.config import parse_config
    from mutexmatch.training import Trainer

    raw = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config.yaml", str(dest))).read_text())
    raw["output_dir"] = str(dest / "reference")
    summary = Trainer(parse_config(raw)).fit()
    return torch.load(summary.final_weights, weights_only=True)


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"tensors differ: {different}"


@pytest.mark.slow
def test_sigkilled_worker_resumes_from_its_checkpoint_with_identical_final_weights(tmp_path, data_root, sweep_env,
                                                                                    procs):
    write_spec(tmp_path, data_root, name="wkill", iterations=200, folds=[0], methods=["fixmatch"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "wkill.yaml", "--max-failures", "2"],
                              cwd=tmp_path, env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        def running_past_60():
            runs = grid_runs(client, "wkill")
            if runs and "mutexmatch.worker_pid" in runs[0].data.tags and max(logged_steps(client, runs[0]),
                                                                              default=0) >= 60:
                return runs[0]
            return None

        run = procs["wait_for"](running_past_60, 240, "the trial to log step 60")
        os.kill(int(run.data.tags["mutexmatch.worker_pid"]), signal.SIGKILL)
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    assert driver.returncode == 0, out
    assert "restarting from its last checkpoint" in out
    runs = grid_runs(client, "wkill")
    assert len(runs) == 1  # the restarted trial continued its own run
    run = runs[0]
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["mutexmatch.attempts"] == "2"
    assert tags["mutexmatch.attempt.2.tune_checkpoint"] == "yes"
    resumed_at = int(tags["mutexmatch.attempt.2.start_step"])
    assert 20 <= resumed_at <= 200 and resumed_at % 20 == 0
    assert logged_steps(client, run) == list(range(20, 201, 20))  # every evaluation logged exactly once
    assert_same_tensors(final_weights(client, run, tmp_path / "a"), uninterrupted_weights(client, run, tmp_path / "b"))


@pytest.mark.heavy  # heavy: 220 s in CI; CI keeps the terminated driver's resume and the killed worker's exact weights
@pytest.mark.slow
def test_sigkilled_driver_then_resume_finishes_everything_once(tmp_path, data_root, sweep_env, run_cli, procs):
    # Trials long enough (~10 s here) that the kill lands inside one with a saved checkpoint, not between trials.
    write_spec(tmp_path, data_root, name="dkill", iterations=1000, eval_interval=100, folds=[0, 1],
               methods=["fixmatch", "mutexmatch"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    log = (tmp_path / "driver.log").open("w")  # a file, not a pipe nobody reads: a full pipe would block the driver
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "dkill.yaml", "--max-concurrent", "1"],
                              cwd=tmp_path, env=sweep_env, stdout=log, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        def one_done_one_halfway():
            runs = grid_runs(client, "dkill")
            done = [r for r in runs if r.info.status == "FINISHED"]
            running = [r for r in runs if r.info.status == "RUNNING" and max(logged_steps(client, r), default=0) >= 200]
            # The driver must also have saved its experiment state since the running trial's first checkpoint:
            # a kill before that loses the checkpoint (Tune restores the trial from the state file), and the test
            # would see a restart from step 0 instead of the resume it checks.
            ok = done and running and running_trial_checkpoint_saved(tmp_path / "ray_results" / "dkill")
            return (done, running) if ok else None

        done_before, _ = procs["wait_for"](one_done_one_halfway, 300, "one finished and one started trial")
        ray_procs = procs["descendants"](driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
        log.close()
    procs["kill"](ray_procs)  # raylet, GCS, workers and the agents orphaned by the killed driver
    assert not [p for p in ray_procs if procs["alive"](p)]
    assert any(r.info.status == "RUNNING" for r in grid_runs(client, "dkill"))  # what the kill left behind

    result = run_cli(tmp_path, "dkill.yaml", "--max-concurrent", "1", "--resume", timeout=400)
    assert result.returncode == 0, result.output
    assert "was interrupted (its driver is gone); its runs are now KILLED" in result.output
    assert "resuming launch" in result.output
    runs = grid_runs(client, "dkill")
    assert len(runs) == 4  # exactly one run per trial
    assert sorted(r.info.run_name for r in runs) == ["fixmatch · fold 0", "fixmatch · fold 1",
                                                     "mutexmatch · fold 0", "mutexmatch · fold 1"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    for r in runs:
        assert logged_steps(client, r) == list(range(100, 1001, 100))
    by_id = {r.info.run_id: r for r in runs}
    for before in done_before:  # finished before the kill: not re-run
        after = by_id[before.info.run_id]
        assert after.data.tags["mutexmatch.attempts"] == "1"
        assert after.info.end_time == before.info.end_time
    # the trial cut off by the kill continued its run from a Tune checkpoint (forced snapshots: num_to_keep=2)
    resumed = [r for r in runs if r.data.tags["mutexmatch.attempts"] == "2"]
    assert resumed
    for r in resumed:
        assert r.data.tags["mutexmatch.attempt.2.tune_checkpoint"] == "yes"
        assert int(r.data.tags["mutexmatch.attempt.2.start_step"]) > 0
    exp = client.get_experiment_by_name("dkill")
    everything = client.search_runs([exp.experiment_id], "", max_results=100)
    assert not [r for r in everything if r.info.status == "RUNNING"]
    parents = [r for r in everything if r.data.tags.get("mutexmatch.role") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


@pytest.mark.heavy  # heavy: 63 s; make test-cluster kills a worker container for real
@pytest.mark.slow
def test_removed_node_trial_finishes_on_the_other_node(tmp_path, data_root):
    import ray
    from ray.cluster_utils import Cluster

    from orchestration.sweep import SweepError, SweepOptions, run_sweep

    # fast failure detection, so the test does not wait out the default health-check timeout
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "_system_config": {"health_check_period_ms": 500, "health_check_timeout_ms": 500,
                                          "health_check_failure_threshold": 3}})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        # a GPU request on this CPU-only cluster is refused at once instead of waiting forever
        gpu_spec = write_spec(tmp_path / "gpu", data_root, name="gpu", iterations=40, folds=[0],
                              methods=["supervised"], gpu=1)
        with pytest.raises(SweepError, match="resources.gpu=1: the Ray cluster has no GPU"):
            run_sweep(SweepOptions(spec_path=gpu_spec, project_dir=tmp_path / "gpu"))
        gpu_store = MlflowClient(f"sqlite:///{tmp_path / 'gpu' / 'mlflow.db'}")
        assert gpu_store.search_runs([gpu_store.get_experiment_by_name("gpu").experiment_id], "") == []  # no trace

        spec = write_spec(tmp_path, data_root, name="nodes", iterations=200, folds=[0], methods=["fixmatch"])
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        removed: dict[str, str] = {}

        def remover() -> None:
            import time

            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                runs = grid_runs(client, "nodes")
                if runs and "mutexmatch.node_id" in runs[0].data.tags and max(logged_steps(client, runs[0]),
                                                                               default=0) >= 60:
                    node_id = runs[0].data.tags["mutexmatch.node_id"]
                    node = next(n for n in workers if n.node_id == node_id)
                    cluster.remove_node(node, allow_graceful=False)
                    removed["node_id"] = node_id
                    return
                time.sleep(0.2)

        thread = threading.Thread(target=remover, daemon=True)
        thread.start()
        outcome = run_sweep(SweepOptions(spec_path=spec, project_dir=tmp_path, max_failures=3))
        thread.join(timeout=10)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert removed, "the trial's node was never removed"
    assert outcome.status == "finished", outcome
    runs = grid_runs(client, "nodes")
    assert len(runs) == 1
    tags = runs[0].data.tags
    assert runs[0].info.status == "FINISHED" and tags["mutexmatch.attempts"] == "2"
    assert tags["mutexmatch.attempt.1.node_id"] == removed["node_id"]
    assert tags["mutexmatch.attempt.2.node_id"] not in ("", removed["node_id"])
    assert tags["mutexmatch.attempt.2.tune_checkpoint"] == "yes" and int(tags["mutexmatch.attempt.2.start_step"]) > 0
    assert logged_steps(client, runs[0]) == list(range(20, 201, 20))
    assert final_weights(client, runs[0], tmp_path / "w")


@pytest.mark.slow
def test_terminated_driver_reports_what_finished_and_the_resume_command_works(tmp_path, data_root, sweep_env,
                                                                             run_cli, procs):
    write_spec(tmp_path, data_root, name="intr", iterations=120, folds=[0], methods=["fixmatch", "mutexmatch"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "intr.yaml", "--max-concurrent", "1"],
                              cwd=tmp_path, env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        def one_done_one_started():
            runs = grid_runs(client, "intr")
            done = [r for r in runs if r.info.status == "FINISHED"]
            running = [r for r in runs if r.info.status == "RUNNING" and logged_steps(client, r)]
            return done and running
        procs["wait_for"](one_done_one_started, 300, "one finished and one started trial")
        driver.send_signal(signal.SIGTERM)  # like `kill`: handled as Ctrl+C (Tune stops gracefully)
        out, _ = driver.communicate(timeout=180)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    assert driver.returncode == 130, out
    assert "[sweep] interrupted" in out
    assert "finished (1): method=fixmatch fold 0" in out and "not finished (1): method=mutexmatch fold 0" in out
    resume = out.split("To resume this launch (finished trials are not re-run):\n", 1)[1].splitlines()[0].strip()
    assert resume == (f"python -m orchestration.sweep intr.yaml --tracking-uri sqlite:///{tmp_path / 'mlflow.db'} "
                      f"--storage {tmp_path / 'ray_results'} --max-concurrent 1 --resume")
    runs = grid_runs(client, "intr")
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [("fixmatch · fold 0", "FINISHED"),
                                                                      ("mutexmatch · fold 0", "KILLED")]
    exp = client.get_experiment_by_name("intr")
    parent = client.search_runs([exp.experiment_id], "tags.`mutexmatch.role` = 'sweep'")
    assert [p.info.status for p in parent] == ["KILLED"]
    killed = next(r for r in runs if r.info.status == "KILLED")

    args = shlex.split(resume)[3:]  # the printed command, run as it is
    result = run_cli(tmp_path, *args, timeout=300)
    assert result.returncode == 0, result.output
    runs = grid_runs(client, "intr")
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [("fixmatch · fold 0", "FINISHED"),
                                                                      ("mutexmatch · fold 0", "FINISHED")]
    again = client.get_run(killed.info.run_id)
    assert again.data.tags["mutexmatch.attempts"] == "2"  # continued its own run
    assert logged_steps(client, again) == list(range(20, 121, 20))


class _WorkerDied(BaseException):
    """The trial's worker is gone at this instant (raised from Tune's side, so nothing of the attempt survives)."""


class FakeTune:
    """Tune's side of a function trainable, in this process: the trial's context and folder, the checkpoint a
    restarted trial gets back, and reports whose checkpoints are persisted as Tune does (copied before returning)."""

    def __init__(self, tmp_path: Path, die_at_step: int | None):
        from ray import tune

        self.tune = tune
        self.trial_dir = tmp_path / "ray_trial_dir"  # what Ray syncs to the storage while the trial runs
        self.trial_dir.mkdir()
        self.persisted = tmp_path / "persisted"
        self.die_at_step = die_at_step
        self.checkpoint = None
        self.reports: list[dict] = []

    def install(self, monkeypatch) -> None:
        import ray
        from types import SimpleNamespace

        context = SimpleNamespace(get_trial_id=lambda: "trial_00001", get_trial_dir=lambda: str(self.trial_dir))
        monkeypatch.setattr(self.tune, "get_context", lambda: context)
        monkeypatch.setattr(self.tune, "get_checkpoint", lambda: self.checkpoint)
        monkeypatch.setattr(self.tune, "report", self.report)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node-1"))

    def report(self, metrics: dict, checkpoint=None) -> None:
        if metrics["step"] == self.die_at_step:
            self.die_at_step = None
            raise _WorkerDied  # before Tune persisted this step's checkpoint
        if checkpoint is not None:
            import shutil

            staged = Path(checkpoint.path)
            assert not staged.is_relative_to(self.trial_dir), staged
            dest = self.persisted / f"step{metrics['step']}"
            shutil.copytree(staged, dest)
            self.checkpoint = self.tune.Checkpoint.from_directory(str(dest))
        self.reports.append(metrics)


def _in_process_trial(tmp_path: Path, data_root: Path, name: str):
    """(a client of a new SQLite store, the TrialContext of one 8-step FixMatch grid trial logging to experiment
    ``name`` of it): what run_trial needs to run in this process."""
    from orchestration.spec.plan import GridTrial
    from orchestration.spec.sweepfile import Cell
    from orchestration.trial import tracking
    from orchestration.trial.trainable import TrialContext

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp_id = tracking.ensure_experiment(client, name, uri)
    raw = {"data": {"dataset": "digits", "num_labels": 20, "root": str(data_root)}, "model": {"backbone": "small_cnn"},
           "algorithm": {"name": "fixmatch"},
           "train": {"iterations": 8, "eval_interval": 2, "batch_size": 4, "mu": 2, "progress": False}}
    ctx = TrialContext(tracking_uri=uri, experiment_id=exp_id, parent_run_id="parent", launch_id="L",
                       git_commit="c", device="cpu", num_threads=1,
                       grid={"k": GridTrial("grid", Cell((("method", "fixmatch"),)), 0, raw, "h", 8, 4)})
    return client, ctx


def test_a_restarted_trial_continues_its_run_outside_the_synced_trial_folder(tmp_path, data_root, monkeypatch):
    """run_trial in this process with Tune faked: the worker dies after logging step 6 but before Tune kept its
    checkpoint; the restarted attempt resumes from step 4, logs every evaluation once, ends with the weights of an
    uninterrupted run, and nothing is ever written into the trial folder Ray syncs; a third call finds the run
    FINISHED and does not train."""
    from orchestration.contract import LAST_STEP
    from orchestration.trial.scratch import scratch_root
    from orchestration.trial.trainable import run_trial

    client, ctx = _in_process_trial(tmp_path, data_root, "inproc")
    fake = FakeTune(tmp_path, die_at_step=6)
    fake.install(monkeypatch)
    (tmp_path / "worker_tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "worker_tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    with pytest.raises(_WorkerDied):
        run_trial({"trial": "k"}, ctx)
    scratch = scratch_root()
    assert scratch.parent == tmp_path / "worker_tmp"
    assert [p.name.startswith("trial_00001_") for p in scratch.iterdir()] == [True]  # the dead attempt's, until
    run_trial({"trial": "k"}, ctx)
    assert not list(scratch.iterdir())  # the next attempt of the trial, which deletes it, is done
    [run] = grid_runs(client, "inproc")
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["mutexmatch.attempts"] == "2" and tags[LAST_STEP] == "8"
    assert (tags["mutexmatch.attempt.2.tune_checkpoint"], tags["mutexmatch.attempt.2.start_step"]) == ("yes", "4")
    assert logged_steps(client, run) == [2, 4, 6, 8]
    assert [r["step"] for r in fake.reports] == [2, 4, 6, 8]
    assert not list(fake.trial_dir.iterdir())
    assert_same_tensors(final_weights(client, run, tmp_path / "a"), uninterrupted_weights(client, run, tmp_path / "b"))
    run_trial({"trial": "k"}, ctx)  # e.g. the driver restored Tune's state from before the trial finished
    assert fake.reports[-1]["step"] == 8 and client.get_run(run.info.run_id).data.tags["mutexmatch.attempts"] == "2"


@pytest.mark.heavy  # heavy: 67 s; CI keeps the relaunch that skips finished trials (test_sweep.py)
@pytest.mark.slow
def test_resume_without_tune_storage_trusts_mlflow(tmp_path, data_root, run_cli):
    """``--resume`` after Tune's storage folder is lost: MLflow says which trials of the launch FINISHED, and they
    are not trained again (before, every trial ran a second time, leaving duplicate FINISHED runs)."""
    write_spec(tmp_path, data_root, name="lost", iterations=8, eval_interval=4, folds=[0, 1], methods=["fixmatch"])
    first = run_cli(tmp_path, "lost.yaml")
    assert first.returncode == 0, first.output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    before = {r.info.run_id: r.info.end_time for r in grid_runs(client, "lost")}
    assert len(before) == 2
    shutil.rmtree(tmp_path / "ray_results")

    again = run_cli(tmp_path, "lost.yaml", "--resume")
    assert again.returncode == 0, again.output
    assert "already FINISHED in MLflow: not run again" in again.output
    after = {r.info.run_id: r.info.end_time for r in grid_runs(client, "lost")}
    assert after == before  # no new run, and the finished ones untouched


def test_scratch_folders_of_dead_attempts_are_deleted_but_not_a_running_ones(tmp_path, monkeypatch):
    """A trial's earlier attempts on this machine, and any folder idle for a day with no trainer in it, go when a
    trial starts; a folder whose trainer still holds the run lock stays however old it looks."""
    import time

    from mutexmatch.training import RunFolder
    from orchestration.trial import trainable
    from orchestration.trial.scratch import scratch_root

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    root = scratch_root()
    old = time.time() - trainable.STALE_AFTER_S - 60
    folders = {name: root / name for name in ("t1_a", "t9_dead", "t9_running", "t9_recent")}
    for name, path in folders.items():
        (path / trainable.RUN_DIRNAME).mkdir(parents=True)
        if name != "t9_recent":
            os.utime(path, (old, old))
    running = RunFolder(folders["t9_running"] / trainable.RUN_DIRNAME)
    running.lock()
    os.utime(folders["t9_running"], (old, old))
    new = trainable._scratch("t1")
    running.unlock()
    assert sorted(p.name for p in root.iterdir()) == sorted(["t9_running", "t9_recent", new.name])
    assert new.name.startswith("t1_") and not list(new.iterdir())


# ------------------------------------------------------------------------------------------------ two launches at once
HOLDER = """
import sys, time
from orchestration.launch.launchlock import launch_lock
with launch_lock(sys.argv[1], sys.argv[2], "python -m orchestration.sweep first.yaml") as name_launch:
    name_launch("20261126-190000-abcd")
    print("held", flush=True)
    time.sleep(120)
"""


def _refused_second_launch(tmp_path, monkeypatch, capsys, uri: str, first: subprocess.Popen) -> str:
    """The second launch, in this process with Ray's start turned into an error, while ``first`` lives (killed
    after): refused with exit status 2 in one line, which is returned."""
    import ray

    from orchestration import sweep

    def refuse(*args, **kwargs):
        raise AssertionError("the second launch got as far as starting Ray")

    monkeypatch.setattr(ray, "init", refuse)
    write_spec(tmp_path, tmp_path / "data", name="twice", iterations=4, folds=[0], methods=["fixmatch"])
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # what creating the test's store logged
    try:
        rc = sweep.main([str(tmp_path / "twice.yaml"), "--tracking-uri", uri])
    finally:
        first.kill()
        first.wait()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_second_launch_on_a_fresh_store_is_refused_in_one_line_naming_the_first(tmp_path, monkeypatch, capsys,
                                                                                  sweep_env):
    # Issue 26: both launches trained every trial (two FINISHED runs per cell, fold and hash), and on a fresh store
    # the second crashed in MLflow's schema migration with a traceback.
    db = tmp_path / "mlflow.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, f"sqlite:///{db}", "twice"], env=sweep_env,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    line = _refused_second_launch(tmp_path, monkeypatch, capsys, f"sqlite:///{db}", holder)
    assert f"experiment 'twice' in sqlite:///{db}: another launch is running (launch 20261126-190000-abcd, " \
           f"driver pid {holder.pid}" in line and "--resume" in line, line
    assert not db.exists()  # refused before the store was opened


def test_a_second_launch_while_a_live_driver_holds_a_running_parent_is_refused(tmp_path, monkeypatch, capsys):
    """A tracking server has no lock file both drivers see: a RUNNING parent whose driver is alive on this host is
    the check (a sleeping process stands in for the first driver)."""
    import socket

    from orchestration import contract as C
    from orchestration.trial import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = tracking.ensure_experiment(client, "twice", uri)
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    parent = client.create_run(exp, tags={C.ROLE: C.ROLE_SWEEP, C.LAUNCH_ID: "20261126-190000-abcd",
                                          C.DRIVER_HOST: socket.gethostname(), C.DRIVER_PID: str(first.pid)})
    line = _refused_second_launch(tmp_path, monkeypatch, capsys, uri, first)
    assert f"launch 20261126-190000-abcd (driver pid {first.pid}, parent run {parent.info.run_id}) is running" \
           in line, line
    assert [r.info.run_id for r in client.search_runs([exp])] == [parent.info.run_id]  # nothing added


def test_a_second_ctrl_c_after_the_parent_opened_kills_the_runs_and_prints_the_resume_command(
        tmp_path, data_root, monkeypatch, capsys):
    # Issue 26: a second Ctrl+C (here: during the final statuses) printed "interrupted before the sweep started",
    # no resume command, and left the parent RUNNING.
    from orchestration import sweep
    from orchestration.store.store import Store

    def first_ctrl_c(ctx, grid_keys, phases):
        trial = ctx.store.client.create_run(ctx.store.experiment_id, tags={"mlflow.parentRunId": ctx.parent.run_id,
                                                                            "mutexmatch.role": "trial"})
        assert trial.info.status == "RUNNING"
        raise KeyboardInterrupt

    def second_ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_start_ray", lambda opts, plan: (False, {"CPU": 1.0}))
    monkeypatch.setattr(sweep, "run_phases", first_ctrl_c)
    monkeypatch.setattr(sweep, "_finish", second_ctrl_c)
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, data_root, name="abort", iterations=4, folds=[0], methods=["fixmatch"])
    assert sweep.main([str(spec)]) == 130
    out, err = capsys.readouterr()
    assert "before the sweep started" not in err and "Traceback" not in err, err
    resume = out.split("To resume this launch (finished trials are not re-run):\n  ", 1)[1].splitlines()[0]
    assert resume.startswith("python -m orchestration.sweep") and resume.endswith("--resume"), out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("abort").experiment_id
    statuses = sorted((r.data.tags["mutexmatch.role"], r.info.status) for r in Store(client, exp).runs())
    assert statuses == [("sweep", "KILLED"), ("trial", "KILLED")]


# ------------------------------------------------------------------------------------------------ orphans of a killed driver
FAKE_DRIVER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_the_next_launch_ends_the_ray_processes_a_killed_driver_left(tmp_path, data_root, monkeypatch, capsys):
    # Issue 26: after a SIGKILL of the driver, Ray's dashboard and runtime-env agents were alive 72-79 s later.
    import socket
    import time

    from orchestration import contract as C
    from orchestration import sweep
    from orchestration.launch import orphans
    from orchestration.trial import tracking
    from orchestration.launch.launch import SweepError

    driver = subprocess.Popen([sys.executable, "-c", FAKE_DRIVER], stdout=subprocess.PIPE, text=True)
    child = int(driver.stdout.readline())
    described = orphans.describe_children(driver.pid)
    assert described.startswith(f"{child}:")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    driver.kill()
    driver.wait()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = tracking.ensure_experiment(client, "orphans", uri)
    reused = f" {bystander.pid}:1"  # a recorded id now held by a process with another start time: left alone
    client.create_run(exp, tags={C.ROLE: C.ROLE_SWEEP, C.LAUNCH_ID: "L1", C.DRIVER_HOST: socket.gethostname(),
                                 C.DRIVER_PID: str(driver.pid), C.RAY_PROCESSES: described + reused})

    def stop_here(*args, **kwargs):
        raise SweepError("stopped by the test before Ray")

    monkeypatch.setattr(sweep, "_start_ray", stop_here)
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, data_root, name="orphans", iterations=4, folds=[0], methods=["fixmatch"])
    try:
        assert sweep.main([str(spec)]) == 2
        out = capsys.readouterr().out
        assert f"[sweep] ended 1 Ray process(es) that launch left running (pids {child})" in out, out
        deadline = time.time() + 10
        while not _gone(child) and time.time() < deadline:
            time.sleep(0.1)
        assert _gone(child) and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.heavy  # ~35 s on 2 loaded cores; CI covers the trainer's side (tests/mutexmatch/training/test_preemption.py)
def test_a_signalled_trial_hands_tune_the_checkpoint_of_its_step_and_continues_from_it(tmp_path, data_root,
                                                                                       monkeypatch):
    """Issue 31: SIGUSR1 (or SIGTERM) to a trial's process after step 5, between evaluations: the trainer writes the
    step's checkpoint, the trainable hands it to Tune with the last evaluation's metrics and marks the run KILLED by
    the signal; the next attempt continues from step 5 (not from the evaluation at 4), logs every evaluation once
    and ends with the weights of an uninterrupted run."""
    from mutexmatch.training import Trainer
    from mutexmatch.training import preemption as trainer_preemption
    from orchestration.contract import ENDED_BY
    from orchestration.trial import preemption
    from orchestration.trial.trainable import run_trial

    client, ctx = _in_process_trial(tmp_path, data_root, "signalled")
    fake = FakeTune(tmp_path, die_at_step=None)
    fake.install(monkeypatch)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(preemption, "WAIT_FOR_STOP_S", 0.0)  # no stop follows here: the attempt ends at once
    step = Trainer.train_step

    def signalled_after_5(self):
        step(self)
        if self.step == 5:
            os.kill(os.getpid(), signal.SIGUSR1)

    monkeypatch.setattr(Trainer, "train_step", signalled_after_5)
    previous = trainer_preemption.install()  # what preemptible's set-up does in the Ray actor's main thread
    try:
        with pytest.raises(preemption.TrialPreempted, match="stopped by SIGUSR1 at step 5"):
            run_trial({"trial": "k"}, ctx)
    finally:
        trainer_preemption.restore(previous)
    [run] = grid_runs(client, "signalled")
    assert run.info.status == "KILLED" and run.data.tags[ENDED_BY] == "signal SIGUSR1 at step 5"
    assert [r["step"] for r in fake.reports] == [2, 4, 5] and fake.reports[-1]["test/acc"] == fake.reports[1][
        "test/acc"]  # the step's checkpoint, reported with the last evaluation's metrics
    monkeypatch.setattr(Trainer, "train_step", step)
    run_trial({"trial": "k"}, ctx)
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["mutexmatch.attempt.2.start_step"] == "5"
    assert logged_steps(client, run) == [2, 4, 6, 8]
    assert_same_tensors(final_weights(client, run, tmp_path / "a"), uninterrupted_weights(client, run, tmp_path / "b"))
