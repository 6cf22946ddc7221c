"""What a run will cost, measured: seconds per training step and per evaluation of a config on a device, and the
line the trainer prints before step 1 (steps, ETA, output folder), with the confirmation a long CPU run asks for.

A throwaway :class:`mutexmatch.training.Trainer` of the same config (its own temporary run folder, the same dataset
in memory) runs ``warmup`` steps, then ``steps`` timed ones free-running (one device synchronisation at the end);
one evaluation is timed on a slice of the test set and scaled to a whole evaluation. The run itself is built
afterwards and seeded afresh, so measuring changes none of its numbers. The sweep's ``--dry-run``
(``orchestration.launch.cost``) measures with the same function.

The trainer, torch and the datasets are imported where a measurement needs them, so that :class:`StepCost` and
:func:`format_duration` stay importable without them (``orchestration.status`` reads only those).
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mutexmatch.config import RunConfig, parse_config
from mutexmatch.dotted import deep_merge
from mutexmatch.training.runfolder import RunFolder

__all__ = ["StepCost", "measure_cost", "format_duration", "run_cost_line", "confirm_cost", "checkpoint_steps_done",
           "measure_run", "LONG_CPU_RUN_S", "MEASURED_FROM_STEPS"]

_EVAL_SLICE = 256
LONG_CPU_RUN_S = 3600.0       # a CPU run longer than this asks for --yes (or warns, without a terminal)
MEASURED_FROM_STEPS = 100     # shorter runs start at once: measuring would cost a noticeable share of them


@dataclass(frozen=True)
class StepCost:
    step_s: float
    eval_s: float
    device: str

    def trial_seconds(self, iterations: int, evaluations: int) -> float:
        return iterations * self.step_s + evaluations * self.eval_s


def measure_cost(raw: dict[str, Any], *, device: str, num_threads: int, warmup: int = 2, steps: int = 5,
                 eval_repeats: int = 1, bundle: Any = None) -> StepCost:
    """Seconds per training step (``steps`` steps free-running: back to back, one synchronisation at the end, as
    training runs them) and per evaluation (best of ``eval_repeats`` timings) of the config ``raw`` on ``device``;
    ``bundle``: the dataset already in memory (else it is loaded)."""
    from mutexmatch.training.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="mm_cost_") as tmp:
        threads = raw.get("train", {}).get("num_threads") or num_threads
        cfg = parse_config(deep_merge(raw, {"output_dir": tmp, "train": {"device": device, "num_threads": threads,
                                                                            "progress": False}}))
        trainer = Trainer(cfg, bundle=bundle)
        try:
            for _ in range(warmup):
                trainer.time_step()
            step_s = trainer.time_steps(steps)
            trainer.time_evaluation(8)  # the first call pays one-off set-up costs
            eval_s = min(trainer.time_evaluation(_EVAL_SLICE) for _ in range(eval_repeats))
            return StepCost(step_s, eval_s, trainer.device.type)
        finally:
            trainer.close()


def measure_run(cfg: RunConfig, done: int) -> tuple[StepCost | None, Any]:
    """(the cost of ``cfg`` on its own device, the dataset the measurement loaded for the run to reuse); (None,
    None) when fewer than :data:`MEASURED_FROM_STEPS` steps are left."""
    if cfg.train.iterations - done < MEASURED_FROM_STEPS or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None, None   # data parallel (torchrun): one process's step is not the run's; nor ranks' agreement
    import torch

    from mutexmatch.data.load import load_dataset
    from mutexmatch.training.device import resolve_device
    from mutexmatch.training.memory import check_memory

    d = cfg.data
    check_memory(cfg, resolve_device(cfg.train.device))   # as the run checks it, before the data is loaded
    bundle = load_dataset(d.dataset, d.root, download=d.download, svhn_extra=d.svhn_extra, image_size=d.image_size,
                          normalization=d.normalization)
    cost = measure_cost(cfg.model_dump(mode="json"), device=cfg.train.device,
                        num_threads=cfg.train.num_threads or torch.get_num_threads(), warmup=1, steps=3,
                        bundle=bundle)
    return cost, bundle


def format_duration(s: float | None) -> str:
    """Seconds for people: ``45 s``, ``12.5 min``, ``10.3 h``, ``102.7 d`` (None: ``unknown``)."""
    if s is None:
        return "unknown"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:,.1f} h" if s < 10 * 86400 else f"{s / 86400:,.1f} d"


def run_cost_line(cfg: RunConfig, done: int, cost: StepCost | None) -> str:
    """``[train] 1,000 steps (10 evaluations) on cpu, ETA ≈ 3.2 min (0.19 s/step, 0.4 s/evaluation, measured);
    output: runs/x``. ``done``: steps already trained (a resumed run); ``cost`` None: not measured (a short run)."""
    t = cfg.train
    left = t.iterations - done
    if left <= 0:  # a --resume of a finished run: nothing to estimate (was "0 steps (steps 51–50)")
        return f"[train] already finished at step {t.iterations:,}, nothing to do; output: {cfg.output_dir}"
    evals = -(-t.iterations // t.eval_interval) - done // t.eval_interval
    steps = f"{left:,} steps" + (f" (steps {done + 1:,}–{t.iterations:,})" if done else "")
    if cost is None:
        eta = f"ETA not measured (under {MEASURED_FROM_STEPS} steps)"
    else:
        eta = (f"ETA ≈ {format_duration(cost.trial_seconds(left, evals))} ({cost.step_s:.3g} s/step, "
               f"{cost.eval_s:.3g} s/evaluation, measured)")
    if cost is None:
        from mutexmatch.training.device import resolve_device

        device = resolve_device(t.device).type
    else:
        device = cost.device
    return f"[train] {steps}, {evals:,} evaluations on {device}, {eta}; output: {cfg.output_dir}"


def confirm_cost(cfg: RunConfig, done: int, cost: StepCost | None, *, assume_yes: bool,
                 stdin: TextIO | None = None, err: TextIO | None = None) -> bool:
    """Print :func:`run_cost_line`; a CPU run whose ETA exceeds :data:`LONG_CPU_RUN_S` then asks (a terminal) or
    warns loudly (no terminal: a script or a job goes on). False: the user declined, nothing was trained."""
    stdin, err = stdin or sys.stdin, err or sys.stderr
    print(run_cost_line(cfg, done, cost), file=err, flush=True)
    if cost is None or cost.device != "cpu" or assume_yes:
        return True
    t = cfg.train
    seconds = cost.trial_seconds(t.iterations - done, -(-t.iterations // t.eval_interval) - done // t.eval_interval)
    if seconds <= LONG_CPU_RUN_S:
        return True
    fix = (f"lower train.iterations (--set train.iterations=N), use a GPU (--set train.device=cuda), or pass "
           f"--yes to start it")
    if stdin.isatty():
        print(f"[train] this CPU run takes ≈ {format_duration(seconds)}. Start it? [y/N] ", end="", file=err,
              flush=True)
        answer = stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return True
        print(f"[train] not started; nothing was written. To go on: {fix}", file=err, flush=True)
        return False
    bar = "!" * 78
    print(f"{bar}\nWARNING: this CPU run takes ≈ {format_duration(seconds)} ({t.iterations - done:,} steps). "
          f"Stop it (Ctrl+C) and {fix.replace(', or pass --yes to start it', '')}; --yes silences this warning."
          f"\n{bar}", file=err, flush=True)
    return True


def checkpoint_steps_done(output_dir: str | Path) -> int:
    """Steps a run folder's newest checkpoint holds (0: none), for the ETA of a resumed run."""
    from mutexmatch.training.checkpoint import list_checkpoints

    found = list_checkpoints(RunFolder(output_dir).checkpoints)
    return found[-1][0] if found else 0
