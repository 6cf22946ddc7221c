"""docker/compose.yaml's services as plain `docker run` containers on one user network, for the local cluster test.

Why not Compose: Debian's docker.io has no `docker compose` v2, and its docker-compose 1.29 does not follow the
Compose Specification that docker/compose.yaml is written to (`name:`, `service_completed_successfully`). So the test
reads the services' commands and environments from docker/compose.yaml — the file users run — and starts each with
`docker run`, substituting only what no registry can serve here (docker/README.md, "Run for real on this machine"):

* postgres: Debian's PostgreSQL 15 (docker/local/postgres.Dockerfile) instead of the postgres:17 image;
* minio: `moto_server` (moto[server], installed in the image by docker/local-base.sh) under the network alias
  `minio`, so compose's AWS_ENDPOINT_URL / MLFLOW_S3_ENDPOINT_URL stay as they are;
* ray-worker: two of them (`ray-worker-1`, `ray-worker-2`, one CPU each) without the GPU reservation; the head
  offers no CPU (RAY_HEAD_NUM_CPUS=0), so every trial runs on a worker and the head runs only the jobs' drivers.

Every published port is bound to 127.0.0.1, on a port free when the stack starts. Containers, the network and the volume carry the
stack's prefix; :meth:`Stack.down` removes exactly those.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker" / "compose.yaml"
POSTGRES_IMAGE = "mutexmatch-postgres:15"
WORKERS = ("ray-worker-1", "ray-worker-2")
# Small enough for a 2-core, shared machine: Ray's object store would take 30 % of the memory by default.
OBJECT_STORE = "--object-store-memory=300000000"
# Inside the cluster the sweep reaches MLflow and S3 by compose's service names (docker/README.md, step 4).
CLUSTER_ARGS = ["--tracking-uri", "http://mlflow:5000", "--storage", "s3://tune/sweeps"]


def submit_command(address: str, sweep_args: list[str], *, wait: bool = True) -> list[str]:
    """`ray job submit --address <head> --working-dir . -- python -m orchestration.sweep <args>`: the command
    docker/README.md gives, the local cluster test runs, and the RayJob's submitter runs (test_kuberay_crds)."""
    return ["ray", "job", "submit", "--address", address, "--working-dir", ".", *([] if wait else ["--no-wait"]),
            "--", "python", "-m", "orchestration.sweep", *sweep_args]


def docker(*args: str, check: bool = True, timeout: float = 300) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip()


def substitute(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` with ``env``; ``$$`` becomes ``$``."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg
        raise KeyError(f"compose.yaml needs {name}: {arg}")

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, value).replace("$$", "$")


@dataclass
class Stack:
    image: str
    prefix: str = field(default_factory=lambda: f"mmcluster-{secrets.token_hex(3)}-")
    secrets: dict[str, str] = field(default_factory=lambda: {
        "POSTGRES_USER": "mlflow", "POSTGRES_PASSWORD": secrets.token_hex(16), "MINIO_ROOT_USER": "mutexmatch",
        "MINIO_ROOT_PASSWORD": secrets.token_hex(16), "RAY_AUTH_TOKEN": secrets.token_hex(24),
        "RAY_HEAD_NUM_CPUS": "0"})
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {**self.secrets, "MUTEXMATCH_IMAGE": self.image}
        self.compose = yaml.safe_load(COMPOSE.read_text())
        self.network = self.prefix + "net"
        self.volume = self.prefix + "postgres-data"

    # -- compose's services -------------------------------------------------------------------------------------

    def service(self, name: str) -> dict[str, Any]:
        return self.compose["services"][name]

    def command(self, service: str) -> list[str]:
        return [substitute(str(c), self.env) for c in self.service(service)["command"]]

    def environment(self, service: str) -> dict[str, str]:
        return {k: substitute(str(v), self.env) for k, v in (self.service(service).get("environment") or {}).items()}

    def container(self, service: str) -> str:
        return self.prefix + service

    def run(self, service: str, image: str, command: list[str], env: dict[str, str], *, alias: str,
            publish: int | None = None, extra: tuple[str, ...] = ()) -> None:
        """``docker run -d`` one container named after ``service`` (its host name too) with the network ``alias``;
        ``publish`` is the container port published on a free 127.0.0.1 port. Secrets travel as ``-e NAME`` with
        the value in this process's environment of the docker CLI, never on its command line."""
        args = ["run", "-d", "--name", self.container(service), "--hostname", service, "--network", self.network,
                "--network-alias", alias, "--label", f"mutexmatch.stack={self.prefix}"]
        if publish:
            # a fixed host port, free now: a container that Docker or the test restarts keeps its address
            self.ports.setdefault(service, _free_port())
            args += ["-p", f"127.0.0.1:{self.ports[service]}:{publish}"]
        for key in env:
            args += ["-e", key]
        proc = subprocess.run(["docker", *args, *extra, image, *command], capture_output=True, text=True,
                              env={**_docker_env(), **env}, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"docker run {service} failed: {proc.stderr.strip()[-2000:]}")

    # -- bring up ------------------------------------------------------------------------------------------------

    def up(self) -> None:
        docker("network", "create", self.network)
        docker("volume", "create", self.volume)
        self.start_postgres()
        self.start_s3()
        self.start_mlflow()
        self.start_head()
        for worker in WORKERS:
            self.start_worker(worker)
        self.wait_workers(len(WORKERS))

    def start_postgres(self) -> None:
        pg = self.service("postgres")["environment"]
        env = {k: substitute(str(v), self.env) for k, v in pg.items()}
        self.run("postgres", POSTGRES_IMAGE, [], env, alias="postgres",
                 extra=("-v", f"{self.volume}:/var/lib/postgresql/data"))
        ready = ["exec", self.container("postgres"), "/usr/lib/postgresql/15/bin/pg_isready", "-h", "127.0.0.1",
                 "-U", env["POSTGRES_USER"], "-d", env["POSTGRES_DB"]]
        until(lambda: subprocess.run(["docker", *ready], capture_output=True).returncode == 0, 120, "postgres ready",
               lambda: self.logs("postgres"))

    def buckets(self) -> list[str]:
        """The buckets compose's minio-init creates (`mc mb --ignore-existing local/mlflow local/tune`)."""
        script = " ".join(self.service("minio-init")["command"])
        return re.findall(r"local/(\w+)", script.split("mc mb", 1)[1])

    def start_s3(self) -> None:
        minio = self.service("minio")
        env = {k: substitute(str(v), self.env) for k, v in minio["environment"].items()}
        port = int(minio["ports"][0].rsplit(":", 1)[1].split()[0])
        self.run("minio", self.image, ["moto_server", "-H", "0.0.0.0", "-p", str(port)], env, alias="minio",
                 publish=port)
        until(lambda: _http_ok(f"http://127.0.0.1:{self.ports['minio']}/moto-api/"), 120, "moto server",
               lambda: self.logs("minio"))
        code = ("import boto3, sys; s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:%d'); "
                "[s3.create_bucket(Bucket=b) for b in sys.argv[1:]]" % port)
        docker("exec", "-e", "AWS_ACCESS_KEY_ID=x", "-e", "AWS_SECRET_ACCESS_KEY=x", "-e", "AWS_DEFAULT_REGION=us-east-1",
               self.container("minio"), "python", "-c", code, *self.buckets())

    def start_mlflow(self) -> None:
        self.run("mlflow", self.image, self.command("mlflow"), self.environment("mlflow"), alias="mlflow",
                 publish=5000, extra=("--init",))
        self.wait_mlflow()

    def running(self, service: str) -> bool:
        """True while the container runs or its restart policy is restarting it; an error once it has stopped."""
        state = docker("inspect", "-f", "{{.State.Status}}", self.container(service), check=False)
        if state not in ("running", "restarting"):
            raise RuntimeError(f"container {service} is {state or 'gone'}:{self.logs(service)}")
        return state == "running"

    def wait_mlflow(self, timeout_s: float = 240) -> None:
        until(lambda: self.running("mlflow") and _http_ok(f"{self.mlflow_url}/health"), timeout_s, "mlflow /health",
               lambda: self.logs("mlflow"))

    def start_head(self) -> None:
        self.run("ray-head", self.image, [*self.command("ray-head"), OBJECT_STORE], self.environment("ray-head"),
                 alias="ray-head", publish=8265, extra=("--init", "--shm-size=512m", *self.restart_policy()))
        self.wait_head()

    def restart_policy(self) -> tuple[str, str]:
        """compose's `restart: unless-stopped` (Docker does not restart a container that `docker kill` stopped, but
        does restart a `ray start` that fails: a head started on a loaded machine can time out waiting for its own
        agents)."""
        return ("--restart", self.compose["x-mutexmatch-image"]["restart"])

    def wait_head(self, timeout_s: float = 300) -> None:
        """The head's GCS answers and the head node is alive in it (a raylet that fails after the GCS started
        exits `ray start`, and the restart policy starts the container again)."""
        def alive() -> bool:
            try:
                return self.running("ray-head") and "ray-head" in self.alive_nodes().values()
            except (OSError, KeyError, ValueError):
                return False
        until(alive, timeout_s, "ray head", lambda: self.logs("ray-head"))

    def start_worker(self, name: str) -> None:
        command = [*self.command("ray-worker"), "--num-cpus=1", OBJECT_STORE]
        self.run(name, self.image, command, self.environment("ray-worker"), alias=name,
                 extra=("--init", "--shm-size=512m", *self.restart_policy()))

    def restart(self, service: str) -> None:
        """`docker start` a stopped or killed service again and wait until it answers."""
        docker("start", self.container(service))
        (self.wait_mlflow if service == "mlflow" else self.wait_head)()

    # -- inspect -------------------------------------------------------------------------------------------------

    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['mlflow']}"

    @property
    def ray_address(self) -> str:
        return f"http://127.0.0.1:{self.ports['ray-head']}"

    @property
    def client_env(self) -> dict[str, str]:
        """What `ray job submit` on the host needs: the token."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.secrets["RAY_AUTH_TOKEN"]}

    def alive_nodes(self) -> dict[str, str]:
        """Node id → host name of the cluster's alive nodes (Ray's state API, with the token)."""
        req = urllib.request.Request(f"{self.ray_address}/nodes?view=summary",
                                     headers={"Authorization": f"Bearer {self.secrets['RAY_AUTH_TOKEN']}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            summary = json.loads(resp.read())["data"]["summary"]
        return {n["raylet"]["nodeId"]: n["hostname"] for n in summary if n["raylet"].get("state") == "ALIVE"}

    def wait_workers(self, n: int, timeout_s: float = 300) -> None:
        def ready() -> bool:
            try:
                return sum(h in WORKERS for h in self.alive_nodes().values()) >= n
            except (OSError, KeyError, ValueError):
                return False
        until(ready, timeout_s, f"{n} ray workers alive", lambda: self.logs(WORKERS[0]) + self.logs(WORKERS[1]))

    def logs(self, service: str, tail: int = 60) -> str:
        proc = subprocess.run(["docker", "logs", "--tail", str(tail), self.container(service)], capture_output=True,
                              text=True)
        return f"\n--- {service} ---\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"

    def published(self) -> list[str]:
        """Every host binding of every container of the stack, as `host_ip:port`."""
        out = []
        for name in docker("ps", "-a", "--filter", f"label=mutexmatch.stack={self.prefix}", "--format",
                           "{{.Names}}").split():
            ports = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Ports}}", name)) or {}
            out += [f"{b['HostIp']}:{b['HostPort']}" for binds in ports.values() for b in binds or []]
        return out

    # -- tear down -----------------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Remove the stack's containers, network and volume; returns what is left of them (should be nothing)."""
        names = docker("ps", "-aq", "--filter", f"label=mutexmatch.stack={self.prefix}", check=False).split()
        if names:
            docker("rm", "-f", "-v", *names, check=False)
        docker("network", "rm", self.network, check=False)
        docker("volume", "rm", self.volume, check=False)
        left = docker("ps", "-aq", "--filter", f"label=mutexmatch.stack={self.prefix}", check=False).split()
        left += [n for n in docker("network", "ls", "-q", "--filter", f"name={self.network}", check=False).split()]
        left += [v for v in docker("volume", "ls", "-q", "--filter", f"name={self.volume}", check=False).split()]
        return left


def _docker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG")}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def until(ok, timeout_s: float, what: str, diagnostics=lambda: "", poll_s: float = 1.0):
    """``ok()``'s first truthy value, polled every ``poll_s``; a TimeoutError with ``diagnostics()`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ok()
        if found:
            return found
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s{diagnostics()}")
