"""The Ray cluster a sweep runs on: connect (or start a local Ray) and check that it can run the trials at all
(an autoscaling cluster first grown to one trial's size: ``scaleup.py``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from orchestration.launch.launch import SweepError
from orchestration.spec.models import Resources

__all__ = ["check_resources", "check_cluster", "init_ray", "start_local_ray", "loopback_node", "plugin_runtime_env"]


def check_resources(resources: Resources, policy: str, nodes: list[dict[str, Any]]) -> tuple[dict[str, float],
                                                                                              list[str]]:
    """The per-trial request Tune gets, checked against the alive ``nodes`` (``ray.nodes()``): a request no node
    can satisfy would leave trials PENDING forever, so it is refused (a GPU request is dropped with a warning
    under ``policy='drop'``). Returns the request and the warnings."""
    if policy not in ("error", "drop"):
        raise ValueError(f"--gpu-policy={policy!r}: must be `error` or `drop`")
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", False))]
    max_cpu = max((r.get("CPU", 0.0) for r in alive), default=0.0)
    max_gpu = max((r.get("GPU", 0.0) for r in alive), default=0.0)
    total_gpu = sum(r.get("GPU", 0.0) for r in alive)
    warns = []
    gpu = resources.gpu
    if gpu > 0 and total_gpu == 0:
        msg = (f"resources.gpu={gpu:g}: the Ray cluster has no GPU ({len(alive)} node(s), largest has "
               f"{max_cpu:g} CPUs)")
        if policy == "error":
            raise SweepError(msg + "; set `resources: {gpu: 0}` or pass --gpu-policy drop to train on CPU")
        warns.append(msg + "; --gpu-policy drop: trials run on CPU")
        gpu = 0.0
    elif gpu > max_gpu:
        raise SweepError(f"resources.gpu={gpu:g}: no node of the Ray cluster has {gpu:g} GPUs (largest: "
                         f"{max_gpu:g})")
    if resources.cpu > max_cpu:
        raise SweepError(f"resources.cpu={resources.cpu:g}: no node of the Ray cluster has {resources.cpu:g} CPUs "
                         f"(largest: {max_cpu:g})")
    return _worker_groups(resources, {"cpu": resources.cpu, "gpu": gpu}, alive), warns


def _worker_groups(resources: Resources, request: dict[str, float], alive: list[dict[str, float]]
                   ) -> dict[str, float]:
    """``request`` (per worker when ``resources.workers`` > 1) with, for a trial that spans workers, ``workers``
    and ``groups``: how many whole worker groups the cluster's CPUs and GPUs hold at once (Tune's concurrency cap,
    :func:`orchestration.trial.spanning.concurrency_cap`). A group larger than the cluster is refused: its trial
    would wait for resources forever."""
    n = resources.workers
    if n <= 1:
        return request
    groups = []
    for key, field in (("cpu", "CPU"), ("gpu", "GPU")):
        if request[key] > 0:
            fits = sum(int(r.get(field, 0.0) // request[key]) for r in alive)  # workers, node by node
            if fits < n:
                raise SweepError(f"resources.workers={n}: a trial needs {n} workers of {request[key]:g} "
                                 f"{field}s each, and the Ray cluster holds {fits} such workers (its nodes: "
                                 f"{', '.join(f'{r.get(field, 0.0):g}' for r in alive)} {field}s); lower "
                                 f"resources.workers or resources.{key}, or add nodes")
            groups.append(fits // n)
    return {**request, "workers": float(n), "groups": float(min(groups))}


def check_cluster(resources: Resources, policy: str) -> tuple[dict[str, float], list[str]]:
    """:func:`check_resources` against the connected cluster, after growing an autoscaling one to one trial's size:
    when no alive node holds a trial but the cluster's autoscaler can add one (a spot cluster starting with no GPU
    node), the launch asks for it and waits with a printed limit (``orchestration/launch/scaleup.py``) instead of
    refusing. If none joins in time, the launch stops (``--gpu-policy drop``: goes on without the GPU)."""
    import ray
    from ray.autoscaler.sdk import request_resources

    from orchestration.launch import scaleup

    nodes = ray.nodes()
    bundles = scaleup.trial_bundles(resources.cpu, resources.gpu, resources.workers)
    try:
        autoscaler = scaleup.read_autoscaler()
    except Exception as exc:  # noqa: BLE001 - an unreadable autoscaler state must not block a fixed cluster
        print(f"warning: could not read the Ray autoscaler's state ({type(exc).__name__}: {exc}); checking the "
              "cluster as it is now", flush=True)
        autoscaler = None
    target = scaleup.scale_up_target(bundles, nodes, autoscaler)
    if target is not None:
        timeout = scaleup.scale_up_timeout()
        grown = scaleup.wait_for_node(bundles, target, timeout, nodes=ray.nodes,
                                      request=lambda bundles: request_resources(bundles=bundles))
        if grown is None and policy == "error":
            raise SweepError(f"resources: the Ray cluster did not grow to hold {scaleup.describe(bundles)} within "
                             f"{timeout:g} s (waited for {target}): the cloud may have no "
                             f"(spot) capacity now; see `ray status`, set {scaleup.SCALE_UP_TIMEOUT_ENV} to wait "
                             "longer, relaunch with --resume auto later, or pass --gpu-policy drop to train on CPU")
        nodes = grown or ray.nodes()
    return check_resources(resources, policy, nodes)


def init_ray(interrupted: Callable[[], bool] = lambda: False) -> bool:
    """Connect to ``$RAY_ADDRESS`` (a cluster, or the one running this ``ray job``) or start a local Ray
    (:func:`start_local_ray`: retried on a loaded machine; ``interrupted()`` true ends the retries). Returns True
    if this call initialised Ray (so the driver shuts it down at the end)."""
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto", logging_level=logging.WARNING, runtime_env=plugin_runtime_env())
        return True
    return start_local_ray(interrupted)


def plugin_runtime_env() -> dict[str, Any] | None:
    """The job's runtime environment that ships every plugin this driver loaded (:mod:`mutexmatch.plugins`) to
    every trial: Ray's ``py_modules`` copies each one's file or package folder (a plugin inside a package: the
    package) to each worker's import path, and :data:`mutexmatch.plugins.PLUGINS_ENV` names the modules a trial
    imports, so a worker that never saw the files (or the entry points) registers what the driver did. Under
    ``ray job submit`` Ray merges it with the job's (``--working-dir``). None without plugins."""
    from mutexmatch.plugins import PLUGINS_ENV, loaded_plugins

    shipped = [p for p in loaded_plugins() if p.source is not None]
    if not shipped:
        return None
    # `a.b.c` (a file c.py or a folder c/): the folder of its top package `a` is what is shipped
    tops = {str(p.source.parents[p.module.count(".") - 1] if "." in p.module else p.source) for p in shipped}
    return {"py_modules": sorted(tops), "env_vars": {PLUGINS_ENV: ",".join(p.module for p in shipped)}}


START_ATTEMPTS = 3


def _load() -> str:
    return f"a load of {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def start_local_ray(interrupted: Callable[[], bool] = lambda: False, attempts: int = START_ATTEMPTS) -> bool:
    """``ray.init`` of a local Ray, tried up to ``attempts`` times. Ray gives its raylet 30 s to register
    (``ray/_private/node.py``, not configurable), which a loaded machine misses: 5 of 7 local launches at a load
    of 4-15 ended with Ray's exception and "this is a bug ... report it" (issue 40). A failed try's processes are
    ended (by id) before the next, each retry is one line naming the load; the last failure is a
    :class:`SweepError` naming it. False: ``interrupted()`` stopped the retries, nothing runs."""
    import ray

    from orchestration.launch.orphans import describe_children, end_orphans

    for attempt in range(1, attempts + 1):
        before = set(describe_children().split())
        try:
            with loopback_node():
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING,
                         runtime_env=plugin_runtime_env())
            return True
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for its start-up timeout
            error = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            ray.shutdown()
            end_orphans(" ".join(p for p in describe_children().split() if p not in before))
            if interrupted():
                return False
            if attempt == attempts:
                raise SweepError(f"Ray did not start here in {attempts} tries at {_load()} (last: {error}): run the "
                                 "same command when the machine is less busy, or start Ray yourself (`ray start "
                                 "--head`) and point the sweep at it with RAY_ADDRESS") from None
            print(f"[sweep] Ray did not start at {_load()} ({error[:120]}): starting it again (try {attempt + 1} "
                  f"of {attempts})", flush=True)
    return False


# Ray's single-machine switch (ray._private.ray_constants.ENABLE_RAY_CLUSTER, from this variable when Ray is first
# imported): off, the node's address is the loopback one (services.get_node_ip_address).
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_node() -> Iterator[None]:
    """Within the block, a Ray started here takes 127.0.0.1 as its node's address, so its GCS, raylet, workers,
    dashboard agent and runtime-env agent listen on 127.0.0.1 only (issue 33: a local sweep's Ray listened on the
    host's external address and on every interface). Ray 2.60 binds each of them to the node's address, or to every
    interface when that is not loopback, and ``ray.init(_node_ip_address="127.0.0.1")`` does not help: it replaces a
    loopback address by the external one (``services.resolve_ip_for_localhost``). Ray's single-machine mode, the
    default on macOS and Windows, is what keeps it on loopback (measured with ``ss -ltnp``: ``orchestration/README.md``,
    "A local sweep's own Ray listens on 127.0.0.1 only"). The switch is restored afterwards: a driver that later joins a real cluster (a test process) must
    find its node by its external address again."""
    from ray._private import ray_constants

    before_env, before = os.environ.get(SINGLE_MACHINE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE_ENV] = "0"  # the processes Ray starts (they import Ray afresh)
    ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported Ray before the variable was set
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(SINGLE_MACHINE_ENV, None)
        else:
            os.environ[SINGLE_MACHINE_ENV] = before_env
