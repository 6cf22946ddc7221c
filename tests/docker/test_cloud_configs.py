"""docker/cloud/*.yaml, the `ray up` cluster configs for AWS and GCP, checked as `ray up` checks them before it calls
the cloud: Ray's defaults for the provider filled in (`prepare_config`), then Ray's schema
(`ray/autoscaler/ray-schema.json`, with jsonschema) and Ray's own checks (`validate_config`). No cloud account is
needed or used; what the cloud itself would refuse (a placeholder AMI, a bucket that is not yours) is out of reach.

Then what the issue asks of them and what they share with the rest of docker/: an on-demand head with no GPU, spot
GPU workers scaling from zero, the project image, `ray start` and `mlflow server` calls with real flags, MLflow
under the name the compose stack uses, Tune storage and MLflow artifacts in the provider's object store.
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

from tests.docker.test_deploy_config import (_mlflow_server_command, _option_names, _option_value,
                                             _ray_start_options)

REPO = Path(__file__).resolve().parents[2]
CLOUD = REPO / "docker" / "cloud"
# provider type -> the object store scheme its nodes reach with their instance credentials
STORES = {"aws": "s3", "gcp": "gs"}
CONFIGS = sorted(CLOUD.glob("*.yaml"))


@functools.cache
def _config(name: str) -> dict[str, Any]:
    return yaml.safe_load((CLOUD / name).read_text())


def _ray_up_checks(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does to a config before any cloud call (ray.autoscaler._private.commands._bootstrap_config):
    the provider's defaults merged in, then the schema and Ray's consistency checks. Returns the filled config."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    filled = prepare_config(copy.deepcopy(config))
    validate_config(filled)
    return filled


def _options(name: str) -> dict[str, str]:
    """The `--env KEY=VALUE` items of the config's docker run options."""
    env = {}
    for option in _config(name)["docker"]["run_options"]:
        tokens = shlex.split(option)
        if tokens[0] == "--env":
            key, _, value = tokens[1].partition("=")
            env[key] = value
    return env


def _command(commands: list[str], program: tuple[str, ...]) -> list[str]:
    """The one shell command among `commands` that runs `program` (first, or after `;`, `||`, `&&`, `nohup` or an
    environment assignment), as tokens."""
    found = []
    for line in commands:
        tokens = shlex.split(line)
        starts = [i for i, t in enumerate(tokens) if tuple(tokens[i:i + len(program)]) == program
                  and (i == 0 or tokens[i - 1] in (";", "||", "&&", "nohup") or tokens[i - 1].endswith(";")
                       or "=" in tokens[i - 1])]
        found += [tokens[i:] for i in starts]
    assert len(found) == 1, f"{' '.join(program)}: {len(found)} commands in {commands}"
    return found[0]


def test_there_is_a_config_per_cloud():
    assert {p.name for p in CONFIGS} == {"aws.yaml", "gcp.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_passes_ray_ups_schema_and_checks(path):
    config = _config(path.name)
    filled = _ray_up_checks(config)
    assert filled["provider"]["type"] == path.stem
    assert filled["head_node_type"] in filled["available_node_types"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_the_schema_check_refuses_a_misspelt_field(path):
    """The check above can fail: Ray's schema closes the top level and the docker section."""
    for broken in ({"idle_timeout_minute": 10}, {"docker": {**_config(path.name)["docker"], "imgae": "x"}},
                   {"max_workers": "eight"}):
        config = {**copy.deepcopy(_config(path.name)), **broken}
        with pytest.raises(jsonschema.ValidationError):
            _ray_up_checks(config)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_on_demand_head_without_gpu_and_spot_gpu_workers_from_zero(path):
    config = _config(path.name)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}, "trials must not land on the head (it runs the driver and MLflow)"
    workers = {name: t for name, t in types.items() if name != config["head_node_type"]}
    assert workers
    spot = {"aws": lambda n: n.get("InstanceMarketOptions", {}).get("MarketType") == "spot",
            "gcp": lambda n: n.get("scheduling", {}).get("provisioningModel") == "SPOT"}[config["provider"]["type"]]
    assert not spot(head["node_config"]) and "preemptible" not in str(head["node_config"]), "the head must be on-demand"
    for name, worker in workers.items():
        assert worker["min_workers"] == 0, f"{name}: must scale from zero"
        assert 0 < worker["max_workers"] <= config["max_workers"], name
        assert worker["resources"].get("GPU", 0) >= 1 and worker["resources"].get("CPU", 0) >= 1, name
        assert spot(worker["node_config"]), f"{name}: not a spot node"
    assert config["provider"]["cache_stopped_nodes"] is False, "a removed spot node must be terminated, not stopped"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_node_runs_the_project_image_with_token_auth(path):
    config = _config(path.name)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert config["docker"]["image"].rsplit("/", 1)[-1] == f"mutexmatch:{version}"
    assert not any(k.endswith("image") for t in config["available_node_types"].values() for k in t.get("docker", {}))
    assert _options(path.name)["RAY_AUTH_MODE"] == "token"
    assert config["file_mounts"] == {"~/.ray/auth_token": "~/.ray/auth_token"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_ray_start_commands_are_real_and_the_head_runs_the_autoscaler(path):
    config = _config(path.name)
    head = _command(config["head_start_ray_commands"], ("ray", "start"))
    worker = _command(config["worker_start_ray_commands"], ("ray", "start"))
    for tokens in (head, worker):
        unknown = {t.split("=", 1)[0] for t in tokens[2:] if t.startswith("--")} - _ray_start_options()
        assert not unknown, f"`ray start` has no {sorted(unknown)}"
    assert "--head" in head and _option_value(head, "--autoscaling-config") == "~/ray_bootstrap_config.yaml"
    assert _option_value(head, "--dashboard-host") == "127.0.0.1", "reach the dashboard through `ray dashboard` (SSH)"
    assert _option_value(worker, "--address") == f"$RAY_HEAD_IP:{_option_value(head, '--port')}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_mlflow_server_on_the_head_and_storage_in_the_providers_object_store(path):
    from mlflow.server.security_utils import is_allowed_host_header

    config = _config(path.name)
    server = _command(config["head_start_ray_commands"], ("mlflow", "server"))
    server = server[:next((i for i, t in enumerate(server) if t.startswith(">")), len(server))]
    unknown = {t for t in server[2:] if t.startswith("--")} - _option_names(_mlflow_server_command())
    assert not unknown, f"`mlflow server` has no {sorted(unknown)}"

    env = _options(path.name)
    tracking = urlparse(env["MLFLOW_TRACKING_URI"])
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    assert env["MLFLOW_TRACKING_URI"] == compose["x-ray-env"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert _option_value(server, "--port") == str(tracking.port)
    # started only if nothing answers on that port yet (a second `ray up` restarts Ray, not MLflow)
    probe = re.search(r"create_connection\(\('127\.0\.0\.1', (\d+)\)", " ".join(config["head_start_ray_commands"]))
    assert probe and probe.group(1) == str(tracking.port)
    allowed = _option_value(server, "--allowed-hosts").split(",")
    assert is_allowed_host_header(allowed, tracking.netloc) and is_allowed_host_header(allowed, "127.0.0.1:5000")
    # the name the nodes use resolves to the head: workers get RAY_HEAD_IP, the head itself loopback
    assert any("mlflow" in c and "/etc/hosts" in c and "${RAY_HEAD_IP:-127.0.0.1}" in c
               for c in config["initialization_commands"])

    scheme = STORES[config["provider"]["type"]]
    storage, artifacts = urlparse(env["MUTEXMATCH_STORAGE"]), urlparse(_option_value(server, "--artifacts-destination"))
    assert storage.scheme == artifacts.scheme == scheme and storage.netloc == artifacts.netloc
    backend = _option_value(server, "--backend-store-uri")
    mounted = config["docker"]["head_run_options"][0].split()[-1].split(":")[1]
    assert backend.startswith(f"sqlite:///{mounted}/"), "the MLflow store must sit on the head's mounted volume"
