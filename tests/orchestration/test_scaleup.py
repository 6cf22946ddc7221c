"""The launch check on an autoscaling cluster (orchestration/launch/scaleup.py and cluster.check_cluster), driven by a
faked cluster state: which cluster is waited for and which refused, how the autoscaler is recognised from what
Ray's GCS holds (a real ClusterConfig protobuf, the status a real `ray start --head` wrote), and the wait itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.launch import cluster, scaleup
from orchestration.launch.launch import SweepError
from orchestration.launch.scaleup import Autoscaler, NodeType
from orchestration.spec.models import Resources

HEAD = {"Alive": True, "Resources": {"CPU": 0.0, "memory": 1e9}}  # docker/cloud/*.yaml's head: no trial there
GPU_NODE = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}
REPO = Path(__file__).resolve().parents[2]
SPOT = Autoscaler((NodeType("head", {"CPU": 0}, 0), NodeType("gpu_spot", {"CPU": 8, "GPU": 1}, 8)))
# The autoscaler status (`__autoscaling_status`) a `ray start --head` without an autoscaling config wrote (Ray 2.60,
# recorded for this test): its read-only monitor names each node `node_<node id>`.
READONLY_STATUS = json.dumps({"autoscaler_report": {
    "active_nodes": {"node_ce4bd2684c5fe2572e437691d3465b3eefea63c0db95d011e551da9f": 1}, "idle_nodes": None,
    "pending_nodes": [], "pending_launches": {}, "failed_nodes": [], "legacy": True,
    "node_type_mapping": {"ce4bd2684c5fe2572e437691d3465b3eefea63c0db95d011e551da9f":
                          "node_ce4bd2684c5fe2572e437691d3465b3eefea63c0db95d011e551da9f"}}})


@pytest.mark.parametrize("nodes, autoscaler, waits", [
    ([HEAD, GPU_NODE], SPOT, False),          # a GPU node is up: nothing to wait for
    ([HEAD], None, False),                    # no autoscaler: the fixed-cluster check decides (and refuses)
    ([HEAD], SPOT, True),                     # spot workers from zero: wait for gpu_spot
    ([HEAD], Autoscaler(None), True),         # an autoscaler that does not report its node types
    ([HEAD, {**GPU_NODE, "Alive": False}], SPOT, True),  # a preempted GPU node does not count
])
def test_which_clusters_are_waited_for(nodes, autoscaler, waits):
    target = scaleup.scale_up_target([{"CPU": 1.0, "GPU": 0.5}], nodes, autoscaler)
    assert (target is not None) == waits
    if autoscaler is SPOT and waits:
        assert "gpu_spot (8 CPU, 1 GPU; up to 8)" in target and "head" not in target


def test_a_trial_that_spans_workers_waits_until_the_cluster_holds_all_of_them():
    """resources.workers: one bundle per worker, each on one node (first fit); the node's capacity is used up."""
    two = scaleup.trial_bundles(cpu=4, gpu=1, workers=2)
    assert two == [{"CPU": 4.0, "GPU": 1.0}] * 2 and scaleup.describe(two) == "2 workers of 4 CPU, 1 GPU"
    assert scaleup.scale_up_target(two, [HEAD, GPU_NODE], SPOT) is not None  # one GPU node holds one worker
    assert scaleup.scale_up_target(two, [HEAD, GPU_NODE, GPU_NODE], SPOT) is None
    assert scaleup.holds(scaleup.trial_bundles(cpu=4, gpu=0.5, workers=2), [HEAD, GPU_NODE])
    assert scaleup.trial_bundles(cpu=0, gpu=0) == [] and scaleup.scale_up_target([], [HEAD], SPOT) is None


@pytest.mark.parametrize("autoscaler", [
    Autoscaler((NodeType("head", {"CPU": 4}, 0), NodeType("cpu", {"CPU": 16}, 10))),  # no GPU type
    Autoscaler((NodeType("gpu", {"CPU": 8, "GPU": 1}, 0),)),                          # GPU type, max 0
    Autoscaler((NodeType("gpu", {"CPU": 2, "GPU": 1}, -1),)),                         # too few CPUs for a trial
])
def test_a_trial_no_node_type_can_hold_is_refused_at_once_naming_the_types(autoscaler):
    with pytest.raises(SweepError, match=r"one trial needs 4 CPU, 1 GPU: .*node types: .*(gpu|cpu)"):
        scaleup.scale_up_target([{"CPU": 4.0, "GPU": 1.0}], [HEAD], autoscaler)


def test_node_types_from_the_cluster_config_protobuf_agree_with_rays_own_capacity_check():
    """The ClusterConfig that `ray._private.state.state.get_cluster_config()` returns, built as the GCS stores it;
    Ray Train's check (`_calculate_max_resource_from_cluster_config`) reads the same fields."""
    from ray._private.state import GlobalState
    from ray.core.generated import autoscaler_pb2

    config = autoscaler_pb2.ClusterConfig()
    group = config.node_group_configs.add(name="gpu_spot", min_count=0, max_count=8)
    group.resources.update({"CPU": 8, "GPU": 1})
    config.node_group_configs.add(name="head", max_count=0).resources.update({"CPU": 0})
    types = scaleup.node_types_of(config)
    assert types == (NodeType("gpu_spot", {"CPU": 8.0, "GPU": 1.0}, 8), NodeType("head", {"CPU": 0.0}, 0))
    assert GlobalState._calculate_max_resource_from_cluster_config(config, "GPU") == 8
    assert scaleup.scale_up_target([{"GPU": 1.0}], [HEAD], Autoscaler(types))
    assert scaleup.node_types_of(autoscaler_pb2.ClusterConfig()) is None and scaleup.node_types_of(None) is None


def test_a_configured_autoscaler_is_told_from_the_read_only_monitor_of_a_fixed_cluster():
    assert not scaleup.autoscaler_from_status(READONLY_STATUS)
    assert not scaleup.autoscaler_from_status(None) and not scaleup.autoscaler_from_status(b"")
    # the same report from `ray up`'s autoscaler names its config's node types (docker/cloud/*.yaml)
    configured = json.loads(READONLY_STATUS)
    configured["autoscaler_report"]["active_nodes"] = {"head": 1}
    assert scaleup.autoscaler_from_status(json.dumps(configured))
    configured["autoscaler_report"] = {"active_nodes": {}, "pending_launches": {"gpu-spot": 1}}  # KubeRay group
    assert scaleup.autoscaler_from_status(json.dumps(configured).encode())


class FakeCluster:
    """ray.nodes() that gains a GPU node after `joins_after` polls; the autoscaler requests it received."""

    def __init__(self, joins_after: int | None, head=HEAD):
        self.polls, self.joins_after, self.requests, self.now, self.said = 0, joins_after, [], 0.0, []
        self.head = head

    def nodes(self):
        self.polls += 1
        joined = self.joins_after is not None and self.polls > self.joins_after
        return [self.head, GPU_NODE] if joined else [self.head]

    def sleep(self, seconds):
        self.now += seconds

    def wait(self, timeout_s=600.0):
        return scaleup.wait_for_node([{"CPU": 1.0, "GPU": 0.5}], "gpu_spot", timeout_s, nodes=self.nodes,
                                     request=self.requests.append, clock=lambda: self.now, sleep=self.sleep,
                                     say=self.said.append)


def test_the_wait_asks_the_autoscaler_and_returns_when_a_node_joins():
    fake = FakeCluster(joins_after=30)  # 30 polls of 5 s: the node joins after 2.5 min
    nodes = fake.wait()
    assert nodes == [HEAD, GPU_NODE]
    assert fake.requests == [[{"CPU": 1.0, "GPU": 0.5}], []], "the request must be withdrawn after the wait"
    assert "waiting up to 10 min 0 s" in fake.said[0] and scaleup.SCALE_UP_TIMEOUT_ENV in fake.said[0]
    assert any("still waiting" in s and "1 min 0 s of 10 min 0 s" in s for s in fake.said)
    assert fake.said[-1] == "[sweep] the Ray cluster holds 1 CPU, 0.5 GPU after 2 min 30 s"


def test_the_wait_gives_up_at_its_limit_and_withdraws_the_request():
    fake = FakeCluster(joins_after=None)
    assert fake.wait(timeout_s=120.0) is None
    assert fake.now == pytest.approx(120.0) and fake.requests == [[{"CPU": 1.0, "GPU": 0.5}], []]


@pytest.mark.parametrize("raw, expected", [(None, 1800.0), ("", 1800.0), ("90", 90.0), ("2.5", 2.5)])
def test_the_limit_comes_from_the_environment(raw, expected):
    env = {} if raw is None else {scaleup.SCALE_UP_TIMEOUT_ENV: raw}
    assert scaleup.scale_up_timeout(env) == expected


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "inf", "nan"])
def test_a_bad_limit_is_refused_naming_the_variable(raw):
    with pytest.raises(SweepError, match=rf"{scaleup.SCALE_UP_TIMEOUT_ENV}='{raw}': must be a positive number"):
        scaleup.scale_up_timeout({scaleup.SCALE_UP_TIMEOUT_ENV: raw})


def test_the_documented_variable_and_default_are_the_codes():
    minutes = f"{scaleup.DEFAULT_SCALE_UP_TIMEOUT_S / 60:g} minutes"
    for doc in ("docker/README.md", "orchestration/README.md"):
        text = " ".join((REPO / doc).read_text().split())
        assert scaleup.SCALE_UP_TIMEOUT_ENV in text and minutes in text, doc


@pytest.fixture
def fake_ray(monkeypatch):
    """check_cluster against a faked connected cluster: ray.nodes, the autoscaler and its request API."""
    import ray
    import ray.autoscaler.sdk

    fake = FakeCluster(joins_after=None)
    monkeypatch.setattr(ray, "nodes", fake.nodes)
    monkeypatch.setattr(ray.autoscaler.sdk, "request_resources", lambda bundles: fake.requests.append(bundles))
    monkeypatch.setattr(scaleup, "read_autoscaler", lambda: SPOT)
    return fake


def test_check_cluster_waits_for_the_autoscaler_then_checks_the_grown_cluster(fake_ray, capsys):
    fake_ray.joins_after = 1  # no GPU node at check_cluster's own look; up at the wait's first poll
    request, warns = cluster.check_cluster(Resources(cpu=1, gpu=0.5), "error")
    assert request == {"cpu": 1, "gpu": 0.5} and warns == []
    assert fake_ray.requests == [[{"CPU": 1.0, "GPU": 0.5}], []]
    assert "gpu_spot" in capsys.readouterr().out


def test_check_cluster_stops_when_no_node_joins_in_time_or_drops_the_gpu(fake_ray, monkeypatch):
    monkeypatch.setenv(scaleup.SCALE_UP_TIMEOUT_ENV, "0.01")
    with pytest.raises(SweepError, match=r"the Ray cluster did not grow to hold 1 CPU, 0.5 GPU within 0.01 s .*"
                                         r"--resume auto later, or pass --gpu-policy drop"):
        cluster.check_cluster(Resources(cpu=1, gpu=0.5), "error")
    assert fake_ray.requests[-1] == []
    # --gpu-policy drop goes on without the GPU where a node holds the rest of a trial ...
    fake_ray.head = {"Alive": True, "Resources": {"CPU": 4.0}}
    request, warns = cluster.check_cluster(Resources(cpu=1, gpu=0.5), "drop")
    assert request == {"cpu": 1, "gpu": 0.0} and "trials run on CPU" in warns[0]
    # ... and still stops where none does (docker/cloud/*.yaml's head has no CPU for trials)
    fake_ray.head = HEAD
    with pytest.raises(SweepError, match="resources.cpu=1: no node of the Ray cluster has 1 CPUs"):
        cluster.check_cluster(Resources(cpu=1, gpu=0.5), "drop")


def test_check_cluster_waits_for_every_worker_of_a_trial_that_spans_workers(fake_ray, monkeypatch):
    monkeypatch.setenv(scaleup.SCALE_UP_TIMEOUT_ENV, "0.01")
    fake_ray.joins_after = 0  # one GPU node is up: it holds one of the two workers
    with pytest.raises(SweepError, match="did not grow to hold 2 workers of 4 CPU, 1 GPU"):
        cluster.check_cluster(Resources(cpu=4, gpu=1, workers=2), "error")
    assert fake_ray.requests[0] == [{"CPU": 4.0, "GPU": 1.0}] * 2


def test_check_cluster_on_a_fixed_cluster_refuses_at_once(fake_ray, monkeypatch):
    monkeypatch.setattr(scaleup, "read_autoscaler", lambda: None)
    with pytest.raises(SweepError, match="resources.gpu=0.5: the Ray cluster has no GPU"):
        cluster.check_cluster(Resources(cpu=1, gpu=0.5), "error")
    assert fake_ray.requests == [], "a cluster without an autoscaler is asked for nothing"


# A real autoscaler: Ray's fake multi-node provider (`fake_multinode`, what Ray's own autoscaler tests use) launches
# "nodes" as local raylets with the resources their node type declares, GPUs included, when the autoscaler decides to.
FAKE_CLUSTER = {
    "cluster_name": "mutexmatch-scaleup-test", "max_workers": 1, "upscaling_speed": 1.0, "idle_timeout_minutes": 1,
    "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                 "disable_launch_config_check": True},
    "auth": {"ssh_user": "ubuntu"}, "docker": {},
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
        "gpu_spot": {"resources": {"CPU": 1, "GPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 1}},
    "head_node_type": "ray.head.default", "file_mounts": {}, "cluster_synced_files": [],
    "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [],
    "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
    "worker_start_ray_commands": []}
DRIVER = """
import json, sys, ray
from orchestration.launch import cluster, scaleup
from orchestration.spec.models import Resources
ray.init(address=sys.argv[1])
print("AUTOSCALER", scaleup.read_autoscaler(), flush=True)
request, warns = cluster.check_cluster(Resources(cpu=1, gpu=0.5), "error")
print("REQUEST", json.dumps(request), flush=True)
"""


@pytest.mark.heavy
def test_a_real_autoscaler_is_recognised_and_grows_the_cluster_to_a_gpu_node():
    """`ray start --head --autoscaling-config` with a CPU-0 head and a GPU node type from zero (the shape of
    docker/cloud/*.yaml): the launch check recognises the autoscaler, asks it for a trial's resources, waits, and
    passes once the GPU node joined. About 1-2 minutes on 2 cores."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from ray._private.services import get_node_ip_address

    from tests.orchestration.test_job_submit import free_ports, processes_mentioning

    gcs, dashboard, client = free_ports(3)
    address = f"{get_node_ip_address()}:{gcs}"
    short = Path(tempfile.mkdtemp(prefix="mmscale", dir="/tmp"))  # Ray's socket paths must stay under 108 bytes
    config = short / "cluster.json"
    config.write_text(json.dumps({**FAKE_CLUSTER, "provider": {**FAKE_CLUSTER["provider"], "gcs_address": address}}))
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
           scaleup.SCALE_UP_TIMEOUT_ENV: "300"}
    ray_bin = str(Path(sys.executable).with_name("ray"))
    log = (short / "head.log").open("w")
    head = subprocess.Popen([ray_bin, "start", "--head", f"--port={gcs}", f"--temp-dir={short / 'ray'}",
                             "--num-cpus=0", f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
                             "--disable-usage-stats", f"--autoscaling-config={config}", "--block"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "--block" not in (short / "head.log").read_text() and head.poll() is None:
            assert time.monotonic() < deadline, (short / "head.log").read_text()[-3000:]
            time.sleep(1)
        assert head.poll() is None, (short / "head.log").read_text()[-3000:]
        driver = subprocess.run([sys.executable, "-c", DRIVER, address], env=env, cwd=REPO, capture_output=True,
                                text=True, timeout=420)
        out = driver.stdout
        assert driver.returncode == 0, out + driver.stderr[-3000:]
        assert "AUTOSCALER Autoscaler(" in out and "waiting up to 5 min 0 s" in out, out
        assert "the Ray cluster holds 1 CPU, 0.5 GPU after" in out, out
        assert json.loads(out.split("REQUEST ", 1)[1]) == {"cpu": 1, "gpu": 0.5}
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
        for pid in processes_mentioning(f":{gcs}") + processes_mentioning(str(short)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(short, ignore_errors=True)
