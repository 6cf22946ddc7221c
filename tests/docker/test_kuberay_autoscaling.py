"""docker/kuberay/raycluster-autoscaling.yaml and redis.yaml: the spot variant of raycluster.yaml (the CRD schema
check is tests/docker/test_kuberay_crds.py's, over every RayCluster). Here: it is raycluster.yaml's cluster plus
exactly the in-tree autoscaler, GCS fault tolerance against the Redis of redis.yaml, and spot placement of the GPU
workers, and the names it relies on (Service, Secret, key) are those the other files and the README create."""

from __future__ import annotations

import copy
import functools
import importlib.util
from pathlib import Path
from typing import Any

import yaml

from tests.docker.test_deploy_config import KUBERAY, _readme_commands

# The node labels of spot capacity on GKE, EKS managed node groups, Karpenter and AKS, and the taints GKE and AKS
# put on spot nodes (their documentation's names).
SPOT_LABELS = {"cloud.google.com/gke-spot": "true", "eks.amazonaws.com/capacityType": "SPOT",
               "karpenter.sh/capacity-type": "spot", "kubernetes.azure.com/scalesetpriority": "spot"}
SPOT_TAINTS = {"cloud.google.com/gke-spot": "true", "kubernetes.azure.com/scalesetpriority": "spot"}


@functools.cache
def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d}


def _autoscaling() -> dict[str, Any]:
    return _docs("raycluster-autoscaling.yaml")["RayCluster"]["spec"]


def _secrets_the_readme_creates() -> dict[str, set[str]]:
    created = {}
    for cmd in _readme_commands():
        if cmd[:1] == ("kubectl",) and "secret" in cmd and "generic" in cmd:
            keys = {t.split("=", 1)[1].split("=", 1)[0] for t in cmd if t.startswith("--from-literal=")}
            created[cmd[cmd.index("generic") + 1]] = keys
    return created


def test_it_is_raycluster_yaml_plus_autoscaler_fault_tolerance_and_spot_placement():
    static = copy.deepcopy(_docs("raycluster.yaml")["RayCluster"]["spec"])
    spec = copy.deepcopy(_autoscaling())
    assert spec.pop("enableInTreeAutoscaling") is True
    assert spec.pop("autoscalerOptions")["idleTimeoutSeconds"] > 0
    assert spec.pop("gcsFaultToleranceOptions")["redisAddress"]
    (group,) = spec.pop("workerGroupSpecs")
    (static_group,) = static.pop("workerGroupSpecs")
    assert spec == static, "head, auth and Ray version must stay raycluster.yaml's"

    assert (group["replicas"], group["minReplicas"]) == (0, 0) and group["maxReplicas"] >= 1, "GPU pods from zero"
    pod, static_pod = group["template"]["spec"], static_group["template"]["spec"]
    (worker,), (static_worker,) = pod["containers"], static_pod["containers"]
    env = {v["name"]: v["value"] for v in worker.pop("env")}
    assert worker == static_worker, "the GPU container must stay raycluster.yaml's (image, resources, env sources)"
    assert int(env["RAY_gcs_rpc_server_reconnect_timeout_s"]) > 60
    # the name is a Ray config (RAY_<name> overrides it), not a typo Ray would ignore
    raylet = Path(importlib.util.find_spec("ray").origin).parent / "_raylet.so"
    assert b"gcs_rpc_server_reconnect_timeout_s\0" in raylet.read_bytes()

    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    admitted = {(e["key"], v) for t in terms for e in t["matchExpressions"] if e["operator"] == "In"
                for v in e["values"]}
    assert admitted == set(SPOT_LABELS.items()), "every term must admit spot nodes only"
    assert all(len(t["matchExpressions"]) == 1 for t in terms)
    tolerated = {(t["key"], t.get("value")) for t in pod["tolerations"] if t["effect"] == "NoSchedule"}
    assert set(SPOT_TAINTS.items()) <= tolerated and ("nvidia.com/gpu", None) in tolerated
    assert "affinity" not in spec["headGroupSpec"]["template"]["spec"], "the head (the sweep's driver) is on-demand"


def test_gcs_fault_tolerance_reaches_the_redis_of_redis_yaml_with_the_readmes_secret():
    redis = _docs("redis.yaml")
    options = _autoscaling()["gcsFaultToleranceOptions"]
    host, _, port = options["redisAddress"].partition(":")
    service = redis["Service"]
    assert host == service["metadata"]["name"] and int(port) in {p["port"] for p in service["spec"]["ports"]}

    deployment = redis["Deployment"]["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    (container,) = deployment["template"]["spec"]["containers"]
    assert int(port) in {p["containerPort"] for p in container["ports"]}
    claims = {v["persistentVolumeClaim"]["claimName"] for v in deployment["template"]["spec"]["volumes"]}
    assert claims == {redis["PersistentVolumeClaim"]["metadata"]["name"]}
    assert "--appendonly" in container["args"], "without persistence a Redis restart loses the GCS state"

    ref = options["redisPassword"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] in _secrets_the_readme_creates().get(ref["name"], set()), ref
    (password,) = [v for v in container["env"] if v["name"] == "REDIS_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"] == ref
    assert container["args"][container["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
