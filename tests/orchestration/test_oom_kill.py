"""A trial's worker killed by Ray's memory monitor (a loaded machine's quickstart, node at 93% of 23.5 GB): Ray fails
the trial's actor task with ``ray.exceptions.OutOfMemoryError``, which Tune's actor manager (Ray 2.60,
``ray/air/execution/_internal/actor_manager.py``, ``_actor_task_failed``) knows as neither an actor nor a task error:
it raised ``RuntimeError("Caught unexpected exception: …")`` out of ``Tuner.fit`` and the driver ended in
"failed unexpectedly: RuntimeError". The kill is a trial failure that Tune retries, said in one line."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
from ray import cloudpickle  # Tune pickles a trial's error with it
from ray.air.execution._internal.actor_manager import RayActorManager
from ray.exceptions import OutOfMemoryError, RayActorError

from orchestration.launch.oomkill import KilledForMemory, memory_kill_line, tolerate_memory_kills
from orchestration.launch.progress import ProgressPrinter

# Ray 2.60's message, as Ray's real memory monitor gave it on this machine (a Tune trial filling memory under
# RAY_memory_usage_threshold=0.127; the object store and considered-worker lists shortened)
RAY_MESSAGE = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 192.0.2.2, ID: 7bbe21d5) "
    "was 2.99GB used / 23.54GB limit (0.127059)\nOOM kill reason: Memory usage 3211563008B exceeded threshold of "
    "3210000000B (12.7% of 25276194816B limit)\nObject store memory usage: [- objects spillable: 0\n]\nRay killed 1 "
    "worker(s) based on the killing policy\nTo see more information about memory usage on this node, use `ray logs "
    "raylet.out -ip 192.0.2.2`\nTop 10 memory users: PID\tMEM(GB)\tCOMMAND\n11137\t0.99\t.venv/bin/python -m pytest "
    "-q --durations=20 -m not heavy\n14825\t0.62\t.venv/bin/python /tmp/oomw/real.py bug\nRefer to the documentation "
    "on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/"
    "debug-apps/debug-memory.html.")
# the message of Ray releases before 2.56's OOM killing policy
OLDER_MESSAGE = (
    "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.5, ID: 9a3f) where the "
    "task (actor ID: 4b1c, name=ImplicitFunc.__init__, pid=81234, memory used=1.20GB) was running was "
    "21.86GB / 23.50GB (0.930213), which exceeds the memory usage threshold of 0.92. Ray killed this worker (ID: "
    "77aa) because it was the most recently scheduled task.")


def _failed_actor_task() -> tuple[RayActorManager, SimpleNamespace, list]:
    """A bare actor manager and a tracked actor task whose error callbacks record what Tune's controller gets."""
    got: list = []
    manager = object.__new__(RayActorManager)          # no Ray cluster: only the failure path is exercised
    manager._failed_actor_ids = set()
    manager._cleanup_actor = lambda tracked_actor: got.append(("cleaned", tracked_actor))
    actor = SimpleNamespace(actor_id="4b1c", _on_error=lambda a, e: got.append(("actor", e)))
    task = SimpleNamespace(_tracked_actor=actor, _on_error=lambda a, e: got.append(("task", e)))
    return manager, task, got


def test_a_memory_kill_reaches_tune_as_the_trial_actors_failure() -> None:
    tolerate_memory_kills()
    tolerate_memory_kills()   # once per process, whatever the number of phases
    manager, task, got = _failed_actor_task()
    manager._actor_task_failed(task, OutOfMemoryError(RAY_MESSAGE))   # raised RuntimeError before
    assert [kind for kind, _ in got] == ["cleaned", "actor", "task"]
    error = got[1][1]
    # a RayActorError: Tune's Trial.handle_error counts it as a failure (not a preemption) and retries the trial
    assert isinstance(error, RayActorError) and isinstance(error, KilledForMemory) and not error.preempted
    assert "2.99GB used / 23.54GB limit" in str(error)
    assert manager._failed_actor_ids == {"4b1c"}


def test_a_memory_kill_while_the_trial_starts_reaches_tune_as_its_actors_failure() -> None:
    """Killed in the trainable's ``__init__`` (seen in a real sweep), Tune got the bare OutOfMemoryError: a retry,
    but no line of ours and Tune's traceback with Ray's 60-line message."""
    tolerate_memory_kills()
    manager, task, got = _failed_actor_task()
    actor = task._tracked_actor
    actor._on_stop = None
    manager._actor_start_failed(tracked_actor=actor, exception=OutOfMemoryError(RAY_MESSAGE))  # Ray's call
    errors = [e for kind, e in got if kind == "actor"]
    assert len(errors) == 1 and isinstance(errors[0], KilledForMemory) and str(errors[0]) == RAY_MESSAGE


def test_other_unknown_failures_still_raise() -> None:
    tolerate_memory_kills()
    manager, task, _ = _failed_actor_task()
    with pytest.raises(RuntimeError, match="Caught unexpected exception"):
        manager._actor_task_failed(task, ValueError("not a memory kill"))


def test_the_error_survives_tunes_pickled_error_file() -> None:
    error = KilledForMemory(RAY_MESSAGE)
    for back in (pickle.loads(pickle.dumps(error)), cloudpickle.loads(cloudpickle.dumps(error))):
        assert type(back) is KilledForMemory and str(back) == RAY_MESSAGE and not back.preempted


def test_one_line_naming_the_memory_and_what_to_do() -> None:
    line = memory_kill_line(KilledForMemory(RAY_MESSAGE))
    assert "\n" not in line and "unexpectedly" not in line and "bug" not in line
    assert ("(the node's memory at 2.99GB / 23.54GB (12.7%), over Ray's threshold of 12.7%; largest user 0.99 GB, "
            "pid 11137: .venv/bin/python -m pytest -q --durations=20 -m not heavy); ") in line
    older = memory_kill_line(KilledForMemory(OLDER_MESSAGE))
    assert "(the node's memory at 21.86GB / 23.50GB (93.0%), over Ray's threshold of 92.0%); " in older
    for knob in ("--max-concurrent", "resources", "RAY_memory_usage_threshold", "--resume"):
        assert knob in line
    # a message of another Ray release: still one line, with Ray's first sentence
    other = memory_kill_line(KilledForMemory("Worker killed: low memory.\nsee the raylet log"))
    assert "\n" not in other and "Worker killed: low memory." in other


def _trial(error: Exception | None, folder) -> SimpleNamespace:
    """A Tune trial as the callbacks see it after ``Trial.handle_error``: a RayActorError pickled in its folder."""
    pickled = None
    if error is not None:
        pickled = folder / "error.pkl"
        pickled.write_bytes(cloudpickle.dumps(error))
    return SimpleNamespace(trial_id="abc_00001", config={"trial": "fixmatch/fold2"}, error_file="/x/error.txt",
                           last_result={}, pickled_error_file=pickled and str(pickled))


def test_the_driver_says_the_kill_in_one_line_and_the_retry(capsys, tmp_path) -> None:
    printer = ProgressPrinter()
    printer.on_trial_recover(0, [], _trial(KilledForMemory(RAY_MESSAGE), tmp_path))
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert out[0].startswith("[trial abc_00001] fixmatch/fold2: killed by Ray's out-of-memory guard")
    assert "restarting from its last checkpoint" in out[0] and "2.99GB / 23.54GB" in out[0]
    printer.on_trial_error(0, [], _trial(KilledForMemory(RAY_MESSAGE), tmp_path))
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no retry left" in out[0] and "--resume" in out[0]
    printer.on_trial_recover(0, [], _trial(None, tmp_path))    # any other failure: the line it had
    assert capsys.readouterr().out.strip() == ("[trial abc_00001] failed, restarting from its last checkpoint: "
                                               "fixmatch/fold2")


def test_tunes_traceback_is_left_out_for_a_memory_kill(caplog) -> None:
    """Tune logs "Trial task failed" with the error's traceback and Ray's ~60-line message per attempt; the line above
    says it (any other actor failure keeps Tune's traceback)."""
    import logging

    from orchestration.launch.progress import TUNE_CONTROLLER_LOGGER, quiet_said_failures

    quiet_said_failures()
    for error, shown in ((KilledForMemory(RAY_MESSAGE), False), (RayActorError(error_msg="actor died"), True)):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger=TUNE_CONTROLLER_LOGGER):
            # Tune's own call (ray/tune/execution/tune_controller.py, _trial_task_failure)
            logging.getLogger(TUNE_CONTROLLER_LOGGER).error("Trial task failed for trial f_1", exc_info=error)
        assert ("Trial task failed" in caplog.text) is shown
