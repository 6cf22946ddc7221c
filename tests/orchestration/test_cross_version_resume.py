"""A launch interrupted on the code before the reorganisation (issue 29, commit 460dc25) resumes on this tree.

Ray Tune pickles the trainable's context and the trial plan into its experiment state by module path, and the run
folders hold checkpoints and caches written by the old code; moving modules could break a ``--resume`` of a sweep
that was running when a user upgraded. The driver is started from a ``git worktree`` of 460dc25, SIGKILLed with one
trial FINISHED and one past its first checkpoint, then ``--resume``d with this tree: the finished trial is not re-run,
the cut-off one continues from its Tune checkpoint, and every trial ends FINISHED once. Heavy (~4 min on 2 cores,
a worktree checkout and two Ray starts): ``make test-heavy``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

REPO = Path(__file__).resolve().parents[2]
BEFORE = "460dc25"  # the last commit before issue 29 moved the trainer, the data and the launcher

SPEC = """
name: xver
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: 1000, eval_interval: 100, batch_size: 8, mu: 2, eval_batch_size: 512}}
folds: [0, 1]
axes:
  method:
    fixmatch: {{algorithm: {{name: fixmatch}}}}
    mutexmatch: {{algorithm: {{name: mutexmatch}}}}
resources: {{cpu: 1, gpu: 0}}
"""


@pytest.fixture()
def old_tree(tmp_path):
    if subprocess.run(["git", "cat-file", "-e", f"{BEFORE}^{{commit}}"], cwd=REPO).returncode:
        pytest.fail(f"commit {BEFORE} is not in this clone's history; the test needs a full clone")
    tree = tmp_path / "old-tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), BEFORE], cwd=REPO, check=True)
    yield tree
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def _trials(client: MlflowClient) -> list:
    exp = client.get_experiment_by_name("xver")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`mutexmatch.role` = 'trial'")


def _checkpoint_in_state(ray_results: Path) -> bool:
    """Whether the old driver's Tune experiment state holds a checkpoint of an unfinished trial: a kill before that
    loses the checkpoint, and the resumed trial would restart from step 0 instead of continuing."""
    from ray.tune import ExperimentAnalysis

    for state_dir in {p.parent for p in ray_results.glob("xver/*/grid/experiment_state-*.json")}:
        try:
            trials = ExperimentAnalysis(str(state_dir)).trials
        except Exception:  # noqa: BLE001 - the driver may be writing the file; the caller polls again
            continue
        if any(t.status not in ("TERMINATED", "ERROR") and t.checkpoint is not None for t in trials):
            return True
    return False


def _steps(client: MlflowClient, run) -> list[int]:
    return [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]


@pytest.mark.heavy
def test_a_launch_killed_on_the_old_tree_resumes_on_this_one(tmp_path, old_tree, data_root, sweep_env, procs):
    project = tmp_path / "project"
    project.mkdir()
    (project / "xver.yaml").write_text(SPEC.format(root=data_root))
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    old_env = {**sweep_env, "PYTHONPATH": str(old_tree)}
    log = (tmp_path / "old-driver.log").open("w")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "xver.yaml", "--max-concurrent", "1"],
                              cwd=project, env=old_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def one_done_one_checkpointed():
            runs = _trials(client)
            done = [r for r in runs if r.info.status == "FINISHED"]
            running = [r for r in runs if r.info.status == "RUNNING" and max(_steps(client, r), default=0) >= 300]
            ok = done and running and _checkpoint_in_state(project / "ray_results")
            return (done, running) if ok else None

        done_before, _ = procs["wait_for"](one_done_one_checkpointed, 400, "one finished trial, one past step 300")
        ray_procs = procs["descendants"](driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
        log.close()
    procs["kill"](ray_procs)

    resumed = subprocess.run([sys.executable, "-m", "orchestration.sweep", "xver.yaml", "--max-concurrent", "1",
                              "--resume"], cwd=project, env=sweep_env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    runs = _trials(client)
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}, [(r.info.run_name, r.info.status)
                                                                              for r in runs]
    for r in runs:
        assert _steps(client, r) == list(range(100, 1001, 100)), r.info.run_name
    by_id = {r.info.run_id: r for r in runs}
    for before in done_before:  # finished on the old tree: not re-run by the new one
        assert by_id[before.info.run_id].data.tags["mutexmatch.attempts"] == "1"
        assert by_id[before.info.run_id].info.end_time == before.info.end_time
    continued = [r for r in runs if r.data.tags["mutexmatch.attempts"] == "2"]
    assert continued, "no trial was cut off by the kill"
    for r in continued:  # the old tree's Tune checkpoint, unpickled by the new tree
        assert r.data.tags["mutexmatch.attempt.2.tune_checkpoint"] == "yes", dict(r.data.tags)
        assert int(r.data.tags["mutexmatch.attempt.2.start_step"]) > 0
