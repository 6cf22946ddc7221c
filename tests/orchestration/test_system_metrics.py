"""Issue 44 item 3: MLflow's system metrics on a trial's run at the sweep YAML's interval (``tracking``), off with
one switch, and left out of what identifies a sweep. The sweep end to end (every trial run of the tiny sweep has
them): tests/orchestration/test_sweep.py."""

from __future__ import annotations

import copy
import time

import pytest
from mlflow import MlflowClient

from orchestration.contract import settings_digest
from orchestration.launch.phases import _system_metrics_s
from orchestration.spec.models import SpecError
from orchestration.spec.plan import build_plan
from orchestration.spec.sweepfile import parse_spec, spec_hash
from orchestration.trial.system_metrics import SYSTEM_PREFIX, TrialSystemMetrics

from tests.orchestration.test_spec import BASE

# What MLflow's CPU, disk and network monitors log on any machine (GPU ones need nvidia-ml-py and a GPU).
EXPECTED = {"cpu_utilization_percentage", "system_memory_usage_megabytes", "system_memory_usage_percentage",
            "disk_usage_percentage", "disk_usage_megabytes", "disk_available_megabytes",
            "network_receive_megabytes", "network_transmit_megabytes"}


@pytest.mark.parametrize("tracking, expected", [
    ({"system_metrics_interval": 0.5}, "tracking.system_metrics_interval=0.5: must be >= 1"),
    ({"system_metrics": "no"}, "tracking.system_metrics='no': Input should be a valid boolean"),
    ({"interval": 5}, "tracking.interval: unknown key; allowed keys: system_metrics, system_metrics_interval"),
])
def test_a_bad_tracking_section_is_one_line_naming_the_field(tracking, expected, tmp_path):
    raw = copy.deepcopy(BASE)
    raw["tracking"] = tracking
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path)
    assert expected in str(info.value) and len(str(info.value).splitlines()) == 1, str(info.value)


def test_tracking_changes_neither_the_spec_hash_nor_the_settings_digest(tmp_path):
    """A launch with other system-metrics settings resumes and counts the same runs."""
    raw = copy.deepcopy(BASE)
    off = copy.deepcopy(BASE)
    off["tracking"] = {"system_metrics": False, "system_metrics_interval": 30}
    assert spec_hash(parse_spec(off, tmp_path)) == spec_hash(parse_spec(raw, tmp_path))
    assert settings_digest(off) == settings_digest(raw)


def test_the_interval_reaches_the_trials_and_one_switch_turns_them_off(tmp_path):
    raw = copy.deepcopy(BASE)
    assert _system_metrics_s(build_plan(parse_spec(raw, tmp_path), tmp_path)) == 10.0  # MLflow's default
    raw["tracking"] = {"system_metrics_interval": 2}
    assert _system_metrics_s(build_plan(parse_spec(raw, tmp_path), tmp_path)) == 2.0
    raw["tracking"] = {"system_metrics": False}
    assert _system_metrics_s(build_plan(parse_spec(raw, tmp_path), tmp_path)) is None


@pytest.fixture
def store(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment_id = client.create_experiment("sysmetrics", artifact_location=(tmp_path / "mlruns").as_uri())
    return client, experiment_id


def _system(client: MlflowClient, run_id: str) -> dict[str, list[int]]:
    metrics = client.get_run(run_id).data.metrics
    return {k[len(SYSTEM_PREFIX):]: [m.step for m in client.get_metric_history(run_id, k)]
            for k in metrics if k.startswith(SYSTEM_PREFIX)}


def test_a_run_shorter_than_the_interval_gets_a_sample_at_its_start_and_its_end(store):
    """MLflow's monitor publishes nothing before its first interval has passed; the trial's start and stop do (a
    trial whose process Tune ends before its stop has the first)."""
    client, experiment_id = store
    run_id = client.create_run(experiment_id).info.run_id
    monitor = TrialSystemMetrics(client.tracking_uri, run_id, 60.0).start()
    assert set(_system(client, run_id)) >= EXPECTED  # at once, before the first interval
    monitor.stop()
    logged = _system(client, run_id)
    assert EXPECTED <= set(logged), logged
    assert all(steps == [0, 1] for steps in logged.values()), logged


def test_samples_at_the_interval_and_a_restarted_attempt_continues_the_steps(store):
    client, experiment_id = store
    run_id = client.create_run(experiment_id).info.run_id
    first = TrialSystemMetrics(client.tracking_uri, run_id, 1.0).start()
    time.sleep(3.5)
    first.stop()
    steps = _system(client, run_id)["cpu_utilization_percentage"]
    # the start's, one per interval (3 in 3.5 s idle; a loaded machine's slow SQLite writes leave fewer), the stop's
    assert len(steps) >= 3 and steps == list(range(len(steps))), steps
    second = TrialSystemMetrics(client.tracking_uri, run_id, 60.0).start()  # the trial's next attempt
    second.stop()
    assert _system(client, run_id)["cpu_utilization_percentage"] == steps + [len(steps), len(steps) + 1]


def test_off_starts_nothing_and_logs_nothing(store):
    client, experiment_id = store
    run_id = client.create_run(experiment_id).info.run_id
    monitor = TrialSystemMetrics(client.tracking_uri, run_id, None).start()
    assert monitor._monitor is None
    monitor.stop()
    assert _system(client, run_id) == {}
