"""A trial that spans workers (issue 30, ``resources.workers`` > 1): one Tune trial trains as a Ray Train
``TorchTrainer`` of N data-parallel ranks, inside the sweep's Tuner, Optuna search and ASHA.

Who does what:

- The Tune trial's own process (:func:`orchestration.trial.trainable.run_trial`, holding no CPU or GPU of its own:
  :data:`TRIAL_PROCESS_REQUEST`) keeps every job it has in a one-process trial: the MLflow run (opened, continued
  by trial id, FINISHED or FAILED), the :class:`~orchestration.trial.trainable.TrialCallback` and every
  ``tune.report`` with its ``tune.Checkpoint``. It starts the ``TorchTrainer`` (:func:`fit_spanning`) in a thread
  and answers the events rank 0 relays, one at a time.
- Each Ray Train worker (:func:`_worker_loop`) builds :class:`mutexmatch.training.Trainer` on its own output
  folder; Ray Train has initialised the process group (gloo on CPU, NCCL on GPUs), so the trainer trains the
  config's global batch split over the ranks, rank 0 alone writes its run folder and calls callbacks
  (:mod:`mutexmatch.training.distributed`).
- Rank 0's callback (:class:`_Relay`) sends each event over a Ray queue, with the files it names (the
  :meth:`~mutexmatch.training.runfolder.RunFolder.snapshot` of a checkpoint; at the end the final weights and
  checkpoint), and waits for the trial process's answer. The trial process writes the files into its own run
  folder, the mirror of rank 0's, and hands the event, its paths moved there, to the TrialCallback: so checkpoints
  reach Tune through ``tune.report`` exactly as in a one-process trial, which keeps ASHA, Optuna, ``--resume`` and
  restarts working, and rank 0 may run on another node than the trial process. When Tune stops the trial (ASHA,
  an interrupted sweep) the answer is "stop", and rank 0's ``on_eval`` returning True stops every rank.
- A lost worker (its process or node gone) fails Ray Train's worker group (``max_failures=0`` there); the trial
  then fails and Tune's ``FailureConfig`` restarts it from its last Tune checkpoint, which the new attempt hands
  to its rank 0 (:func:`pack_folder`). The MLflow run is continued, and an evaluation already logged is not logged
  again (:class:`~orchestration.trial.tracking.TrialRun`).
"""

from __future__ import annotations

import dataclasses
import queue as queue_mod  # ray.util.queue.Empty derives from queue.Empty
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mutexmatch.training import Callback, EvalEvent, RunFolder, RunSummary, StartEvent
from orchestration.trial.scratch import scratch_root

__all__ = ["Span", "TRIAL_PROCESS_REQUEST", "trial_request", "concurrency_cap", "fit_spanning", "pack_folder",
           "unpack_files", "moved_event", "SpanError"]

# Scheduling token of the trial's own process: no CPU or GPU (its workers hold those), but Tune needs a non-empty
# request. Ray counts "memory" in bytes; this reserves what the process roughly uses (MLflow client, the relay).
TRIAL_PROCESS_REQUEST = {"cpu": 0.0, "gpu": 0.0, "memory": 256 * 2**20}
ANSWER_TIMEOUT_S = 3600.0   # rank 0 waits this long for the trial process before it gives up (the process is gone)
POLL_S = 2.0                # the trial process checks this often whether the worker group ended without a word
STOP_JOIN_S = 120.0         # after "stop", how long the trial process waits for the workers to wind down
GO, STOP = "go", "stop"


class SpanError(RuntimeError):
    """The worker group of a spanning trial ended without finishing the run (a lost worker, a failed rank)."""


@dataclass(frozen=True)
class Span:
    """The worker group of one trial: ``workers`` ranks of ``cpu`` CPUs and ``gpu`` GPUs each; ``storage`` is
    where Ray Train keeps its run state (the sweep's storage, so a multi-node cluster shares it)."""

    workers: int
    cpu: float
    gpu: float
    storage: str


def trial_request(request: dict[str, float], workers: int, storage: str) -> tuple[dict[str, float], Span | None]:
    """What Tune reserves for one trial and its worker group: the checked per-trial ``request`` itself for one
    worker; for ``workers`` > 1, :data:`TRIAL_PROCESS_REQUEST` and the :class:`Span` whose workers each hold
    ``request`` (``groups``, how many worker groups the cluster holds at once, is the launch's)."""
    if workers <= 1:
        return request, None
    span = Span(workers, request["cpu"], request["gpu"], f"{storage.rstrip('/')}/train_runs")
    return dict(TRIAL_PROCESS_REQUEST), span


def concurrency_cap(tune_kwargs: dict[str, Any], groups: float | None) -> dict[str, Any]:
    """``tune_kwargs`` with at most ``groups`` trials at once when nothing caps them yet: a spanning trial's own
    process holds no CPU, so Tune alone would start every trial, each waiting for a worker group."""
    from ray.tune.search import ConcurrencyLimiter

    if not groups or "max_concurrent_trials" in tune_kwargs or isinstance(tune_kwargs.get("search_alg"),
                                                                          ConcurrencyLimiter):
        return tune_kwargs
    return {**tune_kwargs, "max_concurrent_trials": max(1, int(groups))}


# ------------------------------------------------------------------------------------- files between processes
def pack_folder(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` as ``{relative path: bytes}`` (a snapshot to ship to another node)."""
    if not path.is_dir():
        return {}
    return {f.relative_to(path).as_posix(): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def unpack_files(files: dict[str, bytes], dest: Path) -> None:
    """Write :func:`pack_folder`'s ``files`` under ``dest``, replacing each file whole (write, then rename)."""
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.relay.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)


def moved_event(event: Any, src: Path, dest: Path) -> Any:
    """``event`` with every path under ``src`` (rank 0's output folder) moved under ``dest`` (the mirror)."""
    def move(value: Any) -> Any:
        if isinstance(value, RunFolder):
            return RunFolder(move(value.path))
        if isinstance(value, Path) and value.is_relative_to(src):
            return dest / value.relative_to(src)
        return value
    return dataclasses.replace(event, **{f.name: move(getattr(event, f.name)) for f in dataclasses.fields(event)})


def _event_files(event: Any, folder: RunFolder) -> dict[str, bytes]:
    """The files the trial process needs for ``event``: at the start the run's description files (config, split,
    dataset; weights and checkpoints excluded), with a checkpoint its snapshot, at the end also the weights."""
    if isinstance(event, StartEvent):
        return {f.name: f.read_bytes() for f in sorted(folder.path.iterdir()) if f.is_file() and f.suffix != ".pt"
                and not f.name.startswith(".")}
    checkpoint = getattr(event, "checkpoint", None) or getattr(event, "final_checkpoint", None)
    stage = Path(tempfile.mkdtemp(prefix=".relay_", dir=folder.path.parent))
    try:
        if checkpoint is not None:
            folder.snapshot(stage, checkpoint)
        for name in ("best_weights", "final_weights"):
            path = getattr(event, name, None)
            target = stage / Path(path).relative_to(folder.path) if path is not None else None
            if target is not None and Path(path).exists() and not target.exists():  # the snapshot has best_model
                shutil.copy2(path, target)
        return pack_folder(stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# ------------------------------------------------------------------------------------- rank 0's side
class _Relay(Callback):
    """Rank 0's callback: each event (and its files) to the trial process, which answers :data:`GO` or
    :data:`STOP`."""

    def __init__(self, events: Any, answers: Any, folder: RunFolder):
        self.events, self.answers, self.folder = events, answers, folder

    def _send(self, kind: str, event: Any) -> str:
        self.events.put((kind, str(self.folder.path), event, _event_files(event, self.folder)))
        return self.answers.get(timeout=ANSWER_TIMEOUT_S)

    def on_start(self, event: StartEvent) -> None:
        self._send("start", event)

    def on_eval(self, event: EvalEvent) -> bool | None:
        return self._send("eval", event) == STOP or None

    def on_end(self, summary: RunSummary) -> None:
        self._send("end", summary)


def _worker_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker (``train_loop_per_worker``): :func:`train_rank` with its rank."""
    import ray.train

    train_rank(config, ray.train.get_context().get_world_rank())


def train_rank(config: dict[str, Any], rank: int) -> None:
    """One rank's trainer on a fresh folder of this node (rank 0's seeded with the trial's last checkpoint; rank 0
    reads it and hands it to the others), rank 0 relaying its events. Ray Train has initialised the process group,
    which the trainer joins."""
    from mutexmatch.config import parse_config
    from mutexmatch.dotted import deep_merge
    from mutexmatch.training import Trainer

    scratch = scratch_root()  # this node's, not the trial process's
    root = Path(tempfile.mkdtemp(prefix=f"{config['trial_id']}_rank{rank}_", dir=scratch))
    try:
        folder = RunFolder(root / "run")
        if rank == 0 and config["seed_files"]:
            unpack_files(config["seed_files"], folder.path)
        cfg = parse_config(deep_merge(config["raw"], {"output_dir": str(folder.path)}))
        callbacks = [_Relay(config["events"], config["answers"], folder)] if rank == 0 else []
        Trainer(cfg, callbacks=callbacks, resume="auto").fit()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------- the trial process's side
def fit_spanning(span: Span, raw: dict[str, Any], folder: RunFolder, callback: Callback, *, trial_id: str) -> None:
    """Train the trial's config ``raw`` on ``span``'s worker group, rank 0's events handed to ``callback`` with
    their paths in ``folder`` (whose files, restored from Tune's checkpoint, seed rank 0). Returns when the run
    ended; raises :class:`SpanError` when the worker group ended without finishing it, and what ``callback``
    raised (``SystemExit`` when Tune stops the trial) after telling the workers to stop."""
    events, answers = _queues()
    config = {"raw": raw, "trial_id": trial_id, "events": events,
              "answers": answers, "seed_files": pack_folder(folder.path)}
    trainer = _torch_trainer(span, config, trial_id)
    failure: list[BaseException] = []
    thread = threading.Thread(target=_fit_into, args=(trainer, failure), name=f"span-{trial_id}", daemon=True)
    thread.start()
    try:
        _pump(events, answers, folder, callback, thread)
    except BaseException:
        _wind_down(events, answers, thread)
        raise
    thread.join()
    if failure:
        raise SpanError(f"the trial's {span.workers} workers failed: {_one_line(failure[0])}") from failure[0]


def _queues() -> tuple[Any, Any]:
    """Rank 0 → trial process (events with their files) and back (answers): Ray queues, reachable from any node."""
    from ray.util.queue import Queue

    return Queue(actor_options={"num_cpus": 0}), Queue(actor_options={"num_cpus": 0})


def _torch_trainer(span: Span, config: dict[str, Any], trial_id: str) -> Any:
    """The ``TorchTrainer`` of one attempt: its own Ray Train run name, no restarts of its own (Tune restarts the
    trial from its checkpoint, which the MLflow run and the ASHA rungs follow)."""
    import uuid

    import ray.train
    from ray.train.torch import TorchTrainer

    resources = {"CPU": span.cpu, **({"GPU": span.gpu} if span.gpu > 0 else {})}
    return TorchTrainer(
        _worker_loop, train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=span.workers, use_gpu=span.gpu > 0,
                                               resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=f"{trial_id}_{uuid.uuid4().hex[:8]}", storage_path=span.storage,
                                       failure_config=ray.train.FailureConfig(max_failures=0)))


def _fit_into(trainer: Any, failure: list[BaseException]) -> None:
    try:
        trainer.fit()
    except BaseException as e:  # noqa: BLE001 - handed to the trial's thread, which raises it as SpanError
        failure.append(e)


def _pump(events: Any, answers: Any, folder: RunFolder, callback: Callback, thread: threading.Thread) -> None:
    """Rank 0's events to ``callback`` until the run's end event, or until the worker group ends without one."""
    hooks: dict[str, Callable[[Any], Any]] = {"start": callback.on_start, "eval": callback.on_eval,
                                              "end": callback.on_end}
    while True:
        try:
            kind, src, event, files = events.get(timeout=POLL_S)
        except queue_mod.Empty:
            if not thread.is_alive():
                return
            continue
        unpack_files(files, folder.path)
        answer = hooks[kind](moved_event(event, Path(src), folder.path))
        answers.put(STOP if answer else GO)
        if kind == "end":
            return


def _wind_down(events: Any, answers: Any, thread: threading.Thread) -> None:
    """The trial stops (Tune stopped it, or the callback failed): answer every further event "stop" so rank 0
    stops all ranks, and give the workers :data:`STOP_JOIN_S` to end before the trial's process goes."""
    import time

    answers.put(STOP)
    deadline = time.monotonic() + STOP_JOIN_S
    while thread.is_alive() and time.monotonic() < deadline:
        try:
            events.get(timeout=POLL_S)
            answers.put(STOP)
        except queue_mod.Empty:
            pass
        except Exception:  # noqa: BLE001 - the queue's actor is gone with the trial: nothing left to answer
            return


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[-1] if text else ''}"
