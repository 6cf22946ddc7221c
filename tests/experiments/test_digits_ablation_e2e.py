"""One ablation end to end on ``digits``: ``experiments/digits_lambda_sg.yaml`` (the SVHN-40 λ / stop-gradient table
at CPU scale), shortened to 20 steps and two folds, is swept with the real CLI (local Ray, MLflow SQLite) and its
table is rebuilt with ``python -m reports.build``: every one of the nine rows gets a mean ± std over the two folds.

Slow (a few minutes on a 2-core CPU); the full-length run is the README's command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "experiments" / "digits_lambda_sg.yaml"

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # this test's own process group
        out, _ = proc.communicate()
        return -9, out
    return proc.returncode, out


def test_digits_lambda_sg_sweep_and_report(tmp_path: Path) -> None:
    spec = yaml.safe_load(SPEC.read_text())
    spec["base"]["train"].update(iterations=20, eval_interval=10)
    spec["folds"] = [0, 1]
    short = tmp_path / "digits_lambda_sg.yaml"
    short.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    code, out = _run([sys.executable, "-m", "orchestration.sweep", str(short), "--tracking-uri", uri], tmp_path, 1800)
    assert code == 0, out[-6000:]
    code, out = _run([sys.executable, "-m", "reports.build", str(short), "--tracking-uri", uri, "--out",
                      str(tmp_path / "report"), "--format", "md"], tmp_path, 600)
    assert code == 0, out[-6000:]

    table = (tmp_path / "report" / "lambda_sg.md").read_text()
    labels = spec["tables"][0]["row_labels"]
    for level, label in labels.items():
        line = next((ln for ln in table.splitlines() if label in ln), None)
        assert line is not None, (level, table)
        assert "±" in line, (level, line)      # a mean ± std over the two folds, not a blank cell
