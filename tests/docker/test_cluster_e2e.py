"""End to end on loopback: the remote paths of docker/compose.yaml and the KubeRay manifests, with real servers.

A real `mlflow server` — docker/compose.yaml's own command line with a SQLite backend store instead of Postgres and
artifacts proxied to a local folder instead of MinIO — and a real `ray start --head` take the quickstart at smoke
size through `ray job submit --working-dir <repo>`, as the README submits table1. The runs, metrics and the proxied
checkpoint/weights artifacts are then read back through the server's REST API only, and compared with what the
server stored at its --artifacts-destination (proof that the artifacts went through the proxy).

Every process started here carries a marker variable in its environment; teardown (also after a failure) sends
SIGTERM, then SIGKILL, to each process that has it, by process id. `ray stop` is not used: it kills every Ray
process of the machine, including other sessions' clusters, and Ray's agents outlive a killed `ray start`.
Linux only (reads /proc).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = "experiments/quickstart.yaml"
BIN = Path(sys.executable).parent
MARKER_VAR = "MUTEXMATCH_E2E_MARKER"
CLOSED_NETWORK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}


# ----------------------------------------------------------------------------------------------------------------
# Processes: started with a marker, stopped by process id


def _env(marker: str, **extra: str) -> dict[str, str]:
    """The test's environment, closed network, this venv first on PATH (the job's `python` must be the venv's,
    as it is the image's in a container), and the marker that teardown finds the process tree by."""
    env = {**os.environ, **CLOSED_NETWORK_ENV, MARKER_VAR: marker, **extra}
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def _marked_pids(marker: str) -> list[int]:
    tag = f"{MARKER_VAR}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:  # exited meanwhile, or not ours to read
                continue
    return pids


def _running(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()  # a zombie has stopped
    except OSError:
        return False


def _stop_marked(marker: str, popen: subprocess.Popen | None, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process carrying ``marker``, SIGKILL the ones still running after ``grace_s``; returns the
    process ids that survived both."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p for p in _marked_pids(marker) if _running(p)]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_running(p) for p in pids):
            if popen is not None:
                popen.poll()  # reap our direct child so that it does not linger as a zombie
            time.sleep(0.2)
    if popen is not None:
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return [p for p in _marked_pids(marker) if _running(p)]


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (all held open together so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path} missing)"


def _wait_http_ok(url: str, popen: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            pytest.fail(f"{popen.args[:3]} exited with {popen.returncode} before {url} answered:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout_s:.0f} s:\n{_tail(log)}")


def _start(cmd: list[str], marker: str, env: dict[str, str], log: Path, cwd: Path,
           request: pytest.FixtureRequest) -> subprocess.Popen:
    with open(log, "w") as out:
        popen = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)

    def stop() -> None:
        survivors = _stop_marked(marker, popen)
        assert not survivors, f"processes of {cmd[:2]} survived SIGKILL: {survivors}"

    request.addfinalizer(stop)
    return popen


# ----------------------------------------------------------------------------------------------------------------
# Fixtures: a work folder, the MLflow server, the Ray head


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # Short and under /tmp: Ray's unix socket paths (inside --temp-dir) must stay under ~107 characters.
    path = Path(tempfile.mkdtemp(prefix="mm-e2e-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _compose_mlflow_command(port: int, artifacts: str) -> list[str]:
    """docker/compose.yaml's `mlflow server` command with the loopback substitutions; its other flags (notably
    --allowed-hosts) are kept, so this also proves the server starts and answers with them."""
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    command = list(compose["services"]["mlflow"]["command"])
    for flag, value in (("--artifacts-destination", artifacts), ("--host", "127.0.0.1"), ("--port", str(port)),
                        ("--workers", "1")):
        command[command.index(flag) + 1] = value
    assert command[0] == "mlflow"
    return [str(BIN / "mlflow"), *command[1:]]


@pytest.fixture(scope="module")
def servers(workdir: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The MLflow server and the Ray head, started together (their start-up dominates on a small machine)."""
    mlflow_port, gcs, dashboard, client, node_manager, object_manager, agent_http, agent_grpc, runtime_env, \
        metrics = _free_ports(10)

    artifacts = workdir / "mlartifacts"
    artifacts.mkdir()
    mlflow_marker = f"mlflow-{uuid.uuid4().hex}"
    # Like compose: the backend store through MLFLOW_BACKEND_STORE_URI; job runners off (they cost ~1.5 GB).
    mlflow_env = _env(mlflow_marker, MLFLOW_BACKEND_STORE_URI=f"sqlite:///{workdir / 'mlflow.db'}",
                      MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    mlflow_log = workdir / "mlflow-server.log"
    mlflow_popen = _start(_compose_mlflow_command(mlflow_port, artifacts.as_uri()), mlflow_marker, mlflow_env,
                          mlflow_log, workdir, request)

    ray_marker = f"ray-{uuid.uuid4().hex}"
    ray_cmd = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
               "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
               f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
               f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
               f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
               "--num-cpus=2", "--num-gpus=0", f"--object-store-memory={256 * 1024**2}", "--disable-usage-stats",
               f"--temp-dir={workdir / 'ray'}"]
    # A throwaway loopback cluster: no token (the compose stack and KubeRay run with RAY_AUTH_MODE=token).
    ray_env = _env(ray_marker, RAY_AUTH_MODE="disabled")
    ray_log = workdir / "ray-start.log"
    ray_popen = _start(ray_cmd, ray_marker, ray_env, ray_log, workdir, request)

    mlflow_url = f"http://127.0.0.1:{mlflow_port}"
    ray_address = f"http://127.0.0.1:{dashboard}"
    _wait_http_ok(f"{mlflow_url}/health", mlflow_popen, mlflow_log, timeout_s=180)
    _wait_http_ok(f"{ray_address}/api/gcs_healthz", ray_popen, ray_log, timeout_s=180)
    _wait_http_ok(f"{ray_address}/api/jobs/", ray_popen, ray_log, timeout_s=120)
    return {"mlflow_url": mlflow_url, "artifacts": artifacts, "mlflow_log": mlflow_log,
            "ray_address": ray_address, "ray_env": ray_env, "ray_temp_dir": workdir / "ray",
            "storage": workdir / "tune-storage"}


# ----------------------------------------------------------------------------------------------------------------
# MLflow REST


def _rest(base: str, route: str, body: dict[str, Any] | None = None, **query: Any) -> dict[str, Any]:
    """GET (or POST ``body`` as JSON) an MLflow REST route; ``query`` becomes the query string."""
    full = f"{base}{route}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(full, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _download(url: str, artifact_uri: str, path: str) -> bytes:
    """An artifact through the server's proxy (the route MLflow clients use for mlflow-artifacts:/ URIs)."""
    assert artifact_uri.startswith("mlflow-artifacts:/"), artifact_uri
    location = artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    with urllib.request.urlopen(f"{url}/api/2.0/mlflow-artifacts/artifacts/{location}/{path}", timeout=60) as resp:
        return resp.read()


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _artifact_files(url: str, run_id: str, path: str = "") -> list[str]:
    listing = _rest(url, "/api/2.0/mlflow/artifacts/list", run_id=run_id, path=path).get("files", [])
    files = []
    for entry in listing:
        files.extend(_artifact_files(url, run_id, entry["path"]) if entry["is_dir"] else [entry["path"]])
    return files


# ----------------------------------------------------------------------------------------------------------------


def test_quickstart_smoke_via_ray_job_submit_logs_runs_metrics_and_proxied_artifacts(servers):
    from orchestration.contract import trial_run_name
    from orchestration.spec.plan import build_plan
    from orchestration.spec.sweepfile import load_spec

    url = servers["mlflow_url"]
    spec = load_spec(REPO / QUICKSTART, REPO)
    expected = {trial_run_name(t.cell.levels, t.fold, t.kind): t for t in build_plan(spec, REPO, smoke=True).grid}
    assert expected

    started = time.monotonic()
    cmd = [str(BIN / "ray"), "job", "submit", "--address", servers["ray_address"], "--working-dir", str(REPO),
           "--", "python", "-m", "orchestration.sweep", QUICKSTART, "--smoke", "--tracking-uri", url,
           "--storage", str(servers["storage"])]
    job = subprocess.run(cmd, cwd=REPO, env=servers["ray_env"], capture_output=True, text=True, timeout=1500)
    output = job.stdout + job.stderr
    assert job.returncode == 0 and "succeeded" in output, \
        f"job failed after {time.monotonic() - started:.0f} s:\n{output[-8000:]}\n{_tail(servers['mlflow_log'])}"
    # The working-dir upload as the head node unpacked it: the code and experiments, no venv, and small. (The
    # driver and the trials run in this folder, so data/ — the dataset cache — is written there at run time.)
    (package,) = re.findall(r"Uploading package (gcs://_ray_pkg_\w+\.zip)", output)
    unpacked = servers["ray_temp_dir"] / "session_latest" / "runtime_resources" / "working_dir_files" / \
        package.removeprefix("gcs://").removesuffix(".zip")
    assert (unpacked / QUICKSTART).is_file() and (unpacked / "orchestration" / "sweep.py").is_file(), unpacked
    assert not (unpacked / ".venv").exists()
    size = sum(f.stat().st_size for f in unpacked.rglob("*")
               if f.is_file() and f.relative_to(unpacked).parts[0] != "data")
    assert size < 20 * 1024**2, f"working dir upload is {size / 1024**2:.1f} MiB"
    # Tune's experiment state went to the --storage given, not into the job's temporary working dir.
    assert any(servers["storage"].rglob("*")) and not (unpacked / "ray_results").exists()

    experiment = _rest(url, "/api/2.0/mlflow/experiments/get-by-name", experiment_name=spec.name)["experiment"]
    runs = _rest(url, "/api/2.0/mlflow/runs/search",
                 {"experiment_ids": [experiment["experiment_id"]], "max_results": 1000}).get("runs", [])
    parents = [r for r in runs if _tags(r).get("mutexmatch.role") == "sweep"]
    trials = [r for r in runs if _tags(r).get("mutexmatch.role") == "trial"]
    assert len(parents) == 1 and len(runs) == 1 + len(trials), [r["info"]["run_name"] for r in runs]
    parent = parents[0]["info"]
    assert parent["status"] == "FINISHED"
    spec_artifact = _download(url, parent["artifact_uri"], "spec.yaml")
    assert yaml.safe_load(spec_artifact) == yaml.safe_load((REPO / QUICKSTART).read_text())

    assert {r["info"]["run_name"] for r in trials} == set(expected)
    for run in trials:
        info, tags = run["info"], _tags(run)
        plan = expected[info["run_name"]]
        assert info["status"] == "FINISHED", info
        assert tags["mlflow.parentRunId"] == parent["run_id"]
        assert (tags["mutexmatch.kind"], tags["mutexmatch.cell"], tags["mutexmatch.fold"]) == \
               ("smoke", plan.cell.id, str(plan.fold))

        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert 0.0 <= metrics["test/acc"] <= 1.0 and metrics["train/loss"] == metrics["train/loss"]  # not NaN
        history = _rest(url, "/api/2.0/mlflow/metrics/get-history", run_id=info["run_id"],
                        metric_key="test/acc")["metrics"]
        steps = sorted(m["step"] for m in history)
        assert len(steps) == plan.evaluations and steps[-1] == plan.iterations, steps

        # Artifacts went through the proxy: the run's root is mlflow-artifacts:/, and what the REST API serves
        # is byte for byte what the server wrote under its --artifacts-destination.
        location = info["artifact_uri"].removeprefix("mlflow-artifacts:").lstrip("/")
        files = _artifact_files(url, info["run_id"])
        assert {"config.yaml", "split.json", "weights/best_model.pt", "weights/final_model.pt"} <= set(files), files
        final_checkpoint = f"checkpoints/ckpt_{plan.iterations:08d}.pt"  # the trainer's checkpoint of the last step
        assert final_checkpoint in files, files
        for path in ("weights/best_model.pt", "weights/final_model.pt", final_checkpoint):
            payload = _download(url, info["artifact_uri"], path)
            assert payload == (servers["artifacts"] / location / path).read_bytes(), path
            state = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
            tensors = [v for v in _leaves(state) if isinstance(v, torch.Tensor)]
            assert tensors and all(torch.isfinite(t).all() for t in tensors if t.is_floating_point()), path


def _leaves(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _leaves(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _leaves(value)
    else:
        yield node
