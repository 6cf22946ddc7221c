"""The container cluster for real (issue 25), run by `make test-cluster` (marker ``cluster``; not part of `make test`).

docker/local-base.sh has built the project image on a Debian base; here docker/compose.yaml's services run as
containers on one user network (tests/docker/local_stack.py says what is substituted and why): Postgres, an S3 stand-in
for MinIO, the MLflow server, a Ray head and two Ray workers. From the host venv, in order (the tests share the stack
and run top to bottom; `-x` stops at the first failure):

1. the image runs the pinned stack (torch, Ray, MLflow) as uid 1000;
2. the stack publishes only on 127.0.0.1 and the Ray job API refuses a client without the token;
3. `ray job submit ... python -m orchestration.sweep experiments/quickstart.yaml --set ...` (grid, search and
   refit on one fold, short trials) runs its trials on both workers, with metrics and checkpoints in the MLflow server (Postgres) and the S3 store, and `python -m
   reports.build` on the host builds the report from the server;
4. faults on one launch with longer trials: a worker killed mid-trial (the trial continues on the other worker from
   its checkpoint), the head killed (restarted, and `--resume` finishes the sweep), and the MLflow server stopped for
   30 s during the resumed sweep (trials wait and retry: every evaluation is logged once);
5. a sweep with `resources.workers: 2` (issue 30): each trial is a Ray Train TorchTrainer whose two ranks (gloo)
   run one in each worker container; a worker container killed mid-trial fails the attempt, Tune restarts the
   trial from its checkpoint once the container is back, and every evaluation is logged once;
6. issue 31: one trial's process sent SIGTERM in its container checkpoints its step within seconds and continues
   from it; the head killed and the same job command (``--resume auto``) resubmitted finishes the launch with no
   duplicate runs and no checkpointed trial restarted from 0; the command once more trains nothing;
7. issue 44: a plugin the image never had (docs/plugin_example's my_methods, copied to a folder outside the
   checkout) is uploaded as the job's working directory, shipped to the workers by the sweep, and its algorithm
   trained there; the report built on the host names it.
Teardown removes the containers, the network and the volume, and fails if any is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.docker.local_stack import CLUSTER_ARGS, REPO, WORKERS, Stack, docker, submit_command, until

pytestmark = pytest.mark.cluster

IMAGE = os.environ.get("MUTEXMATCH_IMAGE", "mutexmatch:0.1.0-local")
BIN = Path(sys.executable).parent
QUICKSTART = "experiments/quickstart.yaml"
# The sweep of step 3: the quickstart (grid, TPE search, refit of the best parameters) on one fold with short
# trials: a report needs grid runs, which --smoke does not make.
SMALL_SET = ["--set", "folds=[0]", "--set", "base.train.iterations=20", "--set", "base.train.eval_interval=10",
             "--set", "search.n_trials=2", "--set", "search.base.train.iterations=20"]
# The fault launch: the quickstart's smoke trials (3, one per method) made long enough to kill things in them.
FAULT_ITERATIONS, FAULT_EVAL = 1500, 100
FAULT_SET = ["--set", f"smoke.train.iterations={FAULT_ITERATIONS}", "--set", f"smoke.train.eval_interval={FAULT_EVAL}"]
CLOSED_NETWORK_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
                      "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def say(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@pytest.fixture(scope="module")
def stack():
    s = Stack(IMAGE)
    started = time.monotonic()
    try:
        s.up()
        say(f"stack up in {time.monotonic() - started:.0f} s: MLflow {s.mlflow_url}, Ray {s.ray_address}")
        yield s
    finally:
        left = s.down()
        say(f"stack removed (containers, network {s.network}, volume {s.volume}); left: {left or 'nothing'}")
        assert not left, left


def submit(stack: Stack, *args: str, wait: bool = True, timeout: float = 1200, cwd: Path = REPO
           ) -> subprocess.CompletedProcess:
    """`ray job submit --address <head> --working-dir . -- python -m orchestration.sweep <args>` from the host venv
    in ``cwd`` (the folder uploaded), the command docker/README.md and docker/kuberay/rayjob.yaml give."""
    cmd = submit_command(stack.ray_address, list(args), wait=wait)
    cmd[0] = str(BIN / "ray")
    say("$ " + " ".join(cmd[1:]))
    env = {**os.environ, **CLOSED_NETWORK_ENV, **stack.client_env}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def client(stack: Stack):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=stack.mlflow_url)


def launch_runs(stack: Stack, overrides: list[str], experiment: str = "quickstart") -> tuple[list, list]:
    """(parent runs, trial runs) of the launches of ``experiment`` (the quickstart's) with these --set items."""
    from orchestration import contract as C

    mlc = client(stack)
    exp = mlc.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    runs = mlc.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get(C.ROLE) == C.ROLE_SWEEP
               and json.loads(r.data.tags.get(C.OVERRIDES, "[]")) == overrides]
    ids = {p.info.run_id for p in parents}
    trials = [r for r in runs if r.data.tags.get(C.PARENT_RUN_ID) in ids]
    return parents, trials


def attempts(run) -> list[tuple[str, str, str]]:
    """(host, start step, tune checkpoint) of each attempt of a trial run."""
    from orchestration import contract as C

    t = run.data.tags
    return [(t.get(C.attempt_tag(i, "host"), "?"), t.get(C.attempt_tag(i, "start_step"), "?"),
             t.get(C.attempt_tag(i, "tune_checkpoint"), "?")) for i in range(1, int(t.get(C.ATTEMPTS, "0")) + 1)]


def s3_keys(stack: Stack, bucket: str) -> list[str]:
    code = ("import boto3, sys; s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:9000'); "
            "p = s3.get_paginator('list_objects_v2'); "
            "print('\\n'.join(o['Key'] for page in p.paginate(Bucket=sys.argv[1]) for o in page.get('Contents', [])))")
    return docker("exec", "-e", "AWS_ACCESS_KEY_ID=x", "-e", "AWS_SECRET_ACCESS_KEY=x", "-e",
                  "AWS_DEFAULT_REGION=us-east-1", stack.container("minio"), "python", "-c", code, bucket).split()


# ----------------------------------------------------------------------------------------------------------------


def test_1_image_runs_the_pinned_stack_as_uid_1000():
    import mlflow
    import ray
    import torch

    out = docker("run", "--rm", "--network", "none", IMAGE, "python", "-c",
                 "import os, torch, ray, mlflow, mutexmatch, orchestration, reports; "
                 "print(os.getuid(), torch.__version__, ray.__version__, mlflow.__version__)")
    say(f"image {IMAGE}: uid, torch, ray, mlflow = {out}")
    uid, image_torch, image_ray, image_mlflow = out.split()
    assert uid == "1000"
    assert (image_torch, image_ray, image_mlflow) == (torch.__version__, ray.__version__, mlflow.__version__)


def test_2_ports_on_loopback_only_and_the_job_api_needs_the_token(stack):
    bindings = stack.published()
    say(f"published: {sorted(bindings)}")
    assert bindings and all(b.startswith("127.0.0.1:") for b in bindings), bindings
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{stack.ray_address}/api/jobs/", timeout=10)
    assert refused.value.code in (401, 403)
    nodes = stack.alive_nodes()
    say(f"Ray nodes: {sorted(nodes.values())}")
    assert sorted(nodes.values()) == sorted(["ray-head", *WORKERS])


def planned_trials(overrides: list[str], smoke: bool) -> int:
    from orchestration.spec.overrides import load_sweep, plan_sweep

    return plan_sweep(load_sweep(REPO / QUICKSTART, REPO, overrides, need_data=False), REPO, smoke=smoke).num_trials


def test_3_sweep_runs_on_both_workers_and_the_report_builds_from_the_server(stack):
    from orchestration import contract as C

    started = time.monotonic()
    job = submit(stack, QUICKSTART, *SMALL_SET, *CLUSTER_ARGS)
    output = job.stdout + job.stderr
    say(f"job finished in {time.monotonic() - started:.0f} s, exit {job.returncode}")
    assert job.returncode == 0 and "succeeded" in output, output[-6000:] + stack.logs("ray-head")

    parents, trials = launch_runs(stack, SMALL_SET[1::2])
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    for run in sorted(trials, key=lambda r: r.info.run_name):
        say(f"  {run.info.run_name}: {run.info.status}, ran on {attempts(run)}")
    planned = planned_trials(SMALL_SET[1::2], smoke=False)
    say(f"MLflow: {len(trials)} trial runs, {planned} trials planned (grid, search, refit)")
    assert len(trials) == planned and {r.info.status for r in trials} == {"FINISHED"}
    hosts = {a[0] for r in trials for a in attempts(r)}
    assert hosts == set(WORKERS), hosts  # both workers, never the head (it offers no CPU)

    mlc = client(stack)
    for run in trials:
        files = {a.path for a in mlc.list_artifacts(run.info.run_id, "checkpoints")}
        assert files, f"{run.info.run_name}: no checkpoint artifact"
        assert run.info.artifact_uri.startswith("mlflow-artifacts:/"), run.info.artifact_uri  # through the proxy
        assert 0.0 <= run.data.metrics[C.TEST_ACC] <= 1.0
    stored = s3_keys(stack, "mlflow")
    checkpoints = [k for k in stored if "/checkpoints/" in k]
    tune = s3_keys(stack, "tune")
    say(f"S3: {len(stored)} objects in s3://mlflow ({len(checkpoints)} checkpoints), {len(tune)} in s3://tune")
    assert len(checkpoints) >= len(trials) and any("checkpoint_" in k for k in tune)

    out = Path(tempfile.mkdtemp(prefix="mm-report-"))
    build = [str(BIN / "python"), "-m", "reports.build", QUICKSTART, *SMALL_SET, "--tracking-uri", stack.mlflow_url,
             "--out", str(out)]  # the report of that launch: its --set items
    report = subprocess.run(build, cwd=REPO, capture_output=True, text=True, env={**os.environ, **CLOSED_NETWORK_ENV},
                            timeout=600)
    say(f"$ {' '.join(build[1:])}: exit {report.returncode}, {sorted(p.name for p in out.iterdir())}")
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    table = (out / "main.md").read_text()  # every row of the quickstart's table, the tuned one (refit) included
    for label in ("Supervised", "FixMatch", "MutexMatch (default)", "MutexMatch (tuned)"):
        assert f"| {label} | " in table and "(n=1)" in table.split(f"| {label} | ")[1].splitlines()[0], table


def _wait(what: str, ok, timeout_s: float, stack: Stack):
    return until(ok, timeout_s, what, lambda: "".join(stack.logs(s) for s in ("ray-head", *WORKERS)), poll_s=2.0)


def _running_with_checkpoint(stack: Stack, min_step: int):
    """A RUNNING trial of the fault launch whose last logged evaluation is at ``min_step`` or later."""
    from orchestration import contract as C

    for run in launch_runs(stack, FAULT_SET[1::2])[1]:
        if run.info.status == "RUNNING" and int(run.data.tags.get(C.LAST_STEP, "0")) >= min_step:
            return run
    return None


def test_4_worker_kill_head_kill_resume_and_an_mlflow_outage_lose_nothing(stack):
    from orchestration import contract as C

    overrides = FAULT_SET[1::2]
    fault_args = [QUICKSTART, "--smoke", *FAULT_SET, *CLUSTER_ARGS, "--max-failures", "3"]
    job = submit(stack, *fault_args, wait=False)
    assert job.returncode == 0, job.stdout + job.stderr

    # (a) a worker dies in the middle of a trial that has checkpoints: the trial continues on the other worker
    victim = _wait("a RUNNING trial with two evaluations", lambda: _running_with_checkpoint(stack, 2 * FAULT_EVAL), 600,
                   stack)
    host = attempts(victim)[-1][0]
    assert host in WORKERS, attempts(victim)
    other = next(w for w in WORKERS if w != host)
    step = victim.data.tags[C.LAST_STEP]
    docker("kill", stack.container(host))
    say(f"docker kill {host} while {victim.info.run_name} was at step {step}")

    def moved():
        run = client(stack).get_run(victim.info.run_id)
        return run if len(attempts(run)) >= 2 and attempts(run)[1][0] == other else None

    resumed = _wait(f"{victim.info.run_name} restarted on {other}", moved, 900, stack)
    say(f"{victim.info.run_name} attempts (host, start step, tune checkpoint): {attempts(resumed)}")
    host2, start2, checkpoint2 = attempts(resumed)[1]
    assert int(start2) > 0 and checkpoint2 == "yes", attempts(resumed)  # from its checkpoint, not from step 0

    # (b) the head dies (and the job's driver with it): restart it, bring the killed worker back, --resume
    _wait("the restarted trial logging an evaluation", lambda: _running_with_checkpoint(
        stack, int(start2) + FAULT_EVAL), 600, stack)
    docker("kill", stack.container("ray-head"))
    say("docker kill ray-head (the sweep's driver runs there)")
    stack.restart("ray-head")
    docker("start", stack.container(host))
    stack.wait_workers(len(WORKERS))
    say(f"ray-head restarted, workers back: {sorted(stack.alive_nodes().values())}")

    # (c) during the resumed sweep, the MLflow server is stopped for 30 s
    before = _last_steps(stack)
    resume = _ResumeInBackground(stack, [*fault_args, "--resume"])
    _wait("the resumed sweep logging a new evaluation", lambda: _last_steps(stack) != before, 600, stack)
    docker("stop", stack.container("mlflow"))
    say("docker stop mlflow; 30 s without the tracking server")
    time.sleep(30)
    stack.restart("mlflow")
    say("docker start mlflow")
    job = resume.wait()
    output = job.stdout + job.stderr
    say(f"--resume: exit {job.returncode}")
    assert job.returncode == 0 and "succeeded" in output, output[-8000:]

    parents, trials = launch_runs(stack, overrides)
    for run in sorted(trials, key=lambda r: r.info.run_name):
        say(f"  {run.info.run_name}: {run.info.status}, attempts {attempts(run)}")
    planned = planned_trials(overrides, smoke=True)
    assert len(trials) == planned and len({r.info.run_name for r in trials}) == planned, [r.info.run_name for r in trials]
    assert {r.info.status for r in trials} == {"FINISHED"}
    mlc = client(stack)
    exp = mlc.get_experiment_by_name("quickstart")
    running = mlc.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
    assert not running, [r.info.run_name for r in running]
    # every evaluation of every trial logged exactly once, through the worker kill, the head kill and the outage
    expected_steps = list(range(FAULT_EVAL, FAULT_ITERATIONS + 1, FAULT_EVAL))
    for run in trials:
        steps = [m.step for m in mlc.get_metric_history(run.info.run_id, C.TEST_ACC)]
        assert sorted(steps) == expected_steps, (run.info.run_name, steps)
    say(f"MLflow: {len(trials)} trial runs for {len(trials)} trials, every evaluation logged once, none RUNNING")


SPAN_SET = ["--set", "resources.workers=2", "--set", "resources.cpu=1", *FAULT_SET]


def _train_workers(stack: Stack, service: str) -> int:
    """Ray Train worker processes (``ray::RayTrainWorker``) in one container."""
    code = ("import pathlib\nn = 0\nfor p in pathlib.Path('/proc').glob('[0-9]*/cmdline'):\n    try:\n"
            "        n += 'RayTrainWorker' in p.read_bytes().decode(errors='ignore')\n    except OSError:\n"
            "        pass\nprint(n)")
    return int(docker("exec", stack.container(service), "python", "-c", code).strip() or 0)


def test_5_a_trial_spans_both_worker_containers_and_survives_losing_one(stack):
    from orchestration import contract as C

    overrides = SPAN_SET[1::2]
    job = _ResumeInBackground(stack, [QUICKSTART, "--smoke", *SPAN_SET, *CLUSTER_ARGS, "--max-failures", "3"])

    def spanning_run():
        for run in launch_runs(stack, overrides)[1]:
            if run.info.status == "RUNNING" and int(run.data.tags.get(C.LAST_STEP, "0")) >= 2 * FAULT_EVAL:
                return run if all(_train_workers(stack, w) for w in WORKERS) else None
        return None

    victim = _wait("a 2-worker trial with two evaluations, a rank in each worker", spanning_run, 900, stack)
    assert victim.data.tags[C.attempt_tag(1, "world_size")] == "2", victim.data.tags
    docker("kill", stack.container(WORKERS[1]))
    say(f"docker kill {WORKERS[1]} while {victim.info.run_name} was at step {victim.data.tags[C.LAST_STEP]}")
    time.sleep(10)
    docker("start", stack.container(WORKERS[1]))
    stack.wait_workers(len(WORKERS))

    result = job.wait()
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "succeeded" in output, output[-8000:]
    parents, trials = launch_runs(stack, overrides)
    run = client(stack).get_run(victim.info.run_id)
    say(f"{run.info.run_name}: attempts {attempts(run)}")
    assert len(attempts(run)) >= 2 and attempts(run)[1][2] == "yes" and int(attempts(run)[1][1]) > 0
    assert len(trials) == planned_trials(overrides, smoke=True) and {r.info.status for r in trials} == {"FINISHED"}
    expected_steps = list(range(FAULT_EVAL, FAULT_ITERATIONS + 1, FAULT_EVAL))
    for r in trials:
        steps = [m.step for m in client(stack).get_metric_history(r.info.run_id, C.TEST_ACC)]
        assert sorted(steps) == expected_steps, (r.info.run_name, steps)  # logged once, through the lost worker


def _last_steps(stack: Stack) -> dict[str, str]:
    from orchestration import contract as C

    return {r.info.run_id: r.data.tags.get(C.LAST_STEP, "") for r in launch_runs(stack, FAULT_SET[1::2])[1]}


class _ResumeInBackground:
    """`ray job submit ... --resume`, blocking, in a thread so that the test can stop MLflow meanwhile."""

    def __init__(self, stack: Stack, args: list[str]):
        import threading

        self.result: subprocess.CompletedProcess | None = None
        self.thread = threading.Thread(target=lambda: setattr(self, "result", submit(stack, *args)), daemon=True)
        self.thread.start()

    def wait(self) -> subprocess.CompletedProcess:
        self.thread.join(timeout=1800)
        assert self.result is not None, "the resumed job did not finish within 30 min"
        return self.result


# Issue 31's launch: the same command every time (--resume auto, retries without end), long smoke trials again
# (other --set items than test 4's, so its launch is its own).
AUTO_ITERATIONS = FAULT_ITERATIONS + FAULT_EVAL
AUTO_SET = ["--set", f"smoke.train.iterations={AUTO_ITERATIONS}", "--set", f"smoke.train.eval_interval={FAULT_EVAL}"]


def _auto_trial(stack: Stack, min_step: int, status: str = "RUNNING"):
    from orchestration import contract as C

    for run in launch_runs(stack, AUTO_SET[1::2])[1]:
        if run.info.status == status and int(run.data.tags.get(C.LAST_STEP, "0")) >= min_step:
            return run
    return None


def test_6_sigterm_to_a_trial_then_the_head_killed_and_the_same_command_resubmitted(stack):
    """Issue 31: a trial container's trial process sent SIGTERM writes the step's checkpoint within seconds and
    continues from that step; the head killed mid-sweep and the same job command (``--resume auto``) resubmitted
    finishes with no duplicate runs and no checkpointed trial restarted from step 0; the command once more trains
    nothing."""
    from orchestration import contract as C

    args = [QUICKSTART, "--smoke", *AUTO_SET, *CLUSTER_ARGS, "--max-failures", "-1", "--resume", "auto"]
    job = submit(stack, *args, wait=False)
    assert job.returncode == 0, job.stdout + job.stderr

    # (a) SIGTERM to one trial's process in its worker container, between evaluations
    victim = _wait("a RUNNING trial with an evaluation", lambda: _auto_trial(stack, FAULT_EVAL), 600, stack)
    host, pid = attempts(victim)[-1][0], victim.data.tags[C.WORKER_PID]
    # the image has no kill binary (Debian minbase, no procps): the image's python sends the signal
    docker("exec", stack.container(host), "python", "-c", f"import os, signal; os.kill({int(pid)}, signal.SIGTERM)")
    sent = time.monotonic()
    say(f"kill -TERM {pid} in {host} ({victim.info.run_name} at step {victim.data.tags[C.LAST_STEP]})")
    ended = _wait("the signalled trial's checkpoint", lambda: client(stack).get_run(victim.info.run_id).data.tags.get(
        C.ENDED_BY, "").startswith("signal SIGTERM at step") or None, 120, stack)
    assert ended and time.monotonic() - sent < 30, "no checkpoint within 30 s of SIGTERM"
    step = int(client(stack).get_run(victim.info.run_id).data.tags[C.ENDED_BY].rsplit(" ", 1)[1])
    say(f"checkpoint of step {step} written {time.monotonic() - sent:.0f} s after the signal")
    again = _wait("the signalled trial's next attempt", lambda: (lambda r: r if len(attempts(r)) >= 2 else None)(
        client(stack).get_run(victim.info.run_id)), 600, stack)
    assert attempts(again)[1][1:] == (str(step), "yes"), attempts(again)  # from the signal's step, not an evaluation

    # (b) the head dies with the driver; the same command is submitted again
    _wait("a RUNNING trial with two evaluations", lambda: _auto_trial(stack, 2 * FAULT_EVAL), 600, stack)
    docker("kill", stack.container("ray-head"))
    say("docker kill ray-head (the sweep's driver runs there)")
    stack.restart("ray-head")
    stack.wait_workers(len(WORKERS))
    job = submit(stack, *args)
    output = job.stdout + job.stderr
    assert job.returncode == 0 and "succeeded" in output and "--resume auto: continuing launch" in output, \
        output[-8000:]

    parents, trials = launch_runs(stack, AUTO_SET[1::2])
    for run in sorted(trials, key=lambda r: r.info.run_name):
        say(f"  {run.info.run_name}: {run.info.status}, attempts {attempts(run)}")
    planned = planned_trials(AUTO_SET[1::2], smoke=True)
    assert len(parents) == 1, [p.info.run_id for p in parents]  # continued, not a second launch
    assert len(trials) == planned and len({r.info.run_name for r in trials}) == planned  # no duplicate runs
    assert {r.info.status for r in trials} == {"FINISHED"}
    for run in trials:  # a later attempt that had a checkpoint never started from step 0
        assert all(int(start) > 0 for _, start, ckpt in attempts(run)[1:] if ckpt == "yes"), attempts(run)
        steps = [m.step for m in client(stack).get_metric_history(run.info.run_id, C.TEST_ACC)]
        assert sorted(steps) == list(range(FAULT_EVAL, AUTO_ITERATIONS + 1, FAULT_EVAL)), (run.info.run_name, steps)

    # (c) the same command on the finished sweep trains nothing
    job = submit(stack, *args)
    output = job.stdout + job.stderr
    assert job.returncode == 0 and "nothing of it is trained again" in output, output[-4000:]
    assert len(launch_runs(stack, AUTO_SET[1::2])[1]) == planned


# Issue 44: the worked example of docs/plugins.md (its sweep: fixmatch and the plugin's myfixmatch on the plugin's
# mydigits with its tiny_cnn), one fold of short trials. The image holds mutexmatch, orchestration, reports and
# experiments only (.dockerignore), so no container has my_methods until the sweep ships it.
PLUGIN_EXAMPLE = REPO / "docs" / "plugin_example"
PLUGIN_SET = ["--set", "folds=[0]", "--set", "base.train.iterations=20", "--set", "base.train.eval_interval=10"]
SHIPPED = "/tmp/ray/session_*/runtime_resources/py_modules_files/*/my_methods/methods.py"   # Ray's copy on a node


def _plugin_on(stack: Stack, service: str) -> tuple[bool, list[str]]:
    """(whether ``import my_methods`` finds it, Ray's copies of it) in one container."""
    code = ("import glob, importlib.util, json, sys; "
            "print(json.dumps([importlib.util.find_spec('my_methods') is not None, glob.glob(sys.argv[1])]))")
    importable, copies = json.loads(docker("exec", stack.container(service), "python", "-c", code, SHIPPED))
    return importable, copies


def test_7_a_plugin_the_workers_never_had_is_shipped_and_trained(stack, tmp_path):
    """Issue 44 acceptance: the user's research folder (the plugin package and its sweep YAML, outside the
    checkout) is the job's working directory; the driver on the head ships ``./my_methods`` to the trials, which
    train ``myfixmatch`` on the worker containers, and the report built on the host has its row."""
    import shutil

    from orchestration import contract as C

    research = tmp_path / "research"
    shutil.copytree(PLUGIN_EXAMPLE, research, ignore=shutil.ignore_patterns("__pycache__", "outputs", "data"))
    for service in ("ray-head", *WORKERS):
        assert _plugin_on(stack, service) == (False, []), service   # not in the image, not shipped before

    job = submit(stack, "sweep.yaml", *PLUGIN_SET, *CLUSTER_ARGS, cwd=research)
    output = job.stdout + job.stderr
    say(f"plugin sweep: exit {job.returncode}")
    assert job.returncode == 0 and "succeeded" in output, output[-6000:] + stack.logs("ray-head")

    parents, trials = launch_runs(stack, PLUGIN_SET[1::2], experiment="my-methods")
    for run in sorted(trials, key=lambda r: r.info.run_name):
        say(f"  {run.info.run_name}: {run.info.status}, ran on {attempts(run)}, "
            f"{C.PLUGIN_CODE}={run.data.tags.get(C.PLUGIN_CODE)}")
    assert len(parents) == 1 and len(trials) == 2 and {r.info.status for r in trials} == {"FINISHED"}
    hosts = {a[0] for r in trials for a in attempts(r)}
    assert hosts and hosts <= set(WORKERS), hosts
    mine = [r for r in trials if r.data.params.get("algorithm.name") == "myfixmatch"]
    assert len(mine) == 1 and mine[0].data.tags.get(C.PLUGIN_CODE, "").startswith("my_methods="), \
        [(r.info.run_name, r.data.params.get("algorithm.name")) for r in trials]
    shipped = {w: _plugin_on(stack, w)[1] for w in hosts}
    say(f"Ray's copies of the plugin on the workers that trained: {shipped}")
    assert all(shipped.values()), shipped   # it came through the runtime environment

    out = tmp_path / "report"
    build = [str(BIN / "python"), "-m", "reports.build", "sweep.yaml", *PLUGIN_SET, "--tracking-uri",
             stack.mlflow_url, "--out", str(out)]
    report = subprocess.run(build, cwd=research, capture_output=True, text=True,
                            env={**os.environ, **CLOSED_NETWORK_ENV}, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    table = (out / "main.md").read_text()
    say(f"report:\n{table}")
    assert "| myfixmatch | " in table and "| fixmatch | " in table, table
