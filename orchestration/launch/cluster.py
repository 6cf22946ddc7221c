"""The Ray cluster a sweep runs on: connect (or start a local Ray) and check that it can run the trials at all."""

from __future__ import annotations

import logging
import os
from typing import Any

from orchestration.launch.launch import SweepError
from orchestration.spec.models import Resources

__all__ = ["check_resources", "init_ray"]


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
    return {"cpu": resources.cpu, "gpu": gpu}, warns


def init_ray() -> bool:
    """Connect to ``$RAY_ADDRESS`` (a cluster, or the one running this ``ray job``) or start a local Ray.
    Returns True if this call initialised Ray (so the driver shuts it down at the end)."""
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address="auto", logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    return True
