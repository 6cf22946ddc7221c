"""The SLURM route for real (issue 31 item 3), run by `make test-slurm` (marker ``slurm``; not part of `make test`).

docker/slurm/test-slurm.sh starts a one-node Slurm cluster (``SLURM_CONF``, ``MM_SLURM_TEST_DIR``) and runs this
file. Two jobs of docker/slurm/sweep.sbatch go in at once:

- job A (root): the quickstart at a small size with a time limit that falls mid-sweep. Slurm sends USR1
  (``--signal=B:USR1@...``), the script stops the driver resumably and runs ``scontrol requeue``; the job comes back
  after Slurm's requeue delay (about 2.5 min here) and finishes through ``--resume auto``. Checked: the job
  COMPLETED with Restarts >= 1; as many trial runs as planned trials, one per trial, all FINISHED, none left
  RUNNING; every evaluation of every trial in MLflow exactly once (a trial restarted from step 0 would log its
  evaluations again); at least one trial continued from a checkpoint after the requeue (attempt 2 starting after
  step 0), so the time limit did hit a running trial; the report built. Once A is requeued the test raises its
  limit (A_REQUEUED_LIMIT) so that the second run finishes on a loaded machine instead of requeueing again.
- job B (a second user, created here): a smaller sweep on the same node while A runs. Checked: both jobs were
  RUNNING at the same time, B COMPLETED, its store and artifacts were written by the second user's processes, and
  the two jobs used different port blocks and temp folders.
- job C (issue 40 item 1): B's small sweep whose time-limit signal falls during the driver's start-up. The moment
  the script starts the driver (its "sweep:" line), the test sends what Slurm sends at the limit, USR1 to the
  batch shell (``scancel --signal=USR1 --batch``; Slurm's own limit check runs every 30 s, too coarse to aim at a
  start-up of seconds). Checked: the driver stopped before its launch opened (its one line, or a status the script
  requeues anyway), the job was requeued, came back and COMPLETED, every trial FINISHED once.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "docker/slurm/sweep.sbatch"
QUICKSTART = "experiments/quickstart.yaml"
SECOND_USER = "mmslurm2"
# A: 3 grid trials, a 2-trial search and its refit, each 200 steps with an evaluation (and checkpoint) every 20
A_SET = ["--set", "folds=[0]", "--set", "base.train.iterations=200", "--set", "base.train.eval_interval=20",
         "--set", "search.n_trials=2", "--set", "search.base.train.iterations=200"]
A_ITERATIONS, A_EVAL = 200, 20
# USR1 4.5-5 min after A starts (Slurm checks signal times every ~30 s, so it may come early): mid-sweep on this
# machine (under load Ray and MLflow took 100 s to start and the driver 35 s more; a 200-step trial about a
# minute); the driver gets 60 s to stop (MM_STOP_WAIT) before the limit's SIGTERM 2 min later
A_SBATCH = ["--time=00:07:00", "--signal=B:USR1@120", "--cpus-per-task=2"]
A_STOP_WAIT = "60"
# Once requeued, A's limit is raised so that its second run finishes the sweep on a loaded 2-core machine: another
# time limit would only repeat the requeue already checked, at 2.5 min of Slurm's requeue delay each
A_REQUEUED_LIMIT = "00:20:00"
B_SET = ["--set", "folds=[0]", "--set", "base.train.iterations=40", "--set", "base.train.eval_interval=20",
         "--set", "search.n_trials=1", "--set", "search.base.train.iterations=40"]
B_SBATCH = ["--time=00:30:00", "--cpus-per-task=2"]
C_SBATCH = ["--time=00:30:00", "--cpus-per-task=2"]
DRIVER_STARTS = "] sweep: "   # sweep.sbatch's line just before it starts the driver
TIMEOUT_S = 30 * 60
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def say(msg: str) -> None:
    print(f"[slurm-test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MM_", "RAY_", "MLFLOW_"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_USAGE_STATS_REPORT_URL="http://127.0.0.1:9/",
               MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", SLURM_CONF=os.environ["SLURM_CONF"],
               MM_PYTHON=sys.executable, **extra)
    return env


def sbatch(workdir: Path, sbatch_args: list[str], sweep_args: list[str], user: str | None = None,
           **settings: str) -> str:
    cmd = ["sbatch", "--parsable", f"--output={workdir}/slurm-%j.out", *sbatch_args, SCRIPT, QUICKSTART, *sweep_args]
    if user:  # runuser keeps the environment given here (sbatch passes it on to the job)
        cmd = ["runuser", "-u", user, "--", *cmd]
    say("$ " + " ".join(cmd))
    out = subprocess.run(cmd, cwd=REPO, env=_env(MM_WORKDIR=str(workdir), **settings), capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return out.strip().split(";")[0]


def job_info(job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=True,
                         timeout=60, env=_env()).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def job_log(workdir: Path, job: str) -> str:
    path = workdir / f"slurm-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _second_user(root: Path) -> Path:
    if subprocess.run(["id", SECOND_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", SECOND_USER], check=True)
        say(f"created user {SECOND_USER}")
    workdir = root / SECOND_USER
    workdir.mkdir()
    entry = pwd.getpwnam(SECOND_USER)
    os.chown(workdir, entry.pw_uid, entry.pw_gid)
    return workdir


@contextmanager
def _python_reachable_by_others():
    """The second user runs the project's Python too; where it lies under a folder others may not enter (here:
    pyenv under /root, mode 700), that folder gets search permission (o+x: enter, not list) for the test, restored
    afterwards."""
    def stop(signum, frame):  # a SIGTERM (timeout, kill) still runs the finally below
        raise SystemExit(128 + signum)

    changed, previous = [], signal.signal(signal.SIGTERM, stop)
    try:
        for folder in reversed(Path(os.path.realpath(sys.executable)).parents):
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                changed.append((folder, mode))
                say(f"o+x on {folder} for the second user (restored at the end)")
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(mode)
        signal.signal(signal.SIGTERM, previous)


class SignalAtDriverStart(threading.Thread):
    """USR1 to job ``job``'s batch shell as soon as its log says the driver starts (polled every 0.1 s)."""

    def __init__(self, workdir: Path, job: str):
        super().__init__(daemon=True)
        self.workdir, self.job, self.sent_after = workdir, job, None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if DRIVER_STARTS in job_log(self.workdir, self.job):
                started = time.monotonic()
                subprocess.run(["scancel", "--signal=USR1", "--batch", self.job], check=True, timeout=60, env=_env())
                self.sent_after = time.monotonic() - started
                say(f"C: USR1 to the batch shell {self.sent_after:.1f} s after the driver's start")
                return
            time.sleep(0.1)


def _trial_runs(workdir: Path) -> tuple[list, list, object]:
    from mlflow import MlflowClient

    from orchestration import contract as C

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("quickstart")
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    parents = [r for r in runs if r.data.tags.get(C.ROLE) == C.ROLE_SWEEP]
    trials = [r for r in runs if r.data.tags.get(C.ROLE) == C.ROLE_TRIAL]
    return parents, trials, client


def attempts(run) -> list[tuple[str, str]]:
    """(start step, tune checkpoint) of each attempt of a trial run."""
    from orchestration import contract as C

    t = run.data.tags
    return [(t.get(C.attempt_tag(i, "start_step"), "?"), t.get(C.attempt_tag(i, "tune_checkpoint"), "?"))
            for i in range(1, int(t.get(C.ATTEMPTS, "0")) + 1)]


def planned_trials(overrides: list[str]) -> int:
    from orchestration.spec.overrides import load_sweep, plan_sweep

    return plan_sweep(load_sweep(REPO / QUICKSTART, REPO, overrides, need_data=False), REPO).num_trials


def wait_for(jobs: dict[str, str]) -> tuple[dict[str, dict[str, str]], bool]:
    """Poll until every job is final; returns their last info and whether A and B were RUNNING at one moment. A's
    limit is raised once it was requeued (A_REQUEUED_LIMIT)."""
    deadline, together, seen, raised = time.monotonic() + TIMEOUT_S, False, {}, False
    while True:
        info = {name: job_info(job) for name, job in jobs.items()}
        if not raised and int(info["A"].get("Restarts", "0")) >= 1:
            subprocess.run(["scontrol", "update", f"JobId={jobs['A']}", f"TimeLimit={A_REQUEUED_LIMIT}"], check=True,
                           timeout=60, env=_env())
            say(f"A was requeued: its time limit raised to {A_REQUEUED_LIMIT} for the run that finishes it")
            raised = True
        states = {name: f"{i.get('JobState')} (restarts {i.get('Restarts')})" for name, i in info.items()}
        if states != seen:
            say("jobs: " + ", ".join(f"{name} {s}" for name, s in states.items()))
            seen = states
        together |= info["A"].get("JobState") == "RUNNING" == info["B"].get("JobState")
        if all(i.get("JobState") in FINAL for i in info.values()):
            return info, together
        assert time.monotonic() < deadline, f"jobs not done in {TIMEOUT_S} s: {states}"
        time.sleep(5)


def _block_and_temp(log: str) -> tuple[str, str]:
    m = re.search(r"Ray at (\S+) \(ports (\d+-\d+), temp (\S+)\)", log)
    assert m, log[-3000:]
    return m.group(2), m.group(3)


def check_a(work_a: Path, info_a: dict[str, str], log_a: str) -> None:
    """Job A hit its time limit, was requeued, continued and finished: one run per trial, every evaluation once,
    one trial continued from its checkpoint, the report built."""
    from orchestration import contract as C

    assert info_a["JobState"] == "COMPLETED" and info_a["ExitCode"] == "0:0", info_a
    assert int(info_a["Restarts"]) >= 1 and "requeueing job" in log_a and "(restart 1)" in log_a, log_a[-3000:]
    parents, trials, client = _trial_runs(work_a)
    planned = planned_trials(A_SET[1::2])
    for run in sorted(trials, key=lambda r: r.info.run_name):
        say(f"  A {run.info.run_name}: {run.info.status}, attempts (start step, tune checkpoint) {attempts(run)}")
    # one run per trial: as many as planned, no Tune trial with two runs (names repeat: a study's trials share one)
    assert len(trials) == planned and len({r.data.tags.get(C.TRIAL_ID) for r in trials}) == planned, \
        [(r.info.run_name, r.data.tags.get(C.TRIAL_ID)) for r in trials]
    assert {r.info.status for r in trials} == {"FINISHED"} and parents, [r.info.status for r in trials]
    assert not [r for r in parents + trials if r.info.status == "RUNNING"]
    for run in trials:  # every evaluation once, in order; search trials may end early (ASHA), the others not
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, C.TEST_ACC))
        last = steps[-1] if run.data.tags.get(C.KIND) == C.KIND_SEARCH and steps else A_ITERATIONS
        assert steps == list(range(A_EVAL, last + 1, A_EVAL)), \
            f"{run.info.run_name}: evaluations at {steps} (a restart from step 0 logs them twice)"
    resumed = [r for r in trials if any(int(s) > 0 and c == "yes" for s, c in attempts(r)[1:] if s.isdigit())]
    assert resumed, "the time limit hit no running trial with a checkpoint: nothing was resumed from one"
    report = sorted(p.name for p in (work_a / "report").glob("*"))
    say(f"A's report: {report}")
    assert "index.md" in report, report


def check_b(work_b: Path, info_b: dict[str, str], log_a: str, log_b: str, job_b: str) -> None:
    """Job B, the second user's, finished beside A in ports and folders of its own."""
    assert info_b["JobState"] == "COMPLETED" and info_b["ExitCode"] == "0:0", info_b
    _, trials_b, _ = _trial_runs(work_b)
    assert trials_b and {r.info.status for r in trials_b} == {"FINISHED"}
    uid = pwd.getpwnam(SECOND_USER).pw_uid  # its store, artifacts and checkpoints were written by its processes
    owners = {p.stat().st_uid for p in [work_b / "mlflow.db", *(work_b / "mlartifacts").rglob("*")]}
    assert owners == {uid}, owners
    (ports_a, temp_a), (ports_b, temp_b) = _block_and_temp(log_a), _block_and_temp(log_b)
    say(f"ports/temp: A {ports_a} {temp_a}, B {ports_b} {temp_b}")
    assert ports_a != ports_b and temp_a != temp_b
    assert f"/mm-{uid}-{job_b}" in temp_b
    assert not Path(temp_a).exists() and not Path(temp_b).exists(), "a job left its Ray temp folder behind"


def check_c(work_c: Path, info_c: dict[str, str], log_c: str, signal_at_start: SignalAtDriverStart) -> None:
    """Job C, signalled as its driver started: stopped before its launch opened, requeued, finished."""
    assert signal_at_start.sent_after is not None, "C's driver never started"
    first_run = log_c.split("(restart 1)")[0]
    say("C's first run:\n" + "\n".join(ln for ln in first_run.splitlines() if "[slurm" in ln or "interrupted" in ln))
    assert "requeueing job" in first_run and "(restart 1)" in log_c, log_c[-3000:]
    stopped = re.search(r"the driver exited with (\d+)", first_run)
    assert stopped and stopped.group(1) != "0", first_run[-3000:]
    if stopped.group(1) == "130":  # the driver's own stop: before its launch opened, in one line
        assert "before the sweep started: no launch was opened" in first_run, first_run[-3000:]
    assert "Traceback" not in first_run, first_run[-3000:]
    assert info_c["JobState"] == "COMPLETED" and info_c["ExitCode"] == "0:0" and int(info_c["Restarts"]) >= 1, info_c
    _, trials, _ = _trial_runs(work_c)
    planned = planned_trials(B_SET[1::2])
    assert len(trials) == planned and {r.info.status for r in trials} == {"FINISHED"}, \
        [(r.info.run_name, r.info.status) for r in trials]


def test_time_limit_requeue_and_a_second_users_job_beside_it():
    root = Path(os.environ["MM_SLURM_TEST_DIR"]) / "jobs"
    root.mkdir()
    work_a = root / "root"
    work_a.mkdir()
    work_b = _second_user(root)
    work_c = root / "startup"
    work_c.mkdir()
    workdirs = {"A": work_a, "B": work_b, "C": work_c}
    started = time.monotonic()
    with _python_reachable_by_others():
        jobs = {"A": sbatch(work_a, A_SBATCH, A_SET, MM_STOP_WAIT=A_STOP_WAIT),
                "B": sbatch(work_b, B_SBATCH, [*B_SET, "--set", f"base.data.root={work_b}/data"], user=SECOND_USER,
                            MM_REPORT="0"),  # the data cache in a folder of the second user's (as in their clone)
                "C": sbatch(work_c, C_SBATCH, B_SET, MM_REPORT="0")}
        signal_at_start = SignalAtDriverStart(work_c, jobs["C"])
        signal_at_start.start()
        try:
            info, together = wait_for(jobs)
        finally:
            signal_at_start.done.set()
            for name, job in jobs.items():
                say(f"--- job {name} ({job}) log:\n{job_log(workdirs[name], job)[-6000:]}")
    say(f"the jobs done in {time.monotonic() - started:.0f} s")
    log_a, log_b = job_log(work_a, jobs["A"]), job_log(work_b, jobs["B"])

    check_a(work_a, info["A"], log_a)
    assert together, "the jobs never ran at the same time"
    check_b(work_b, info["B"], log_a, log_b, jobs["B"])
    check_c(work_c, info["C"], job_log(work_c, jobs["C"]), signal_at_start)
    shutil.rmtree(root, ignore_errors=True)
