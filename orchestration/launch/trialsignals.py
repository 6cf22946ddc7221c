"""The driver's SIGUSR1 passed on to the trials (issue 31): every running trial of the launch is sent SIGUSR1 on
its own node (its worker's pid and Ray node id are tags of its MLflow run), writes a checkpoint at its next step
boundary and hands it to Tune (:mod:`orchestration.trial.preemption`); the driver waits until their runs are no
longer RUNNING (at most :data:`WAIT_S`), then Tune stops gracefully (:func:`orchestration.launch.interrupts.route_usr1`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from ray.tune import Callback

from orchestration import contract as C
from orchestration.contract.filters import status_is, tag_equals
from orchestration.launch import interrupts
from orchestration.store.store import Store

__all__ = ["PassOnUsr1", "checkpoint_trials", "WAIT_S"]

WAIT_S = 90.0   # SLURM's --signal lead time must cover this plus Tune's stop (the sbatch script asks for more)


class PassOnUsr1(Callback):
    """Tune installs its own SIGUSR1 handler (a graceful stop) when ``fit`` starts, before it sets up the
    callbacks; this one's set-up puts :func:`interrupts.route_usr1` in front of it."""

    def setup(self, **info: Any) -> None:
        interrupts.route_usr1()
        interrupts.stop_if_interrupted()  # a signal that came while fit started, before Tune listened


def checkpoint_trials(store: Store, parent_run_id: str, wait_s: float = WAIT_S) -> list[str]:
    """SIGUSR1 to every RUNNING trial of the launch, then wait until none of their runs is RUNNING; returns the
    run ids still RUNNING after ``wait_s`` (their trials continue from their last evaluation's checkpoint)."""
    runs = list(store.children(parent_run_id, status_is("RUNNING"), tag_equals(C.ROLE, C.ROLE_TRIAL)))
    for run in runs:
        _signal(run.data.tags.get(C.WORKER_PID, ""), run.data.tags.get(C.NODE_ID, ""))
    deadline = time.monotonic() + wait_s
    waiting = [r.info.run_id for r in runs]
    while waiting and time.monotonic() < deadline:
        time.sleep(1.0)
        waiting = [i for i in waiting if store.client.get_run(i).info.status == "RUNNING"]
    print(f"[sweep] SIGUSR1: {len(runs) - len(waiting)} of {len(runs)} running trial(s) wrote a checkpoint"
          + (f"; {len(waiting)} did not within {wait_s:.0f} s (they continue from their last evaluation)"
             if waiting else ""), file=sys.stderr, flush=True)
    return waiting


def _signal(pid: str, node_id: str) -> None:
    """SIGUSR1 to process ``pid`` on Ray node ``node_id``: directly on the driver's node, else by a task pinned
    to that node (a pid means nothing elsewhere)."""
    if not pid.isdigit():
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        if not node_id or node_id == ray.get_runtime_context().get_node_id():
            os.kill(int(pid), signal.SIGUSR1)
            return
        task = ray.remote(num_cpus=0)(_kill_usr1).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
        ray.get(task.remote(int(pid)), timeout=30)
    except Exception as e:  # noqa: BLE001 - a trial that is gone already, a node that left: the rest go on
        print(f"[sweep] warning: SIGUSR1 to trial process {pid} on node {node_id[:12]}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


def _kill_usr1(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        pass
