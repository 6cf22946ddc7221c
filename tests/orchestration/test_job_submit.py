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
from pathlib import Path

import pytest
from mlflow import MlflowClient

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
        submit = subprocess.run(
            [RAY, "job", "submit", "--address", f"http://127.0.0.1:{dash}", "--working-dir", str(REPO), "--",
             sys.executable, "-m", "orchestration.sweep", str(spec), "--tracking-uri", uri, "--storage",
             str(tmp_path / "ray_results"), "--smoke"],
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
