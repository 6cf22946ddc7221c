"""docker/kuberay/*.yaml against the CRD schemas of the KubeRay release the README supports (tests/docker/data/
kuberay-crds/, vendored with source and licence), and the RayJob's submitter command against the one the local
cluster test (tests/docker/test_local_cluster.py) runs for real.

What the API server would do with `kubectl apply --validate=strict` and this test does too: the resource's version
must be one the CRD serves, and the spec must satisfy the CRD's OpenAPI v3 schema with unknown fields refused (a
structural schema prunes them silently on the server; strict validation, like this test, reports them). What it
cannot do: the CEL rules (`x-kubernetes-validations`), which need a Kubernetes API server, and the operator's own
admission checks.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.docker.local_stack import CLUSTER_ARGS, REPO, submit_command

CRDS = Path(__file__).parent / "data" / "kuberay-crds"
KUBERAY = REPO / "docker" / "kuberay"


@functools.cache
def _crd(plural: str) -> dict[str, Any]:
    path = CRDS / f"ray.io_{plural}.yaml.gz"
    text = gzip.decompress(path.read_bytes())
    digest = re.search(rf"`ray.io_{plural}\.yaml\.gz`.*?sha256[^`]*`([0-9a-f]{{64}})`",
                       (CRDS / "README.md").read_text())
    assert digest and hashlib.sha256(text).hexdigest() == digest.group(1), f"{path.name} differs from its README"
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 2 MB: libyaml when present


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI v3 schema as JSON Schema: Kubernetes' extensions dropped, objects with declared properties
    closed (`additionalProperties: false`) unless they preserve unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node.setdefault("additionalProperties", False)
            for key in [k for k in node if k.startswith("x-kubernetes-")]:
                del node[key]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _manifests(kind: str) -> list[dict[str, Any]]:
    docs = [d for p in sorted(KUBERAY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("kind, plural", [("RayCluster", "rayclusters"), ("RayJob", "rayjobs")])
def test_kuberay_manifests_validate_against_the_crd_schema(kind, plural):
    crd = _crd(plural)
    assert crd["spec"]["names"]["kind"] == kind
    manifests = _manifests(kind)
    assert manifests, f"no {kind} in docker/kuberay"
    for doc in manifests:
        group, _, version = doc["apiVersion"].partition("/")
        assert group == crd["spec"]["group"], doc["apiVersion"]
        served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
        assert version in served, f"{doc['apiVersion']}: KubeRay serves {sorted(served)}"
        schema = _strict(served[version]["schema"]["openAPIV3Schema"])
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
        assert not errors, "\n".join(f"{doc['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}"
                                     for e in errors[:10])


def test_the_strict_schema_catches_a_misspelt_field():
    """The check above can fail: a typo in a RayJob field is reported, as `kubectl apply --validate=strict` does."""
    crd = copy.deepcopy(_crd("rayjobs"))
    (job,) = _manifests("RayJob")
    job = copy.deepcopy(job)
    job["spec"]["shutdownAfterJobFinish"] = job["spec"].pop("shutdownAfterJobFinishes")
    schema = _strict(next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"])
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(job))
    assert any("shutdownAfterJobFinish" in e.message for e in errors), [e.message for e in errors]


def test_rayjob_submits_the_command_the_local_cluster_test_runs():
    """KubeRay's submitter runs `ray job submit --address <head> ... --runtime-env-json {"working_dir": "/app"} --
    <entrypoint>` (K8sJobMode, KubeRay's job.go); /app is the image's WORKDIR, so that is `ray job submit
    --working-dir .` from the image's code, with the entrypoint the local cluster test submits: the sweep module,
    a YAML under experiments/, and the same --tracking-uri/--storage flags (addresses from the ConfigMap), plus
    `--resume auto` so that the RayJob's retries continue the sweep."""
    (job,) = _manifests("RayJob")
    spec = job["spec"]
    entrypoint = shlex.split(spec["entrypoint"])
    (configmap,) = _manifests("ConfigMap")
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: configmap["data"][m.group(1)], t) for t in entrypoint]

    local = submit_command("http://127.0.0.1:8265", ["experiments/table1_cifar_svhn.yaml", *CLUSTER_ARGS])
    sweep = local[local.index("--") + 1:]
    assert entrypoint[:4] == sweep[:4] == ["python", "-m", "orchestration.sweep", "experiments/table1_cifar_svhn.yaml"]
    assert (REPO / entrypoint[3]).is_file()
    flags = lambda argv: [t for t in argv if t.startswith("--") and t != "--resume"]  # noqa: E731
    assert flags(expanded) == flags(sweep) == ["--tracking-uri", "--storage"]
    # a retry of the RayJob (backoffLimit) continues the sweep instead of starting a fresh one
    assert entrypoint[entrypoint.index("--resume") + 1] == "auto" and spec["backoffLimit"] >= 1
    assert local[local.index("--working-dir") + 1] == "." and yaml.safe_load(spec["runtimeEnvYAML"]) == \
        {"working_dir": "/app"}
    # the addresses the cluster test proves (compose's service names) have the ConfigMap's shape
    assert expanded[expanded.index("--storage") + 1].startswith("s3://")
    assert expanded[expanded.index("--tracking-uri") + 1].startswith("http://")
    assert "submitterPodTemplate" in spec and not spec["submitterPodTemplate"]["spec"]["containers"][0].get(
        "command"), "a custom submitter command would replace KubeRay's idempotent submit-or-follow"
