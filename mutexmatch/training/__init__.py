"""The trainer: one job per module, and this package's public surface (what orchestration, benchmarks and tests
import).

==================  ===============================================================================================
``loop``            :class:`Trainer`: set-up, the step, evaluation, the loop, its state (read top to bottom)
``network``         the backbone with the algorithm's heads and set-up, its EMA and the forwards a step runs
``batches``         one step's batch: sampler, augmentation generators, views on the device, the prefetcher
``extended_step``   the machinery of an algorithm's StepSpec: views, BatchNorm-frozen and teacher forwards
``evaluation``      test/validation accuracy, the class-wise scores and the reference loss
``class_scores``    balanced accuracy, macro F1, per-class recall, head/medium/tail accuracy off a confusion matrix
``diagnostics``     the step accumulator: named loss terms and per-sample diagnostics, read once per evaluation
``optim``           SGD over the parameter groups, the learning-rate schedule, the fp16 gradient scaler
``ema``             the EMA model
``compiled``        ``train.compile`` / ``train.cuda_graphs`` and what compiling cost
``device``          the training device and the process-wide settings a run makes (threads, determinism, autocast)
``allocator``       glibc's allocator told to keep freed memory (``train.keep_freed_memory``)
``rng``             seeding the global generators, their state in a checkpoint
``memory``          will the run fit: checks before decoding, before the first step, at a failing step
``checkpoint``      atomic checksummed checkpoints and finding the newest good one
``distributed``     data-parallel training: the process group, forwards of this rank's rows gathered, synced BatchNorm
``preemption``      SIGTERM/SIGUSR1 as a flag the loop checks between steps: a checkpoint, then :class:`Preempted`
``runfolder``       every file name of a run folder, the lock, the metrics log, snapshots
``run_files``       the config, split, marker and dataset facts a run writes, and their checks on resume
``callbacks``       the seam: ``on_start``/``on_eval``/``on_end`` with typed events, never the trainer
``steptime``        what a run will cost, measured, and the line printed before step 1
``command``         ``python -m mutexmatch.train`` (``mutexmatch/train.py`` only starts it)
==================  ===============================================================================================

Names are imported from their module on first use (``mutexmatch.training.Trainer``), so a reader of one light
module (``callbacks``, ``runfolder``, ``steptime.format_duration``) does not import torch and the whole trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module of this package that holds it
_EXPORTS = {
    "Trainer": "loop", "NonFiniteLossError": "loop",
    "main": "command", "INTERRUPTED": "command", "RunDirError": "command", "CallbackFactory": "command",
    "Callback": "callbacks", "StartEvent": "callbacks", "EvalEvent": "callbacks", "RunSummary": "callbacks",
    "RunFolder": "runfolder", "RunFolderError": "runfolder", "RunFolderLocked": "runfolder",
    "checkpoint_pair": "runfolder", "RUN_MARKER": "runfolder", "FINAL_WEIGHTS": "runfolder",
    "Preempted": "preemption",
    "CheckpointError": "checkpoint", "latest_checkpoint": "checkpoint", "list_checkpoints": "checkpoint",
    "load_checkpoint": "checkpoint", "save_checkpoint": "checkpoint",
    "StepCost": "steptime", "measure_cost": "steptime", "format_duration": "steptime",
    "check_memory": "memory", "StepMemoryError": "memory", "MemoryBudgetError": "memory",
    "resolve_device": "device", "param_groups": "optim", "ModelEMA": "ema",
    "StepAccumulator": "diagnostics", "compile_report": "compiled", "keep_freed_memory": "allocator",
    "features_forward": "extended_step", "teacher_forward": "extended_step", "step_inputs": "extended_step",
    "make_views": "extended_step",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from mutexmatch.training.allocator import keep_freed_memory
    from mutexmatch.training.callbacks import Callback, EvalEvent, RunSummary, StartEvent
    from mutexmatch.training.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                                save_checkpoint)
    from mutexmatch.training.command import INTERRUPTED, CallbackFactory, RunDirError, main
    from mutexmatch.training.compiled import compile_report
    from mutexmatch.training.device import resolve_device
    from mutexmatch.training.diagnostics import StepAccumulator
    from mutexmatch.training.ema import ModelEMA
    from mutexmatch.training.extended_step import features_forward, make_views, step_inputs, teacher_forward
    from mutexmatch.training.loop import NonFiniteLossError, Trainer
    from mutexmatch.training.memory import MemoryBudgetError, StepMemoryError, check_memory
    from mutexmatch.training.optim import param_groups
    from mutexmatch.training.preemption import Preempted
    from mutexmatch.training.runfolder import (FINAL_WEIGHTS, RUN_MARKER, RunFolder, RunFolderError, RunFolderLocked,
                                               checkpoint_pair)
    from mutexmatch.training.steptime import StepCost, format_duration, measure_cost


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
