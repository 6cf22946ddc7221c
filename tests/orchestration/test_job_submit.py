"""``ray job submit``: a real ``ray start --head`` bound to 127.0.0.1 (token auth off, its own temp dir, explicit free
ports), a smoke sweep submitted with ``--working-dir`` (the repository, minus what ``.rayignore`` excludes), the
results checked in MLflow, and the cluster stopped by process id (``ray stop`` would stop every Ray of this user)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import json
import re

import pytest
from mlflow import MlflowClient

from orchestration.runtime.jobs import JOB_CONFIG_ENV, check_job_paths, require_packages
from orchestration.submit import COMMIT_ENV, submit_command
from orchestration.trial.tracking import git_commit

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))

SPEC = """
name: jobs
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  train: {{iterations: 40, eval_interval: 20}}
folds: [0, 1]
axes:
  method:
    supervised: {{algorithm: {{name: supervised}}}}
    fixmatch: {{algorithm: {{name: fixmatch}}}}
resources: {{cpu: 1, gpu: 0}}
"""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (the cluster's private temp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _as_job(monkeypatch, folder: Path, working_dir: bool = True) -> None:
    """This process as Ray's job supervisor starts an entrypoint: the job config in the environment, the current
    directory its temporary copy of --working-dir."""
    env = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"} if working_dir else {}, "metadata": {}}
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps(env))
    monkeypatch.chdir(folder)


def test_a_store_inside_the_jobs_temporary_folder_is_refused_with_the_fix(tmp_path, monkeypatch):
    job = tmp_path / "_ray_pkg_0123"
    job.mkdir()
    _as_job(monkeypatch, job)
    shared = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    for uri, storage, flag in ((f"sqlite:///{job / 'mlflow.db'}", str(tmp_path / "rr"), "--tracking-uri"),
                               (shared, str(job / "ray_results"), "--storage")):
        with pytest.raises(ValueError, match=rf"^{flag}: .* is inside this job's temporary copy of the working "
                                             rf"directory .*; pass {flag} "):
            check_job_paths(uri, storage)
    check_job_paths(shared, str(tmp_path / "rr"))
    check_job_paths("http://127.0.0.1:5000", "s3://bucket/sweeps")
    _as_job(monkeypatch, job, working_dir=False)   # no upload: the folder is the user's own
    check_job_paths(f"sqlite:///{job / 'mlflow.db'}", str(job / "ray_results"))
    monkeypatch.delenv(JOB_CONFIG_ENV)             # not a job at all
    check_job_paths(f"sqlite:///{job / 'mlflow.db'}", str(job / "ray_results"))


def test_the_cli_refuses_the_default_store_in_a_job_before_ray_starts(tmp_path, data_root, sweep_env):
    spec = tmp_path / "jobs.yaml"
    spec.write_text(SPEC.format(root=data_root))
    env = {**sweep_env, JOB_CONFIG_ENV: json.dumps({"runtime_env": {"working_dir": "gcs://x.zip"}})}
    proc = subprocess.run([sys.executable, "-m", "orchestration.sweep", "jobs.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: --tracking-uri: {tmp_path.resolve() / 'mlflow.db'} is inside this job's temporary copy of the working "
        f"directory ({tmp_path.resolve()}), which Ray deletes with the job, so the runs would be lost; pass "
        "--tracking-uri sqlite:////abs/path/mlflow.db on a disk every node shares, or http://host:5000 (an mlflow "
        "server)"]
    assert not (tmp_path / "mlflow.db").exists() and "Ray" not in proc.stdout


def test_a_missing_package_is_one_line_naming_the_python_and_the_fix(monkeypatch, capsys):
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    with pytest.raises(SystemExit) as exit_:
        require_packages(("json", "no_such_package_mm"))
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: no_such_package_mm not importable by the Ray head's Python ({sys.executable}); "
                           "fix: start Ray from the project's environment (`source .venv/bin/activate && ray start")
    require_packages(("json",))


def test_submit_hands_the_commit_to_the_job():
    cmd = submit_command(["--address", "http://127.0.0.1:8265", "--working-dir", ".", "--", "python", "-m",
                          "orchestration.sweep", "x.yaml"], "0123abc")
    assert cmd[1:3] == ["job", "submit"] and cmd[cmd.index("--"):] == ["--", "python", "-m", "orchestration.sweep",
                                                                       "x.yaml"]
    assert json.loads(cmd[cmd.index("--runtime-env-json") + 1]) == {"env_vars": {COMMIT_ENV: "0123abc"}}
    kept = submit_command(["--runtime-env-json", '{"env_vars": {"A": "1"}, "pip": []}', "--", "python"], "c")
    assert json.loads(kept[kept.index("--runtime-env-json") + 1]) == {"env_vars": {"A": "1", COMMIT_ENV: "c"},
                                                                      "pip": []}
    for bad in (["--address", "x"], ["--", ], ["--runtime-env-json", "[1]", "--", "python"]):
        with pytest.raises(ValueError):
            submit_command(bad, "c")


def test_a_runtime_env_file_is_read_by_the_projects_one_yaml_reader(tmp_path):
    """Issue 40 item 4: every YAML the project parses goes through mutexmatch.yamlfile (its numbers, its one-line
    errors naming the file)."""
    path = tmp_path / "env.yaml"
    path.write_text("env_vars: {A: '1'}\nconfig: {setup_timeout_seconds: 6e2}\n")
    cmd = submit_command(["--runtime-env", str(path), "--", "python"], "c")
    assert json.loads(cmd[cmd.index("--runtime-env-json") + 1]) == {"env_vars": {"A": "1", COMMIT_ENV: "c"},
                                                                    "config": {"setup_timeout_seconds": 600.0}}
    path.write_text("env_vars: {A: '1'}\nenv_vars: {B: '2'}\n")
    with pytest.raises(ValueError, match=r"^--runtime-env '.*env.yaml': not valid YAML at line 2, column 1: "
                                         r"duplicate key 'env_vars'"):
        submit_command(["--runtime-env", str(path), "--", "python"], "c")


def test_submit_to_an_address_where_nothing_answers_is_one_line_before_ray_starts(monkeypatch, capsys):
    """Issue 33 (submit-dead-address): ``ray job submit`` retried, then printed 107 lines ending in a ConnectionError."""
    from orchestration import submit

    monkeypatch.setattr(submit.os, "execvp", lambda *a: pytest.fail("ray job submit was started"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    start = time.monotonic()
    assert submit.main(["--address", "http://127.0.0.1:1", "--", "python", "-V"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --address http://127.0.0.1:1: nothing answers there (Connection refused); start "
                           "the Ray head")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(ValueError, match=r"^\$RAY_ADDRESS 127.0.0.1:1: nothing answers there"):
        submit.check_address(["--", "python"])
    assert time.monotonic() - start < 5
    submit.check_address(["--address", "ray://127.0.0.1:1", "--", "python"])  # Ray's own client protocol: not tried


def _stop_a_running_job(ray_job, uri: str, spec: Path, tmp_path: Path, procs) -> str:
    """Submit a long sweep without waiting, let a trial log an evaluation, ``ray job stop`` it; the job's logs."""
    long = spec.with_name("jobstop.yaml")
    long.write_text(spec.read_text().replace("name: jobs", "name: jobstop").replace("iterations: 40",
                                                                                     "iterations: 100000"))
    spec = long
    sub = ray_job("submit", "--no-wait", "--working-dir", str(REPO), "--", sys.executable, "-m", "orchestration.sweep",
                  str(spec), "--tracking-uri", uri, "--storage", str(tmp_path / "ray_results"))
    job_id = re.search(r"Job '([^']+)' submitted successfully", sub).group(1)
    client = MlflowClient(uri)

    def evaluated():
        exp = client.get_experiment_by_name("jobstop")
        runs = client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'") if exp else []
        return [r for r in runs if "test/acc" in r.data.metrics]

    procs["wait_for"](evaluated, 300, "a RUNNING trial of the job with an evaluation", interval=1.0)
    ray_job("stop", job_id)
    return ray_job("logs", job_id)


@pytest.mark.heavy  # heavy: 134 s; make test-cluster submits through ray job submit for real
@pytest.mark.slow
def test_ray_job_submit_runs_a_sweep_on_a_started_cluster(tmp_path, data_root, sweep_env, procs):
    temp_dir = Path(tempfile.mkdtemp(prefix="rj", dir="/tmp"))  # short: Ray's socket paths must stay < 108 chars
    gcs, dash, nm, om, client_port, agent, agent_grpc, metrics, renv = free_ports(9)
    env = {**sweep_env, "RAY_AUTH_MODE": "disabled"}
    start = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}", "--dashboard-host=127.0.0.1",
             f"--dashboard-port={dash}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
             f"--ray-client-server-port={client_port}", f"--dashboard-agent-listen-port={agent}",
             f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
             f"--runtime-env-agent-port={renv}", "--num-cpus=2", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    spec = tmp_path / "jobs.yaml"
    spec.write_text(SPEC.format(root=data_root))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cluster: list[int] = []
    try:
        started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
        cluster = processes_mentioning(str(temp_dir))
        assert started.returncode == 0, started.stdout + started.stderr
        # through the wrapper: the commit is read before the upload drops .git
        submit = subprocess.run(
            [sys.executable, "-m", "orchestration.submit", "--address", f"http://127.0.0.1:{dash}", "--working-dir",
             str(REPO), "--", sys.executable, "-m", "orchestration.sweep", str(spec), "--tracking-uri", uri,
             "--storage", str(tmp_path / "ray_results"), "--smoke"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=400)
        out = submit.stdout + submit.stderr
        assert submit.returncode == 0, out
        assert "succeeded" in out and "[sweep] finished" in out
        # the uploaded working dir is the code, not the venv, data, outputs or stores
        packages = [p for p in (temp_dir / "session_latest" / "runtime_resources" / "working_dir_files").iterdir()
                    if p.is_dir()]
        assert packages
        for pkg in packages:
            assert (pkg / "orchestration" / "sweep.py").is_file()
            for excluded in (".venv", ".git", "data", "outputs", "mlflow.db", "mlruns", "ray_results"):
                assert not (pkg / excluded).exists(), excluded

        def ray_job(*args: str) -> str:
            proc = subprocess.run([RAY, "job", args[0], "--address", f"http://127.0.0.1:{dash}", *args[1:]], env=env,
                                  cwd=REPO, capture_output=True, text=True, timeout=400)
            return proc.stdout + proc.stderr

        # the default store would be the job's temporary folder: refused before any trial
        refused = ray_job("submit", "--working-dir", str(REPO), "--", sys.executable, "-m", "orchestration.sweep",
                          str(spec))
        assert "is inside this job's temporary copy of the working directory" in refused, refused
        assert "failed" in refused.lower()
        stopped_logs = _stop_a_running_job(ray_job, uri, spec, tmp_path, procs)
    finally:
        everything = set(cluster) | set(processes_mentioning(str(temp_dir)))
        for pid in list(everything):
            everything |= set(procs["descendants"](pid))  # workers rename themselves (ray::IDLE)
        procs["kill"](sorted(everything))
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not [p for p in everything if procs["alive"](p)]

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("jobs")
    runs = client.search_runs([exp.experiment_id], "", max_results=100)
    trials = [r for r in runs if r.data.tags.get("mutexmatch.role") == "trial"]
    assert sorted(r.info.run_name for r in trials) == ["fixmatch · fold 0 · smoke", "supervised · fold 0 · smoke"]
    assert {(r.info.status, r.data.tags["mutexmatch.kind"]) for r in trials} == {("FINISHED", "smoke")}
    # --smoke: the default smoke overrides (4 iterations, evaluation every 2)
    for r in trials:
        assert [m.step for m in client.get_metric_history(r.info.run_id, "test/acc")] == [2, 4]
        assert r.data.params["train.batch_size"] == "4" and r.data.params["train.mu"] == "2"
    parent = [r for r in runs if r.data.tags.get("mutexmatch.role") == "sweep"]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    assert {r.data.tags["mutexmatch.git_commit"] for r in runs} == {git_commit(REPO)} != {"unknown"}
    # `ray job stop`: SIGTERM, SIGKILL 3 s later; nothing stays RUNNING and the resume command was printed
    stop = client.get_experiment_by_name("jobstop")
    left = client.search_runs([stop.experiment_id], "", max_results=100)
    assert left and {r.info.status for r in left} == {"KILLED"}, [(r.info.run_name, r.info.status) for r in left]
    assert "To resume this launch" in stopped_logs and "--resume" in stopped_logs, stopped_logs[-3000:]
