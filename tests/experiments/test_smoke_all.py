"""``python -m orchestration.sweep experiments/<X>.yaml --smoke`` completes for every experiment YAML, on tiny
generated datasets in the real on-disk formats (:mod:`mutexmatch.data.fake`), with a real local Ray and a real MLflow
SQLite store: every cell runs a few steps on its first fold and ends FINISHED with test accuracy logged.

The YAMLs are run unchanged. Their ``data.root`` is the relative ``data``, which the sweep resolves against the
folder it is started in, so each sweep is started in a project folder whose ``data`` is the generated root. The
paper-scale YAMLs request GPUs; ``--gpu-policy drop`` runs them on this CPU-only Ray.

Heavy (26.5 min on an idle 2-core CPU, 15 YAMLs, each cell a separate trial): outside CI's budget, run by
``make test-heavy`` — except the YAMLs in ``IN_CI``, small sweeps on one generated image folder, which CI runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from mutexmatch.data.fake import write_fake_root
from orchestration.spec.sweepfile import expand_cells, load_spec

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "experiments").glob("*.yaml"))
TIMEOUT_S = 3600
IN_CI = {"cifar10_cpu.yaml"}  # read only their image folder: no fake root needed
PARAMS = [pytest.param(p, id=p.stem, marks=() if p.name in IN_CI else pytest.mark.heavy) for p in SPECS]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory, spec_imagefolders) -> Path:
    """A project folder with the YAMLs' image folders; :func:`_fake_root` adds every other dataset when needed."""
    folder = tmp_path_factory.mktemp("smoke-project")
    spec_imagefolders(folder)
    return folder


def _fake_root(project: Path) -> None:
    """Every built-in dataset in ``<project>/data``, generated once (digits comes from scikit-learn)."""
    if not (project / "data" / "cifar10").exists():
        write_fake_root(project / "data")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # a local Ray per sweep, never a cluster the machine may know about
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
                "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
    return env


def _run(cmd: list[str], cwd: Path) -> tuple[int, str]:
    """Run in its own process group so that a timeout can end everything it started (by group id)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -9, out
    return proc.returncode, out


@pytest.mark.parametrize("path", PARAMS)
def test_smoke_sweep_completes_every_cell(project: Path, path: Path) -> None:
    if path.name not in IN_CI:
        _fake_root(project)
    uri = f"sqlite:///{project / 'mlflow.db'}"
    spec = load_spec(path, project)
    try:
        _check_sweep(project, path, spec, uri)
    finally:
        # Tune's checkpoints and MLflow's artifacts of one sweep are not needed by the next; kept, the WRN-28-8
        # sweeps alone leave tens of GB behind.
        shutil.rmtree(project / "ray_results" / spec.name, ignore_errors=True)
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(spec.name)
        for run in client.search_runs([exp.experiment_id], max_results=5000) if exp is not None else []:
            uri_path = run.info.artifact_uri
            if uri_path.startswith("file://"):  # <project>/mlruns/<run id>/artifacts
                shutil.rmtree(Path(uri_path[len("file://"):]).parent, ignore_errors=True)


def _check_sweep(project: Path, path: Path, spec, uri: str) -> None:
    code, out = _run([sys.executable, "-m", "orchestration.sweep", str(path), "--smoke", "--gpu-policy", "drop",
                      "--tracking-uri", uri, "--storage", str(project / "ray_results")], project)
    assert code == 0, out[-6000:]

    cells = {c.id for c in expand_cells(spec)}
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(spec.name)
    runs = client.search_runs([exp.experiment_id], "tags.`mutexmatch.kind` = 'smoke'", max_results=5000)
    by_cell = {r.data.tags["mutexmatch.cell"]: r for r in runs}
    assert set(by_cell) == cells, sorted(cells ^ set(by_cell))
    for cell, run in by_cell.items():
        assert run.info.status == "FINISHED", cell
        assert 0.0 <= run.data.metrics["test/acc"] <= 1.0, cell
        assert run.data.tags["mutexmatch.fold"] == str(spec.folds[0])
