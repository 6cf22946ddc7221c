"""What Ctrl+C of a sweep leaves on screen (issue 34, orchestration.launch.interrupts): Tune's own lines about its
graceful stop (its "Stop signal received", the ERROR listing the stopped trials, its ``Tuner.restore(...)`` advice,
a FileNotFoundError per trial not started) are dropped once the launch is interrupted, and only then; the messages
are Tune 2.60's as it logs them (ray/tune/tune.py, ray/tune/analysis/experiment_analysis.py)."""

from __future__ import annotations

import logging
import os

import pytest

from orchestration.launch import interrupts

TUNE = "ray.tune.tune"
ANALYSIS = "ray.tune.analysis.experiment_analysis"
STOP_LINES = [
    (TUNE, logging.WARNING, "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run. This will try to "
                            "checkpoint the experiment state one last time. Press CTRL+C (or send SIGINT/SIGKILL/"
                            "SIGTERM) to skip. "),
    (TUNE, logging.ERROR, "Trials did not complete: [run_trial_16ea3_00005, run_trial_16ea3_00006]"),
    (TUNE, logging.WARNING, "Experiment has been interrupted, but the most recent state was saved.\nResume "
                            'experiment with: Tuner.restore(path="/p/ray_results/quickstart/l/grid", trainable=...)'),
    (ANALYSIS, logging.WARNING, "Failed to fetch metrics for 8 trial(s):\n- run_trial_16ea3_00007: "
                                "FileNotFoundError('Could not fetch metrics for run_trial_16ea3_00007: both "
                                "result.json and progress.csv were not found at /p/grid/run_trial_16ea3_00007')"),
]


def _shown(logger: str, level: int, message: str) -> bool:
    return logging.getLogger(logger).filter(logging.LogRecord(logger, level, __file__, 1, message, None, None))


@pytest.fixture
def interrupted():
    interrupts.quiet_tune_stop()
    interrupts.quiet_tune_stop()   # the sweep calls it twice (before and after ray.init): one filter per logger
    yield interrupts.INTERRUPTED
    interrupts.INTERRUPTED.clear()


def test_tunes_stop_lines_are_dropped_after_our_interrupt_only(interrupted):
    assert all(sum(isinstance(f, interrupts._TuneStopLines) for f in logging.getLogger(name).filters) == 1
               for name in (TUNE, ANALYSIS))
    assert all(_shown(*line) for line in STOP_LINES)          # a run Tune stops on its own: every line kept
    interrupted.set()
    assert not any(_shown(*line) for line in STOP_LINES)
    # what is not about the stop stays, interrupted or not
    assert _shown(TUNE, logging.ERROR, "Experiment state snapshotting failed:")
    assert _shown(ANALYSIS, logging.WARNING, "Could not find best trial. Did you pass the correct `metric` parameter?")


# What looked like a crash after Ctrl+C before issue 34 (Tune's lines above, a worker's traceback).
CRASH_LOOKS = ("Tuner.restore", "FileNotFoundError", "Trials did not complete", "Traceback", "Exception ignored",
               "Stop signal received")


@pytest.mark.heavy
def test_ctrl_c_prints_the_resume_line_and_nothing_like_a_crash(tmp_path, data_root, sweep_env, procs):
    """Ctrl+C as a terminal sends it (SIGINT to the sweep's whole process group) once the first trial reported,
    with a third trial still pending (its result files missing: Tune's FileNotFoundError lines)."""
    import signal
    import subprocess
    import sys

    from mlflow import MlflowClient

    from tests.orchestration.test_fault_tolerance import grid_runs, logged_steps, write_spec

    write_spec(tmp_path, data_root, name="ctrlc", iterations=200, folds=[0, 1, 2], methods=["fixmatch"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "ctrlc.yaml", "--max-concurrent", "1"],
                              cwd=tmp_path, env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        procs["wait_for"](lambda: any(logged_steps(client, r) for r in grid_runs(client, "ctrlc")), 300,
                          "a trial that reported")
        os.killpg(driver.pid, signal.SIGINT)
        out, _ = driver.communicate(timeout=180)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    assert driver.returncode == 130, out
    assert "[sweep] interrupted: stopping the trials and saving the state" in out
    assert "To resume this launch (finished trials are not re-run):\n  python -m orchestration.sweep ctrlc.yaml" in out
    assert [line for line in out.splitlines() if any(s in line for s in CRASH_LOOKS)] == []


# Adversarial finding #17 and issue 40 item 1: a stop signal at any moment of the driver's start-up is honoured —
# the launch ends resumable (130) with its line, never exit 15 or 138 without a word, never trained to the end.
STARTED_NOTHING = "before the sweep started: no launch was opened and nothing was trained"


def _mapped(pid: int, names: tuple[str, ...]) -> bool:
    """Whether process ``pid`` has one of ``names`` (shared libraries) mapped: it is importing that package."""
    try:
        maps = open(f"/proc/{pid}/maps").read()
    except OSError:
        return False
    return any(name in maps for name in names)


def _cmdlines(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            out.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(out)


def _signalled_start(tmp_path, data_root, sweep_env, procs, signum: int, ready, what: str) -> tuple[int, str]:
    """A one-trial sweep's driver sent ``signum`` once ``ready(pid)`` holds; (its exit status, its output)."""
    import subprocess
    import sys

    from tests.orchestration.test_fault_tolerance import write_spec

    write_spec(tmp_path, data_root, name="startsig", iterations=20, folds=[0], methods=["fixmatch"])
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "startsig.yaml"], cwd=tmp_path,
                              env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        procs["wait_for"](lambda: driver.poll() is not None or ready(driver.pid), 180, what, interval=0.05)
        os.kill(driver.pid, signum)
        out, _ = driver.communicate(timeout=180)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    return driver.returncode, out


def test_the_time_limit_signal_while_the_driver_imports_is_honoured(tmp_path, data_root, sweep_env, procs):
    """SLURM's USR1 while the driver still imports torch/Ray (seconds on a loaded node): Python's default action
    ended it with 138, which the batch script took for a crash (make test-slurm, issue 40)."""
    import signal

    rc, out = _signalled_start(tmp_path, data_root, sweep_env, procs, signal.SIGUSR1,
                               lambda pid: _mapped(pid, ("libtorch_cpu", "_raylet.so", "libtorch.so")),
                               "the driver importing torch or Ray")
    assert rc == 130, out
    assert STARTED_NOTHING in out and "SIGUSR1" in out, out
    assert "Traceback" not in out and not (tmp_path / "mlflow.db").exists(), out


@pytest.mark.heavy  # each starts a local Ray (35 s at a load of 5); the in-process test below covers it in CI
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_while_ray_starts_is_honoured(tmp_path, data_root, sweep_env, procs, signame):
    """Finding #17: SIGTERM during ``ray.init`` hit Ray's own handler (exit 15, not a word); SIGUSR1 was lost
    (the sweep trained to the end). Now either stops the launch before its parent run, with Ray shut down."""
    import signal

    from mlflow import MlflowClient

    rc, out = _signalled_start(tmp_path, data_root, sweep_env, procs, getattr(signal, signame),
                               lambda pid: "gcs_server" in _cmdlines(procs["descendants"](pid)),
                               "Ray's GCS started by the driver")
    assert rc == 130, out
    assert STARTED_NOTHING in out and signame in out, out
    assert "Traceback" not in out, out
    exp = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment_by_name("startsig")
    assert exp is None or not MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs([exp.experiment_id])


def test_a_signal_while_fit_starts_waits_for_tune_then_stops_it(interrupted, monkeypatch):
    """Between ``IN_FIT`` and Tune's own handler (trials starting) a signal is remembered, not raised inside
    Tune's start-up; Tune's set-up (PassOnUsr1) then asks for its graceful stop."""
    import signal

    sent = []
    monkeypatch.setattr(signal, "getsignal", lambda s: interrupts.on_interrupt)  # Tune not listening yet
    monkeypatch.setattr(os, "kill", lambda pid, s: sent.append((pid, s)))
    monkeypatch.setattr(interrupts, "RECEIVED", [])
    interrupts.IN_FIT.set()
    try:
        interrupts.on_interrupt(signal.SIGUSR1, None)   # no KeyboardInterrupt
        assert interrupted.is_set() and sent == [] and interrupts.last_signal() == signal.SIGUSR1
        interrupts.stop_if_interrupted()
        assert sent == [(os.getpid(), signal.SIGUSR1)] and interrupts._FOR_TUNE.is_set()
    finally:
        interrupts.IN_FIT.clear()
        interrupts._FOR_TUNE.clear()


def test_sigterm_while_ray_starts_is_held_then_stops_the_launch(monkeypatch, interrupted):
    """Finding #17 in-process, in CI: ``ray.init`` stubbed as Ray 2.60's begins (its SIGTERM handler,
    ``sys.exit(signum)``, set through ``ray._private.utils``) and SIGTERM arriving meanwhile. Before: SystemExit(15)
    out of the launch; now the signal is held, Ray is shut down and the launch stops like any interrupt."""
    import signal
    import sys
    import time
    from types import SimpleNamespace

    import ray
    from ray._private import utils as ray_utils

    from orchestration import sweep
    from orchestration.runtime import signals

    def fake_init_ray(interrupted=lambda: False):
        ray_utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))  # what ray.init does first
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):
            if interrupted():
                break
            time.sleep(0.01)
        return True

    saved = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    shutdowns = []
    monkeypatch.setattr(sweep, "init_ray", fake_init_ray)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))
    monkeypatch.setattr(interrupts, "RECEIVED", [])
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep._start_ray(SimpleNamespace(handle_signals=True, gpu_policy="error"), SimpleNamespace(spec=None))
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert shutdowns == [1] and interrupts.last_signal() == signal.SIGTERM
    assert "(SIGTERM) before the sweep started" in signals.before_start_line(interrupts.last_signal())
