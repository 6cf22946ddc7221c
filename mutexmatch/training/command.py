"""The training loop and its command line.

``python -m mutexmatch.train --config FILE [--set key=value ...]`` trains one run into ``output_dir``, a run folder
(:mod:`mutexmatch.training.runfolder`: resolved config, hashes, split, dataset facts, checksummed checkpoints, one
metrics line per evaluation, best and final EMA weights), which must be empty unless ``--overwrite`` is given and is
locked while the trainer runs. ``--resume DIR`` continues a run exactly where its newest usable checkpoint left it:
same data order, same augmentations, same weights as an uninterrupted run. Ctrl+C stops with exit code 130 and
prints the resume command; SIGTERM or SIGUSR1 (a scheduler's preemption, SLURM's ``--signal``) writes a checkpoint
at the next step boundary and exits with 128 + the signal's number, printing the same resume command
(:mod:`mutexmatch.training.preemption`).

This module is what the command does (:func:`main`); ``mutexmatch/train.py`` only starts it. Exit codes: 0 done,
1 declined, diverged or a file error, 2 bad input (one line naming it), :data:`INTERRUPTED` after Ctrl+C,
128 + the signal's number after SIGTERM/SIGUSR1 (resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from mutexmatch import metrics as M
from mutexmatch.checks import int_arg, shown
from mutexmatch.cli import add_version
from mutexmatch.cliwarnings import one_line_warnings
from mutexmatch.config import (RESUMABLE, ConfigError, RunConfig, apply_overrides, fields_with_role, load_config,
                               parse_config, read_config_file)
from mutexmatch.training.callbacks import Callback
from mutexmatch.training import preemption
from mutexmatch.training.runfolder import RUN_MARKER, RunFolder, RunFolderError, checkpoint_step
from mutexmatch.training.steptime import checkpoint_steps_done, confirm_cost, measure_run

if TYPE_CHECKING:  # torch and the trainer are imported once the arguments are read: --help answers without them
    from mutexmatch.training.loop import Trainer

__all__ = ["main", "build_parser", "INTERRUPTED", "RunDirError", "CallbackFactory"]

INTERRUPTED = 130     # exit code after Ctrl+C, as the shell reports a SIGINT death (and the sweep exits)

CallbackFactory = Callable[[RunConfig, bool], Sequence[Callback]]  # (config, resumed) → the run's callbacks


class RunDirError(SystemExit):
    """``--resume DIR`` names no usable run folder (one line; the command line exits with 2)."""


def _load_run_dir(run_dir: Path, overrides: Sequence[str]) -> RunConfig:
    run = RunFolder(run_dir)
    if not run.path.is_dir():
        raise RunDirError(f"--resume {run_dir}: directory not found")
    if not run.is_run():
        raise RunDirError(f"--resume {run_dir}: not a mutexmatch run directory (no {RUN_MARKER} / "
                          f"{run.config.name})")
    raw = read_config_file(run.config, f"--resume {run_dir}:")
    raw["output_dir"] = str(run.path)
    allowed = fields_with_role(RESUMABLE)  # declared on the schema fields
    for item in overrides:
        if not item.split("=", 1)[0].strip().startswith(allowed):
            raise RunDirError(f"--set {shown(item)}: only {', '.join(allowed)} can change on --resume")

    return parse_config(apply_overrides(raw, overrides))


def _interrupted(trainer: Trainer | None, args: argparse.Namespace) -> str:
    """Where a Ctrl+C stopped the run and the command that continues it."""
    if trainer is None:
        return "[train] interrupted while setting up, before the first training step"
    ckpt = trainer.last_checkpoint
    where = f"[train] interrupted at step {trainer.step} of {trainer.cfg.train.iterations}"
    if ckpt is None:
        return f"{where}; no checkpoint was written yet: run the same command again with --overwrite"
    sets = "".join(f" --set {s}" for s in args.overrides) if args.resume is not None else ""
    return (f"{where}; the last checkpoint is step {checkpoint_step(ckpt.name)} ({ckpt}).\n"
            f"To resume this run:\n  python -m mutexmatch.train --resume {trainer.out}{sets}")


def _write_failed(trainer: Trainer | None, args: argparse.Namespace, err: OSError) -> str:
    """One line for a file the run could not read or write, and how to go on from what it kept."""
    what = f"{err.filename}: {err.strerror}" if err.filename and err.strerror else " ".join(str(err).split())
    step = "" if trainer is None else f" at step {trainer.step}"
    if trainer is not None and trainer.last_checkpoint is not None:
        then = f"continue from step {checkpoint_step(trainer.last_checkpoint.name)} with `python -m mutexmatch.train " \
               f"--resume {trainer.out}`"
    elif trainer is not None:
        then = "run the same command again with --overwrite (no checkpoint was written yet)"
    else:
        then = "run the same command again"
    return (f"error: the run stopped{step}: {what}; free disk space or make output_dir writable (or choose another "
            f"output_dir), then {then}")


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line (``orchestration.train`` passes it every option it does not take itself)."""
    parser = argparse.ArgumentParser(prog="python -m mutexmatch.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="run config YAML (see docs/config.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set algorithm.tau=0.9 (repeatable)")
    parser.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR")
    parser.add_argument("--overwrite", action="store_true",
                        help="start fresh in a non-empty output_dir, replacing the run files there")
    parser.add_argument("--stop-at", type=int_arg(1), default=None, help="stop at this step (schedule of the full run)")
    parser.add_argument("--yes", action="store_true",
                        help="start a CPU run whose measured ETA exceeds an hour without asking")
    add_version(parser)
    return parser


def _make_trainer(args: argparse.Namespace, callbacks: CallbackFactory | None = None) -> Trainer | None:
    """The run's trainer, after the line that says what it will cost (steps, ETA, output folder); None when the
    user declined a long CPU run (nothing written). ``callbacks`` makes the run's callbacks once it will start."""
    from mutexmatch.training.loop import Trainer

    if args.resume is not None:
        if args.config is not None or args.overwrite:
            raise RunDirError("--resume DIR uses the config saved in DIR and continues its run; do not pass "
                              "--config or --overwrite")
        cfg, kwargs = _load_run_dir(args.resume, args.overrides), {"resume": True}
        done = checkpoint_steps_done(cfg.output_dir)
    else:
        cfg, kwargs, done = load_config(args.config, args.overrides), {"overwrite": args.overwrite}, 0
        if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0's check (another rank's would race its writes)
            RunFolder(cfg.output_dir).check_fresh(args.overwrite)  # before the measurement's work
    cost, bundle = measure_run(cfg, done)
    if not confirm_cost(cfg, done, cost, assume_yes=args.yes):
        return None
    return Trainer(cfg, callbacks=callbacks(cfg, args.resume is not None) if callbacks else (), bundle=bundle,
                   **kwargs)


def main(argv: Sequence[str] | None = None, callbacks: CallbackFactory | None = None) -> int:
    """The command line; ``callbacks`` (``orchestration.train``: the MLflow run) watch the run through the seam."""
    if callbacks is None and os.environ.get("MLFLOW_TRACKING_URI"):
        print("[train] $MLFLOW_TRACKING_URI is set, but this command never logs to MLflow (the trainer knows nothing "
              "of it); `python -m orchestration.train` takes the same arguments and logs the run", file=sys.stderr)
    with one_line_warnings():
        return _run(build_parser().parse_args(argv), callbacks)


def _run(args: argparse.Namespace, callbacks: CallbackFactory | None = None) -> int:
    previous = preemption.install()  # SIGTERM/SIGUSR1: a checkpoint at the next step boundary, then exit resumable
    try:
        return _train(args, callbacks)
    finally:
        preemption.restore(previous)


def _train(args: argparse.Namespace, callbacks: CallbackFactory | None = None) -> int:
    from mutexmatch.data.imagefolder import ImageFolderError
    from mutexmatch.data.registry import DatasetError
    from mutexmatch.training.checkpoint import CheckpointError
    from mutexmatch.training.distributed import DataParallelError
    from mutexmatch.training.loop import NonFiniteLossError

    trainer = None
    try:
        trainer = _make_trainer(args, callbacks)
        if trainer is None:
            return 1
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            summary = trainer.fit(stop_at=args.stop_at)
    except (ConfigError, CheckpointError, DatasetError, FileExistsError, FileNotFoundError, ImageFolderError,
            RunFolderError, RunDirError, DataParallelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_interrupted(trainer, args), file=sys.stderr)
        return INTERRUPTED
    except preemption.Preempted as e:  # the checkpoint of every step trained is written: exit resumable
        print(f"[train] {e.signal_name}: stopped at step {e.step} of {trainer.cfg.train.iterations}; checkpoint "
              f"{e.checkpoint}.\nTo resume this run:\n  python -m mutexmatch.train --resume {trainer.out}",
              file=sys.stderr, flush=True)
        return preemption.exit_code(e.signal_name)
    except NonFiniteLossError as e:  # its message says what diverged and where; a traceback adds nothing
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a read-only output_dir, a full disk: what was written is intact
        print(_write_failed(trainer, args, e), file=sys.stderr)
        return 1
    m = summary.metrics
    if trainer.dp.is_main:   # data parallel: one summary line, not one per rank
        print(json.dumps({"step": summary.step, "output_dir": str(summary.output_dir),
                          **{k: m[k] for k in (M.TEST_ACC, M.TEST_BEST_ACC, M.TEST_MEDIAN_ACC) if k in m}}))
    return 0
