"""docker/slurm/sweep.sbatch honours the time-limit signal at any moment (issue 40 item 1), in CI without Slurm.

The script runs in bash as Slurm would start it, with stand-ins for what it starts: ``scontrol`` (records a
requeue), ``ray start`` and ``mlflow server`` (sleep), the project's Python (the health check answers; the driver
and the report sleep like a Python still importing, with no handler: USR1's default action ends them with 138,
what make test-slurm saw). USR1 goes to the batch shell (``--signal=B:USR1``) while Ray starts, just as the
driver starts, and while the report builds; every time the job is requeued. A few seconds each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "slurm" / "sweep.sbatch"

STANDINS = {
    "scontrol": """#!/bin/bash
case $1 in
  show) echo node1 ;;
  requeue) echo "$2" >> "$MARKS/requeued" ;;
esac
""",
    "ray": """#!/bin/bash
touch "$MARKS/ray"
sleep "${RAY_START_S:-0}"
echo "Ray runtime started."
exec sleep 300
""",
    "mlflow": "#!/bin/bash\nexec sleep 300\n",
    "python": """#!/bin/bash
case $1 in
  -c) exit 0 ;;  # the MLflow health check
  -m) touch "$MARKS/$2"; [ "$2" = orchestration.sweep ] && [ -n "$DRIVER_RC" ] && exit "$DRIVER_RC"
      exec sleep 300 ;;  # a Python importing: USR1 ends it with 138
esac
""",
}


def _job(tmp_path: Path, **env: str) -> tuple[subprocess.Popen, Path]:
    bin_dir, marks = tmp_path / "bin", tmp_path / "marks"
    bin_dir.mkdir()
    marks.mkdir()
    for name, text in STANDINS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    job_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "MARKS": str(marks),
               "SLURM_JOB_ID": str(900000 + os.getpid() % 90000), "SLURM_SUBMIT_DIR": str(REPO),
               "SLURM_JOB_NODELIST": "node1", "SLURM_CPUS_PER_TASK": "2", "MM_PYTHON": str(bin_dir / "python"),
               "MM_WORKDIR": str(tmp_path / "work"), "MM_RAY_TMP": str(tmp_path), "MM_STOP_WAIT": "3", **env}
    job = subprocess.Popen(["bash", str(SCRIPT), "experiments/quickstart.yaml"], cwd=REPO, env=job_env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return job, marks


def _usr1_once(job: subprocess.Popen, mark: Path, timeout: float = 60) -> tuple[int, str]:
    """USR1 to the batch shell once ``mark`` exists; the job's exit status and output."""
    deadline = time.monotonic() + timeout
    try:
        while not mark.exists():
            assert job.poll() is None and time.monotonic() < deadline, (mark.name, job.poll())
            time.sleep(0.05)
        os.kill(job.pid, signal.SIGUSR1)
        out, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    return job.returncode, out


@pytest.mark.parametrize("when, mark, env, said", [
    ("Ray starting", "ray", {"RAY_START_S": "30"}, "before the sweep started"),
    ("the driver importing", "orchestration.sweep", {}, "the driver stopped with 138 after USR1"),
    ("the report building", "reports.build", {"DRIVER_RC": "0"}, "the report did not finish before the time limit"),
])
def test_usr1_at_any_moment_requeues_the_job(tmp_path, when, mark, env, said):
    job, marks = _job(tmp_path, **env)
    rc, out = _usr1_once(job, marks / mark)
    requeued = (marks / "requeued").read_text().split() if (marks / "requeued").exists() else []
    assert requeued and f"requeueing job {requeued[0]}" in out and said in out, f"USR1 while {when}:\n{out}"
    assert rc in (0, 143), out
    assert "error" not in out.lower(), out
