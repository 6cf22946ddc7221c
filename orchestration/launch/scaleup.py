"""An autoscaling Ray cluster grown to one trial's size before the launch check (issue 31 item 4): a cluster of
spot GPU workers starts with none, and the check that refuses a GPU request no alive node can hold would refuse
exactly that cluster. When the cluster's autoscaler can add a node that holds a trial, the launch asks it for one
(``ray.autoscaler.sdk.request_resources``) and waits, with a limit it prints, instead of refusing.

What Ray's GCS says about an autoscaler, read by :func:`read_autoscaler`:

- its node types, when it reports them: the ``ClusterConfig`` (each node group's resources and maximum count) that
  ``ray._private.state.state.get_cluster_config()`` returns, the source of Ray Train's own check of whether a
  worker group can ever fit (``get_max_resources_from_cluster_config``). A request no node type holds is refused at
  once, naming the types.
- that one runs, when its node types are not reported: Ray's v2 autoscaler is on (``is_autoscaler_v2``), or the v1
  monitor's status (``__autoscaling_status``, what ``ray status`` prints; written by ``ray up``'s and KubeRay's
  autoscaler) names node types of a configuration. A cluster started without one still has that monitor, in
  read-only mode, which names every node ``node_<node id>`` (``ray.autoscaler._private.util.
  format_readonly_node_type``): such a cluster cannot grow, and the request is refused as before.

The decision (:func:`scale_up_target`) and the wait (:func:`wait_for_node`) take the cluster's state as arguments, so
tests drive them with a faked cluster.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from orchestration.launch.launch import SweepError

__all__ = ["NodeType", "Autoscaler", "SCALE_UP_TIMEOUT_ENV", "DEFAULT_SCALE_UP_TIMEOUT_S", "scale_up_timeout",
           "trial_bundles", "fits", "holds", "describe", "scale_up_target", "node_types_of",
           "autoscaler_from_status", "read_autoscaler", "wait_for_node"]

SCALE_UP_TIMEOUT_ENV = "MUTEXMATCH_SCALE_UP_TIMEOUT_S"
# A spot GPU VM or pod is typically up in 3-10 minutes; half an hour allows for a retry on other capacity.
DEFAULT_SCALE_UP_TIMEOUT_S = 1800.0
# The node type name Ray's read-only monitor gives each node of a cluster without an autoscaler.
_READONLY_TYPE = re.compile(r"node_[0-9a-f]{40,}")


@dataclass(frozen=True)
class NodeType:
    """A node type the autoscaler may add: its resources and how many of it at most (-1: no limit)."""

    name: str
    resources: Mapping[str, float]
    max_count: int

    def describe(self) -> str:
        held = ", ".join(f"{v:g} {k}" for k, v in sorted(self.resources.items()) if k in ("CPU", "GPU"))
        return f"{self.name} ({held or 'no CPU/GPU'}; " + ("no limit)" if self.max_count < 0
                                                            else f"up to {self.max_count})")


@dataclass(frozen=True)
class Autoscaler:
    """A running autoscaler; ``node_types`` is None when it does not report them."""

    node_types: tuple[NodeType, ...] | None


def scale_up_timeout(env: Mapping[str, str] = os.environ) -> float:
    """The wait's limit in seconds: ``$MUTEXMATCH_SCALE_UP_TIMEOUT_S`` or 30 minutes."""
    raw = env.get(SCALE_UP_TIMEOUT_ENV, "")
    if not raw.strip():
        return DEFAULT_SCALE_UP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise SweepError(f"{SCALE_UP_TIMEOUT_ENV}={raw!r}: must be a positive number of seconds "
                         f"(default {DEFAULT_SCALE_UP_TIMEOUT_S:g})")
    return value


def trial_bundles(cpu: float, gpu: float, workers: int = 1) -> list[dict[str, float]]:
    """One trial's resources as Ray names them (the zero ones left out): one bundle per worker of the trial."""
    bundle = {k: float(v) for k, v in (("CPU", cpu), ("GPU", gpu)) if v > 0}
    return [dict(bundle) for _ in range(workers)] if bundle else []


def fits(bundle: Mapping[str, float], resources: Mapping[str, float]) -> bool:
    return all(resources.get(k, 0.0) >= v for k, v in bundle.items())


def holds(bundles: Sequence[Mapping[str, float]], nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the alive ``nodes`` hold every bundle at once (each on one node, first fit)."""
    free = [dict(r) for r in _alive(nodes)]
    for bundle in bundles:
        node = next((r for r in free if fits(bundle, r)), None)
        if node is None:
            return False
        for k, v in bundle.items():
            node[k] -= v
    return True


def _alive(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, float]]:
    return [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", False))]


def scale_up_target(bundles: Sequence[Mapping[str, float]], nodes: Sequence[Mapping[str, Any]],
                    autoscaler: Autoscaler | None) -> str | None:
    """What to wait for, or None when there is nothing to wait for: the alive nodes already hold a trial's
    ``bundles``, or no autoscaler runs (the launch check then decides as for a fixed cluster). Raises SweepError
    when the autoscaler reports its node types and none of them can hold a bundle."""
    if not bundles or holds(bundles, nodes) or autoscaler is None:
        return None
    bundle = bundles[0]  # a trial's workers are alike
    if autoscaler.node_types is None:
        return "the cluster's autoscaler to add a node that holds it (it does not report its node types)"
    addable = [t for t in autoscaler.node_types if t.max_count != 0 and fits(bundle, t.resources)]
    if not addable:
        known = "; ".join(t.describe() for t in autoscaler.node_types) or "none"
        raise SweepError(f"one trial needs {describe(bundles)}: the alive nodes of the Ray cluster do not hold it "
                         f"and no node type its autoscaler can add holds {describe(bundle)} (node types: {known}); "
                         "lower `resources` in the sweep YAML or add such a node type to the cluster")
    return "the autoscaler to add one of: " + "; ".join(t.describe() for t in addable)


def node_types_of(config: Any) -> tuple[NodeType, ...] | None:
    """The node types of an ``autoscaler_pb2.ClusterConfig`` (None when there is no config or it has none)."""
    groups = list(getattr(config, "node_group_configs", None) or [])
    if not groups:
        return None
    return tuple(NodeType(g.name, {k: float(v) for k, v in g.resources.items()}, int(g.max_count))
                 for g in groups)


def autoscaler_from_status(status_json: bytes | str | None) -> bool:
    """Whether the v1 monitor's status (``__autoscaling_status``) is that of an autoscaler with a configuration,
    not the read-only monitor of a cluster started without one."""
    if not status_json:
        return False
    report = json.loads(status_json).get("autoscaler_report") or {}
    names = [*(report.get("active_nodes") or {}), *(report.get("idle_nodes") or {}),
             *(report.get("pending_launches") or {}), *[p[1] for p in report.get("pending_nodes") or []]]
    return any(not _READONLY_TYPE.fullmatch(str(n)) for n in names)


def read_autoscaler() -> Autoscaler | None:
    """The connected Ray cluster's autoscaler as its GCS reports it (the module docstring), or None."""
    import ray._private.state
    from ray._private import ray_constants
    from ray.autoscaler.v2.utils import is_autoscaler_v2
    from ray.experimental.internal_kv import _internal_kv_get

    types = node_types_of(ray._private.state.state.get_cluster_config())
    if types:
        return Autoscaler(types)
    if is_autoscaler_v2() or autoscaler_from_status(_internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)):
        return Autoscaler(None)
    return None


def describe(bundles: Sequence[Mapping[str, float]] | Mapping[str, float]) -> str:
    """`1 CPU, 0.5 GPU`; `2 workers of 1 CPU, 0.5 GPU` for a trial that spans workers."""
    if isinstance(bundles, Mapping):
        return ", ".join(f"{v:g} {k}" for k, v in bundles.items())
    one = describe(bundles[0]) if bundles else "nothing"
    return one if len(bundles) == 1 else f"{len(bundles)} workers of {one}"


def wait_for_node(bundles: Sequence[Mapping[str, float]], target: str, timeout_s: float, *,
                  nodes: Callable[[], list[dict[str, Any]]], request: Callable[[list[dict[str, float]]], None],
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                  say: Callable[[str], None] = print, poll_s: float = 5.0, report_s: float = 60.0
                  ) -> list[dict[str, Any]] | None:
    """Ask the autoscaler for the nodes that hold one trial's ``bundles`` (``request``:
    ``request_resources(bundles=...)``) and poll ``nodes`` (``ray.nodes``) until the alive ones do: returns the
    nodes then, or None after ``timeout_s``. The request is withdrawn either way, so it keeps no node alive after
    the sweep; Tune's own pending trials keep the autoscaler growing from there."""
    start = clock()
    what = describe(bundles)
    say(f"[sweep] one trial needs {what} and the alive nodes of the Ray cluster do not hold it: waiting up to "
        f"{_minutes(timeout_s)} for {target} ({SCALE_UP_TIMEOUT_ENV} sets the limit in seconds)")
    request([dict(b) for b in bundles])
    try:
        last_report = start
        while True:
            current = nodes()
            if holds(bundles, current):
                say(f"[sweep] the Ray cluster holds {what} after {_minutes(clock() - start)}")
                return current
            now = clock()
            if now - start >= timeout_s:
                return None
            if now - last_report >= report_s:
                say(f"[sweep] still waiting for nodes that hold {what}: {_minutes(now - start)} of "
                    f"{_minutes(timeout_s)}")
                last_report = now
            sleep(min(poll_s, max(timeout_s - (now - start), 0.0)))
    finally:
        request([])


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
