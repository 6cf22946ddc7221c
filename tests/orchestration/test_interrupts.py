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
