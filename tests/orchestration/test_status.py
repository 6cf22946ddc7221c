"""``orchestration.status`` on a real MLflow store (SQLite in tmp_path) holding finished, running, failed and killed
trial runs written with the contract's tags, as the trainable writes them: counts, ETA, hours, the watch loop, and
the driver's reporter that writes the same status to the parent run."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from orchestration import contract as C
from orchestration import status
from orchestration.trial import tracking
from orchestration.spec.overrides import load_sweep, plan_sweep
from orchestration.store.store import Store

SPEC = """
name: status_test
base:
  data: {dataset: digits, num_labels: 20}
  model: {backbone: small_cnn}
  train: {iterations: 100, eval_interval: 20, batch_size: 4, mu: 2}
folds: [0, 1, 2]
axes:
  method:
    fixmatch: {algorithm: {name: fixmatch}}
    mutexmatch: {algorithm: {name: mutexmatch}}
resources: {cpu: 2, gpu: 0}
"""
NOW = 1_800_000_000.0  # a fixed "now" (seconds) so durations and the ETA are exact


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The store: fixmatch fold 0 FINISHED in 100 s, fold 1 RUNNING at step 40 of 100 (1 s/step between its last
    two evaluations, last one 20 s ago), fold 2 FAILED after 10 s; mutexmatch fold 0 KILLED after 5 s, fold 1 only
    FINISHED with another config (so PENDING), fold 2 without a run."""
    project = tmp_path_factory.mktemp("status")
    (project / "sweep.yaml").write_text(SPEC)
    plan = plan_sweep(load_sweep(project / "sweep.yaml", project, need_data=False), project)
    uri = tracking.resolve_tracking_uri(None, project)
    client = MlflowClient(uri)
    exp = tracking.ensure_experiment(client, "status_test", uri)
    parent = tracking.create_parent_run(Store(client, exp), launch_id="L1", spec_path=project / "sweep.yaml",
                                        spec_text=SPEC, spec_hash=plan.spec_hash, commit="c", storage="s",
                                        smoke=False, command="cmd")
    trials = {t.key: t for t in plan.grid}

    def run(key: str, start: float, end: float | None, status_: str, config_hash: str | None = None) -> str:
        t = trials[key]
        tags = C.trial_tags(parent_run_id=parent.run_id, kind=t.kind, cell_levels=t.cell.levels, cell_id=t.cell.id,
                            fold=t.fold, variant="x", config_hash=config_hash or t.config_hash, commit="c",
                            trial_id=key, launch_id="L1")
        rid = client.create_run(exp, start_time=int(start * 1000), tags=tags).info.run_id
        if end is not None:
            client.set_terminated(rid, status_, end_time=int(end * 1000))
        return rid

    done = run("method=fixmatch/fold0", NOW - 1000, NOW - 900, "FINISHED")
    client.log_batch(done, metrics=[Metric(C.TEST_ACC, 0.8, int((NOW - 900) * 1000), 100),
                                    Metric(C.TEST_BEST_ACC, 0.85, int((NOW - 900) * 1000), 100)])
    running = run("method=fixmatch/fold1", NOW - 60, None, "RUNNING")
    client.log_batch(running, metrics=[Metric(C.TRAIN_LOSS, 1.0, int((NOW - 40) * 1000), 20),
                                       Metric(C.TRAIN_LOSS, 0.9, int((NOW - 20) * 1000), 40),
                                       Metric(C.TEST_ACC, 0.5, int((NOW - 20) * 1000), 40)])
    failed = run("method=fixmatch/fold2", NOW - 500, NOW - 490, "FAILED")
    client.set_tag(failed, C.ERROR, "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory")
    run("method=mutexmatch/fold0", NOW - 300, NOW - 295, "KILLED")
    run("method=mutexmatch/fold1", NOW - 300, NOW - 200, "FINISHED", config_hash="another")
    return project, uri, client, exp, parent, plan


def test_status_counts_eta_and_hours(sweep):
    project, uri, client, exp, parent, plan = sweep
    st = status.collect(Store(client, exp), plan, now=NOW)
    by_key = {(t.cell, t.fold): t for t in st.trials}
    assert st.counts() == {"FINISHED": 1, "RUNNING": 1, "PENDING": 2, "FAILED": 1, "KILLED": 1}
    running = by_key[("method=fixmatch", "1")]
    assert (running.step, running.s_per_step) == (40, pytest.approx(1.0))
    assert running.eta_s == pytest.approx(60 * 1.0 - 20)  # 60 steps left at 1 s/step, the last evaluation 20 s ago
    assert by_key[("method=fixmatch", "2")].detail == "RuntimeError: CUDA out of memory"
    assert by_key[("method=fixmatch", "0")].final == pytest.approx(0.8)
    # spent: 100 + 60 + 10 + 5 s (the run with another config is not this plan's); 2 CPUs per trial
    assert st.spent_s == pytest.approx(175)
    assert (st.unit, st.share) == ("CPU", 2.0)
    # to go: the running trial's ETA (40 s), then the failed, the killed and 2 pending trials at 1 s/step x 100
    assert st.to_go_s == pytest.approx(40 + 100 + 100 + 200)
    text = status.format_status(st)
    assert "1 FINISHED, 1 RUNNING, 2 PENDING, 1 FAILED, 1 KILLED (6 trials)" in text
    assert "**CPU-hours:** 0.0972 spent, ≈ 0.244 to go" in text
    assert "ETA 40 s (1 s/step)" in text and "L1 (RUNNING" in text


def test_status_cli_watch_refreshes(sweep, capsys, monkeypatch):
    project, uri, *_ = sweep
    monkeypatch.chdir(project)
    assert status.main(["sweep.yaml", "--tracking-uri", uri, "--watch", "0.01", "--count", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("# sweep status_test: status at") == 3
    assert status.main(["sweep.yaml", "--tracking-uri", str(project / "nothing.db")]) == 2
    assert "no MLflow store there" in capsys.readouterr().err


def test_reporter_writes_the_status_to_the_parent_run(sweep):
    project, uri, client, exp, parent, plan = sweep
    reporter = status.StatusReporter(plan, uri, exp, parent.run_id, interval_s=0.05).start()
    time.sleep(1.0)
    reporter.stop()
    history = client.get_metric_history(parent.run_id, f"{C.TRIALS_METRIC}finished")
    assert len(history) >= 2 and history[-1].value == 1.0  # refreshed while running, then once at the end
    assert client.get_run(parent.run_id).data.metrics[f"{C.TRIALS_METRIC}pending"] == 2.0
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(client.download_artifacts(parent.run_id, C.STATUS_ARTIFACT, tmp)).read_text()
    assert "| method=fixmatch | 2 | grid | FAILED |" in text


def test_without_a_yaml_status_shows_the_stores_one_sweep(sweep, capsys, monkeypatch, tmp_path):
    """Issue 34: ``python -m orchestration.status`` without a YAML printed its usage (after seconds of imports) though
    the store holds one sweep; now it shows that sweep, from the YAML its newest launch recorded, else from the copy
    that launch logged; with no sweep or several it says what the store holds and to name the YAML."""
    project, uri, client, exp, *_ = sweep
    monkeypatch.chdir(project)                                   # the default store: ./mlflow.db
    assert status.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"[status] the store's one sweep: experiment 'status_test', {project / 'sweep.yaml'}\n")
    assert "# sweep status_test: status at" in out and "1 FINISHED, 1 RUNNING, 2 PENDING" in out
    moved = project / "moved.yaml"
    (project / "sweep.yaml").rename(moved)                       # the recorded path is gone: the logged copy
    try:
        assert status.main(["--tracking-uri", uri]) == 0
    finally:
        moved.rename(project / "sweep.yaml")
    out = capsys.readouterr().out
    assert f"/{C.SPEC_ARTIFACT}\n" in out.splitlines()[0] + "\n" and "1 FINISHED, 1 RUNNING, 2 PENDING" in out
    other = tracking.ensure_experiment(client, "other", uri)
    tracking.create_parent_run(Store(client, other), launch_id="L2", spec_path=project / "sweep.yaml", spec_text=SPEC,
                               spec_hash="h", commit="c", storage="s", smoke=False, command="cmd")
    try:
        assert status.main([]) == 2
    finally:
        client.delete_experiment(other)
    err = capsys.readouterr().err
    assert err == (f"error: {uri} holds 2 sweeps (other, status_test): name the sweep YAML, e.g. python -m "
                   "orchestration.status experiments/<name>.yaml\n") or "2 sweeps (status_test, other)" in err, err
    empty = tracking.resolve_tracking_uri(None, tmp_path)        # a store without a sweep
    MlflowClient(empty).search_experiments()
    assert status.main(["--tracking-uri", empty]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"error: {empty} holds no sweep: name the sweep YAML, e.g. "
                                                        "python -m orchestration.status experiments/<name>.yaml")
