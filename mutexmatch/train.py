"""The training loop and its command line.

``python -m mutexmatch.train --config FILE [--set key=value ...]`` trains one run into ``output_dir``, a run folder
(:mod:`mutexmatch.runfolder`: resolved config, hashes, split, dataset facts, checksummed checkpoints, one metrics line
per evaluation, best and final EMA weights), which must be empty unless ``--overwrite`` is given and is locked while
the trainer runs. ``--resume DIR`` continues a run exactly where its newest usable checkpoint left it: same data
order, same augmentations, same weights as an uninterrupted run. Ctrl+C stops with exit code 130 and prints the
resume command.

One step, as the released code: one forward over the concatenation [labeled weak | unlabeled weak | unlabeled strong]
(BatchNorm over all rows), the algorithm's loss, SGD (Nesterov) with the cos(7πt/16T) factor, then the EMA update. An
algorithm may declare other views and run its own forwards (its StepSpec, :mod:`mutexmatch.extended_step`).
Augmentation runs batched on the training device. Metrics accumulate on the device and are read once per
evaluation, so the loop does not synchronise with the host every step.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import yaml
import torch.nn.functional as F
from torch import nn

from mutexmatch.algorithms import ALGORITHMS, TrainContext
from mutexmatch.allocator import keep_freed_memory
from mutexmatch.atomic import atomic_write
from mutexmatch.augment import normalize
from mutexmatch import metrics as M
from mutexmatch.callbacks import Callback, EvalEvent, RunSummary, StartEvent
from mutexmatch.compiled import check_cuda_graphs, compiled_forward
from mutexmatch.checkpoint import (CheckpointError, latest_checkpoint, load_checkpoint, prune_checkpoints,
                                   save_checkpoint)
from mutexmatch.checks import int_arg
from mutexmatch.cliwarnings import one_line_warnings
from mutexmatch.config import (ConfigError, RunConfig, config_hash, config_hashes, load_config, parse_config,
                               read_config_file)
from mutexmatch.datasets import DatasetBundle, DatasetError, Footprint, footprint, load_dataset
from mutexmatch.diagnostics import StepAccumulator
from mutexmatch.imagefolder import ImageFolderError
from mutexmatch.ema import ModelEMA
from mutexmatch.extended_step import features_forward, make_views, step_inputs, teacher_forward
from mutexmatch.models import build_model
from mutexmatch.prefetch import Prefetcher, to_device
from mutexmatch.runfolder import RUN_MARKER, RunFolder, RunFolderError, checkpoint_step
from mutexmatch.sampler import SSLSampler
from mutexmatch.splits import Split, make_split
from mutexmatch.steptime import checkpoint_steps_done, confirm_cost, measure_run

__all__ = ["Trainer", "NonFiniteLossError", "StepMemoryError", "MemoryBudgetError", "RunDirError", "check_memory",
           "param_groups", "main"]

INTERRUPTED = 130     # exit code after Ctrl+C, as the shell reports a SIGINT death (and the sweep exits)


class NonFiniteLossError(FloatingPointError):
    pass


class StepMemoryError(ConfigError):
    """One training step does not fit in the training device's memory (``train.batch_size`` and ``train.mu``)."""


class MemoryBudgetError(ConfigError):
    """The run's decoded images and one training step would not fit in the memory available now (refused before
    any image is decoded, instead of swapping for minutes until the kernel kills the process)."""


class RunDirError(SystemExit):
    """``--resume DIR`` names no usable run folder (one line; the command line exits with 2)."""


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={spec!r}: CUDA is not available on this machine (use `cpu` or `auto`)")
    return torch.device(spec)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on every parameter except those of BatchNorm layers (selected by module type, not name)."""
    no_decay = {id(p) for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
                for p in m.parameters(recurse=False)}
    decay = [p for p in model.parameters() if id(p) not in no_decay]
    skip = [p for p in model.parameters() if id(p) in no_decay]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": skip, "weight_decay": 0.0}]


def _sgd(model: nn.Module, lr: float, momentum: float, nesterov: bool, weight_decay: float,
         device: torch.device) -> torch.optim.SGD:
    """SGD with momentum (Nesterov as configured) over :func:`param_groups`, updating all parameters in one fused
    kernel on CUDA and with the multi-tensor (foreach) kernels elsewhere: the same update as the per-parameter loop,
    up to float rounding, in a few kernel launches instead of several per parameter."""
    fused = device.type == "cuda"
    return torch.optim.SGD(param_groups(model, weight_decay), lr=lr, momentum=momentum, nesterov=nesterov,
                           foreach=not fused, fused=fused)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "gauss": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _set_deterministic(on: bool) -> None:
    """``train.deterministic``. Set by every Trainer, on or off, because the setting is process-wide and a Ray
    worker reused across trials must not keep the previous trial's."""
    if on:
        # cuBLAS reads it when PyTorch creates a handle's workspace, i.e. before this run's first CUDA matmul.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on, warn_only=True)


def _device_memory(device: torch.device) -> int | None:
    """Bytes of memory of the training device (the host's RAM for the CPU), None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu" and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def _host_available() -> int | None:
    """Bytes the host can allocate without swapping: MemAvailable (free memory plus the page cache it can drop),
    else the free pages; None where neither is known."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the kernel writes kB
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def _available_memory(device: torch.device) -> dict[str, int | None]:
    """Free bytes of each memory a run fills: the host's and, on CUDA, the device's."""
    have = {"host": _host_available()}
    if device.type == "cuda":
        have["cuda"] = torch.cuda.mem_get_info(device)[0]
    return have


# fp32 bytes autograd saves per image and pixel in one training step: experiments/README.md's counts
# (benchmarks/step_memory.py) less the weights that its batch-1 count scaled 64-fold, which leaves one figure per
# backbone at every measured size (WRN-28-8 at 32, 64 and 80 px: 14.5k). Rounded down, as the check must refuse
# only what cannot fit; a backbone not measured counts its float32 input batch alone. On an H200 at B=64, mu=7 the
# estimate stayed under the real count and peak (WRN-28-8 @ 80 fp32: 82.4 GiB estimated, 82.9 saved, 84.8 peak
# allocated; bf16 41.2 / 41.5 / 42.8; ResNet-18 @ 96 fp32 3.5 / 3.7 / 4.1; WRN-28-2 @ 32 fp32 3.4 / 3.4 / 3.6).
ACTIVATION_BYTES_PER_PIXEL = {"wrn28_2": 3700, "cnn13": 6400, "wrn28_8": 14400, "resnet18": 430, "wrn37_2": 3900}
ACTIVATION_SHARE = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.5}  # autocast saves about half (the table's bf16 column)


def _step_images(cfg: RunConfig, forwards: bool = True) -> int:
    """Images of one step: its views (the algorithm's StepSpec; by default B (1 + 2 mu)) and, with ``forwards``,
    the batches of its extra forwards."""
    t, alg = cfg.train, ALGORITHMS[cfg.algorithm.name]
    return alg.step.images_per_step(t.batch_size, t.mu, alg.uses_unlabeled, forwards)


def _step_bytes(cfg: RunConfig, fp: Footprint) -> int:
    """A lower bound of one training step's memory: its saved activations, else its float32 input batch."""
    per_pixel = ACTIVATION_BYTES_PER_PIXEL.get(cfg.model.backbone)
    if per_pixel is None:
        return _step_images(cfg) * fp.nbytes(1) * 4
    return int(_step_images(cfg) * per_pixel * ACTIVATION_SHARE[cfg.train.precision] * fp.size ** 2)


def _memory_needs(cfg: RunConfig, device: torch.device, fp: Footprint) -> dict[str, tuple[int, int]]:
    """Memory -> (images it holds, bytes of one step in it) once the trainer is built."""
    ulb_copy = fp.train + fp.unlabeled if fp.unlabeled else 0  # the trainer's cat of train and unlabeled images
    if device.type == "cuda":  # the training images move to the device; the test images stay on the host
        return {"host": (fp.loaded_images, 0), "cuda": (fp.train + ulb_copy, _step_bytes(cfg, fp))}
    return {"host": (fp.loaded_images + ulb_copy, _step_bytes(cfg, fp))}


def check_memory(cfg: RunConfig, device: torch.device) -> None:
    """Refuse, before any image is decoded, a run whose images and one training step need more memory than is
    available (:class:`MemoryBudgetError`, one line with both figures and what to change)."""
    d = cfg.data
    fp = footprint(d.dataset, d.root, svhn_extra=d.svhn_extra, image_size=d.image_size)
    have = _available_memory(device)
    for where, (images, step) in _memory_needs(cfg, device, fp).items():
        free = have.get(where)
        need = fp.nbytes(images) + step
        if free is None or need <= free:
            continue
        side = f"{fp.channels}x{fp.size}x{fp.size}"
        parts = f"{_size(fp.nbytes(images))} for {images:,} decoded images of {side}"
        fix = "use a smaller data.image_size or fewer images"
        if step:
            parts += f", at least {_size(step)} for one step of {_step_images(cfg)} images ({cfg.model.backbone})"
            fix += ", or a smaller train.batch_size or train.mu"
        raise MemoryBudgetError(f"data.image_size={fp.size}: {d.dataset} needs {_size(need)} of {where} memory "
                                f"({parts}), but {_size(free)} is available; {fix}")


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _is_out_of_memory(e: BaseException) -> bool:
    """PyTorch's allocators: ``torch.OutOfMemoryError`` on CUDA, a RuntimeError on the CPU."""
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e))


def _check_separate_forwards(cfg: RunConfig) -> None:
    """ConfigError for ``train.cuda_graphs`` with an algorithm that runs its own forwards (StepSpec forward
    'separate'): the graphed forward starts a new graph generation at every call, which would let a step's second
    forward overwrite its first one's outputs, and several forwards per step were never run with CUDA graphs."""
    step = ALGORITHMS[cfg.algorithm.name].step
    if cfg.train.cuda_graphs and step.forward == "separate":
        raise ConfigError(f"train.cuda_graphs=true: algorithm {cfg.algorithm.name!r} runs several forwards per step "
                          "(its StepSpec forward is 'separate'), which CUDA graphs do not support here; set "
                          "train.cuda_graphs=false (train.compile=true still compiles its forwards)")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Trains one run described by a :class:`RunConfig`, reporting through :class:`Callback` objects.

    ``resume``: ``False`` starts fresh in an empty ``output_dir`` (``overwrite`` replaces the run files of a
    non-empty one), ``True`` continues from the newest usable checkpoint (error if there is none), ``"auto"``
    continues if a checkpoint exists and starts fresh otherwise (what a restarted Tune trial wants), a path
    continues from that checkpoint file. The run folder is locked from here until :meth:`fit` returns (or
    :meth:`close`): a second trainer on it raises :class:`~mutexmatch.runfolder.RunFolderLocked`.
    """

    def __init__(self, cfg: RunConfig, callbacks: Sequence[Callback] = (), *,
                 resume: bool | str | Path = False, bundle: DatasetBundle | None = None, overwrite: bool = False):
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.run = RunFolder(cfg.output_dir)
        self.out = self.run.path
        self.ckpt_dir = self.run.checkpoints
        self.device = resolve_device(cfg.train.device)
        _check_separate_forwards(cfg)  # before any work
        check_cuda_graphs(cfg.train.cuda_graphs, self.device)
        if resume is False:
            self.run.check_fresh(overwrite)  # before any work; checked again under the lock
        if cfg.train.num_threads:
            torch.set_num_threads(cfg.train.num_threads)
        if self.device.type == "cpu" and cfg.train.keep_freed_memory:
            keep_freed_memory()
        _set_deterministic(cfg.train.deterministic)
        if self.device.type == "cuda":  # autotuned convolution algorithms vary run to run: not when deterministic
            torch.backends.cudnn.benchmark = not cfg.train.deterministic
        resume_state = self._find_resume_state(resume)

        _seed_everything(cfg.train.seed)
        if bundle is None:
            check_memory(cfg, self.device)
        self.bundle = bundle or load_dataset(cfg.data.dataset, cfg.data.root, download=cfg.data.download,
                                             svhn_extra=cfg.data.svhn_extra, image_size=cfg.data.image_size,
                                             normalization=cfg.data.normalization)
        self.num_classes = self.bundle.info.num_classes
        self.split = self._make_split()
        self._check_batch_memory()
        self._build(ALGORITHMS[cfg.algorithm.name])
        self.step = 0
        self.history: list[float] = []   # EMA test accuracy at every evaluation
        self.best_acc = -1.0
        self.best_val = -1.0
        self.resumed_from: Path | None = None
        self.last_checkpoint: Path | None = None
        self._reset_accumulators()
        self._open_run_folder(resume_state, fresh_overwrites=overwrite or resume == "auto")

    def _build(self, alg_cls: type) -> None:
        """The algorithm, model, optimiser, schedule and the batch pipeline, on the training device."""
        cfg = self.cfg
        extra = self.bundle.extra_unlabeled
        self._build_model(alg_cls)   # draws the weights (the model's, then its extra heads'); the algorithm draws nothing
        self.algorithm = alg_cls(alg_cls.params_from(cfg.algorithm), self._context(alg_cls.uses_unlabeled))
        o = cfg.optim
        self.optimizer = _sgd(self.model, o.lr, o.momentum, o.nesterov, o.weight_decay, self.device)
        total = cfg.train.iterations
        factor = (lambda t: math.cos(o.cosine_factor * math.pi * t / total)) if o.schedule == "cosine" else (
            lambda t: 1.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.train.precision == "fp16")
        self.autocast_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.train.precision]

        # Images stay uint8 on the training device; batches are gathered by index and augmented there.
        self.train_x = self.bundle.train.x.to(self.device)
        self.train_y = self.bundle.train.y.to(self.device)
        self.ulb_x = torch.cat([self.train_x, extra.x.to(self.device)]) if extra is not None else self.train_x
        self.ulb_y = torch.cat([self.train_y, extra.y.to(self.device)]) if extra is not None else self.train_y
        self.sampler = SSLSampler(torch.from_numpy(self.split.labeled), torch.from_numpy(self.split.unlabeled),
                                  batch_size=cfg.train.batch_size, mu=cfg.train.mu, seed=cfg.train.seed,
                                  with_unlabeled=alg_cls.uses_unlabeled)
        self.aug_generator = torch.Generator(device=self.device).manual_seed(cfg.train.seed + 1)
        # RandAugment's op choices are drawn on the host (mutexmatch.augment): from aug_generator itself on the CPU.
        self.op_generator = None if self.device.type == "cpu" else torch.Generator().manual_seed(cfg.train.seed + 2)
        self.prefetcher = Prefetcher(self._batch, self._batch_state, self.device)

    def _context(self, uses_unlabeled: bool) -> TrainContext:
        """What the algorithm gets from the trainer (the seam): the pool, the labeled set, the schedule, the EMA."""
        t, split = self.cfg.train, self.split
        labeled = torch.from_numpy(split.labeled)
        per_step = t.batch_size * t.mu if uses_unlabeled else t.batch_size
        return TrainContext(
            num_classes=self.num_classes, unlabeled=torch.from_numpy(split.unlabeled), labeled=labeled,
            labeled_counts=torch.bincount(self.bundle.train.y[labeled], minlength=self.num_classes),
            total_steps=t.iterations,
            steps_per_epoch=-(-len(split.unlabeled if uses_unlabeled else split.labeled) // per_step),
            device=self.device, ema_model=self.ema.module, reference_loss=self.reference_loss,
            reference_split="validation" if self._val_data() is not None else "labeled")

    def _open_run_folder(self, resume_state: tuple[Path, dict] | None, fresh_overwrites: bool) -> None:
        """Lock the run folder, then continue the checkpoint's state or write a fresh run's files."""
        self.run.lock()
        try:
            if resume_state is not None:
                self._load_state(*resume_state)
            else:
                self.run.require_empty(overwrite=fresh_overwrites)
                self._write_run_files()
        except BaseException:
            self.run.unlock()
            raise

    def close(self) -> None:
        """Release the run folder (:meth:`fit` does when it returns)."""
        self.run.unlock()

    # ---------------------------------------------------------------- setup
    def _find_resume_state(self, resume: bool | str | Path) -> tuple[Path, dict] | None:
        if resume is False:
            return None
        if isinstance(resume, (str, Path)) and resume != "auto":
            path = Path(resume)
            return path, load_checkpoint(path)
        found = latest_checkpoint(self.ckpt_dir)
        if found is None and resume is True:
            raise CheckpointError(f"{self.out}: no checkpoint to resume from")
        return found

    def _check_batch_memory(self) -> None:
        """Refuse up front a step whose input batch alone (float32, the algorithm's views: by default labeled + weak
        + strong) exceeds the device's memory; a step that still does not fit raises :class:`StepMemoryError` at
        its first step."""
        x = self.bundle.train.x
        need = _step_images(self.cfg, forwards=False) * x[0].numel() * 4
        have = _device_memory(self.device)
        if have is not None and need > have:
            raise StepMemoryError(f"{self._batch_text()}: the input batch alone takes {_size(need)}, more than the "
                                  f"{self.device.type} memory ({_size(have)}); lower train.batch_size or train.mu")

    def _batch_text(self) -> str:
        t = self.cfg.train
        shape = "x".join(map(str, self.bundle.train.x.shape[1:]))
        return (f"train.batch_size={t.batch_size}, train.mu={t.mu}: one step of {_step_images(self.cfg, False)} "
                f"images of {shape}")

    def _build_model(self, alg_cls: type) -> None:
        """The network (with the algorithm's extra heads) on the training device, its EMA and the (optionally
        compiled) forward."""
        cfg = self.cfg
        self.model = build_model(cfg.model.backbone, num_classes=self.num_classes,
                                 in_channels=self.bundle.info.channels, image_size=self.bundle.train.x.shape[-1],
                                 with_tnc=alg_cls.uses_tnc)
        params = alg_cls.Params.parse(alg_cls.params_from(cfg.algorithm), alg_cls.name, self.num_classes)
        self.model.add_heads(alg_cls.heads(params, self.model.feat_dim, self.num_classes))
        if getattr(cfg.algorithm, "form", None) == "official":  # the released code's WRN: BatchNorm momentum = 1 - EMA decay
            self.model.backbone.tie_bn_momentum_to_ema(cfg.train.ema)
        self.memory_format = torch.channels_last if cfg.model.channels_last else torch.contiguous_format
        self.model.to(self.device, memory_format=self.memory_format)
        self.ema = ModelEMA(self.model, cfg.train.ema)
        self.forward = compiled_forward(self.model, cfg.train, self.device)
        # What a step runs the model through (StepInputs.forward / .teacher): fp32 features under the autocast of
        # train.precision, BatchNorm statistics updated or not; the teacher is the EMA model (Mean Teacher).
        self.features = features_forward(self.forward, self.model, self._autocast)
        self.teacher = teacher_forward(self.ema.module, self._autocast)

    def _make_split(self) -> Split:
        d = self.cfg.data
        extra = self.bundle.extra_unlabeled
        split = make_split(self.bundle.train.y.numpy(), dataset=d.dataset, num_labels=d.num_labels,
                           num_classes=self.num_classes, fold=d.fold, rule=d.split_rule,
                           val_per_class=d.val_per_class, unlabeled_includes_labeled=d.unlabeled_includes_labeled,
                           num_extra_unlabeled=0 if extra is None else len(extra.y),
                           predefined_folds=self.bundle.predefined_folds)
        return split

    def _write_run_files(self) -> None:
        run = self.run
        atomic_write(run.config, yaml.safe_dump(self.cfg.to_dict(), sort_keys=False).encode())
        self.split.save(run.split)
        atomic_write(run.marker, json.dumps(self._marker(), indent=2).encode())
        atomic_write(run.dataset, json.dumps(self._dataset_facts(), indent=2).encode())
        run.metrics.unlink(missing_ok=True)

    def _marker(self) -> dict:
        """``run.json``: what makes the folder a run, and which configuration and split it trains."""
        return {"mutexmatch_run": 1, "config_hash": config_hash(self.cfg), "split_digest": self.split.digest()}

    def _check_resumed_files(self) -> None:
        """After a checkpoint loaded (it proved config and split): a ``run.json`` that is not this run's marker is
        rewritten, and evaluations missing from ``metrics.jsonl`` are said, both with a warning (they were accepted
        silently)."""
        try:
            marker = json.loads(self.run.marker.read_text())
        except (OSError, ValueError):
            marker = None
        if marker != self._marker():
            warnings.warn(f"{self.run.marker}: not this run's marker (unreadable or changed); rewritten from the "
                          f"checkpoint, which holds the run's config hash and split", RuntimeWarning, stacklevel=3)
            atomic_write(self.run.marker, json.dumps(self._marker(), indent=2).encode())
        logged = {row["step"] for row in self.run.read_metrics()}
        missing = [s for s in range(self.cfg.train.eval_interval, self.step + 1, self.cfg.train.eval_interval)
                   if s not in logged]
        if missing:
            warnings.warn(f"{self.run.metrics}: the evaluations of {len(missing)} step(s) up to {self.step} are not "
                          f"in it (first: step {missing[0]}; emptied, cut or deleted?); they are not redone, so the "
                          "run's metrics have a gap there", RuntimeWarning, stacklevel=3)

    def _dataset_facts(self) -> dict:
        """What the run's images were: classes, sizes and the normalisation actually applied."""
        b = self.bundle
        return {
            "dataset": b.info.name, "normalization": self.cfg.data.normalization, "mean": list(b.info.mean),
            "std": list(b.info.std), "image_size": b.info.image_size, "num_classes": b.info.num_classes,
            "classes": list(b.classes) if b.classes else None,
            "images": {"train": len(b.train), "test": len(b.test), "val": len(b.val) if b.val else len(self.split.val),
                       "extra_unlabeled": len(b.extra_unlabeled) if b.extra_unlabeled else 0},
        }

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {
            "step": self.step, "model": self.model.state_dict(), "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(), **self.prefetcher.state(), "algorithm": self.algorithm.state_dict(),
            "rng": _rng_state(), "history": list(self.history), "best_acc": self.best_acc,
            "best_val": self.best_val, "config_hash": config_hash(self.cfg), "split_digest": self.split.digest(),
            "stats": self.stats.state_dict(),
        }

    def _load_state(self, path: Path, state: dict) -> None:
        if state.get("config_hash") not in config_hashes(self.cfg):
            raise CheckpointError(f"{path}: written by a run with another configuration (config hash "
                                  f"{state.get('config_hash')} is none of {', '.join(config_hashes(self.cfg))})")
        if state.get("split_digest") != self.split.digest():
            raise CheckpointError(f"{path}: written with another labeled split")
        try:
            self.split.check_file(self.run.split)  # a missing or corrupt split.json is rewritten with a warning
        except ValueError as e:
            raise RunFolderError(str(e)) from None
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self._set_batch_state(state)
        self.algorithm.load_state_dict(state["algorithm"])
        _set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.best_acc = float(state["best_acc"])
        self.best_val = float(state["best_val"])
        if "stats" in state:  # the steps since the last evaluation (a stop between evaluations)
            self.stats.load_state_dict(state["stats"])
        self.run.keep_metrics_until(self.step)  # evaluations logged after this checkpoint are redone
        self._check_resumed_files()
        self.resumed_from = self.last_checkpoint = path

    # ---------------------------------------------------------------- step
    def _reset_accumulators(self) -> None:
        self.stats = StepAccumulator(self.num_classes, self.device, self.algorithm.terms)

    def _batch_state(self) -> dict:
        """Everything a batch is drawn from: the sampler's and the augmentations' generators (checkpoint keys)."""
        state = {"sampler": self.sampler.state_dict(), "aug_generator": self.aug_generator.get_state()}
        if self.op_generator is not None:
            state["op_generator"] = self.op_generator.get_state()
        return state

    def _set_batch_state(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.aug_generator.set_state(state["aug_generator"])
        if self.op_generator is not None and "op_generator" in state:
            self.op_generator.set_state(state["op_generator"])
        self.prefetcher.drop()  # a batch made ahead came from the state just replaced

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor | None,
                              torch.Tensor]:
        """One step's batch: the algorithm's views (by default [labeled weak | unlabeled weak | unlabeled strong])
        normalised and concatenated, labels, unlabeled indices and pool positions, muB, rotation labels (or None),
        the labeled rows' positions in the labeled set;
        made from :meth:`_batch_state` only (so :class:`Prefetcher` can make it ahead and a checkpoint can replay
        it)."""
        info = self.bundle.info
        idx = self.sampler.next()
        aug = {"flip": info.flip, "pad": info.pad, "pad_mode": info.pad_mode, "generator": self.aug_generator}
        lb = to_device(idx.lb, self.device)
        ulb = to_device(idx.ulb, self.device)
        views, rot = make_views(self.algorithm.step, self.train_x[lb], self.ulb_x[ulb] if ulb.numel() else None,
                                aug, self.op_generator)
        x = normalize(torch.cat(views), info.mean, info.std, channels_last=self.cfg.model.channels_last)
        return (x, self.train_y[lb], ulb, to_device(idx.ulb_pos, self.device), len(ulb), rot,
                to_device(idx.lb_pos, self.device))

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def train_step(self) -> None:
        """One step: batch (made ahead on CUDA, :class:`Prefetcher`), backbone forward under ``train.precision``'s
        autocast, then the heads, softmax thresholds and losses on the features cast to fp32, backward, SGD, EMA.
        BatchNorm keeps fp32 weights and running statistics under autocast (its buffers are never cast)."""
        t0 = time.perf_counter()
        x, y_lb, ulb, ulb_pos, num_ulb, rot, lb_pos = self.prefetcher.next()
        t1 = time.perf_counter()
        self.model.train()
        inp = step_inputs(self.algorithm.step, x, num_lb=len(y_lb), num_ulb=num_ulb, features=self.features,
                          teacher=self.teacher, targets_lb=y_lb, ulb_idx=ulb, step=self.step, ulb_pos=ulb_pos,
                          rot_label=rot, lb_pos=lb_pos)
        out = self.algorithm.compute(self.model, inp)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(out.loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.ema.update()
        self.algorithm.after_step(self.step)
        self.stats.add(out, self.ulb_y[ulb], self.step)
        self.step += 1
        self.stats.t_data += t1 - t0
        self.stats.t_compute += time.perf_counter() - t1

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def _eval_logits(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor):
        """(TPC logits, labels) per ``eval_batch_size`` batch of ``x``, ``model`` in eval mode meanwhile."""
        info = self.bundle.info
        was_training = model.training
        model.eval()
        bs = self.cfg.train.eval_batch_size
        try:
            for i in range(0, len(y), bs):
                xb = normalize(x[i:i + bs].to(self.device), info.mean, info.std,
                               channels_last=self.cfg.model.channels_last)
                with self._autocast():
                    logits = model.forward_tpc(xb)
                yield logits, y[i:i + bs].to(self.device)
        finally:
            model.train(was_training)

    @torch.no_grad()
    def accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        correct = torch.zeros((), device=self.device)
        for logits, yb in self._eval_logits(model, x, y):
            correct += (logits.argmax(1) == yb).sum()
        return correct.item() / max(1, len(y))

    @torch.no_grad()
    def reference_loss(self, model: nn.Module) -> float:
        """``model``'s mean cross-entropy on the validation split, or on the labeled images without one; never the
        test split (TrainContext.reference_loss, e.g. Dash's rho_hat)."""
        x, y = self._reference_data()
        total = torch.zeros((), device=self.device)
        for logits, yb in self._eval_logits(model, x, y):
            total += F.cross_entropy(logits.float(), yb, reduction="sum")
        return total.item() / max(1, len(y))

    def _reference_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        val = self._val_data()
        if val is not None:
            return val
        idx = torch.from_numpy(self.split.labeled)
        return self.bundle.train.x[idx], self.bundle.train.y[idx]

    def evaluate(self) -> EvalEvent:
        """Test (and validation) accuracy of the EMA model and the accumulated training diagnostics since the last
        evaluation; raises :class:`NonFiniteLossError` if a loss term was not finite."""
        st = self.stats
        n = max(1, st.steps)
        terms = st.term_means()
        for name, bad_step in st.non_finite():
            raise NonFiniteLossError(f"non-finite loss term {name!r} at step {bad_step} "
                                     f"(algorithm {self.cfg.algorithm.name}); the run is stopped")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - st.t_start
        test = self.bundle.test
        acc = self.accuracy(self.ema.module, test.x, test.y)
        acc_raw = self.accuracy(self.model, test.x, test.y)
        self.history.append(acc)
        self.best_acc = max(self.best_acc, acc)
        window = self.history[-self.cfg.train.median_window:]
        per_step_imgs = sum(self.algorithm.step.rows(self.cfg.train.batch_size, st.ulb_seen / n))  # the views made
        metrics = {
            **terms, M.TEST_ACC: acc, M.TEST_ACC_RAW: acc_raw, M.TEST_BEST_ACC: self.best_acc,
            M.TEST_MEDIAN_ACC: float(statistics.median(window)),
            M.TRAIN_LR: self.scheduler.get_last_lr()[0],
            M.PERF_IMG_PER_S: per_step_imgs * n / max(elapsed, 1e-9),
            M.PERF_DATA_S: st.t_data / n, M.PERF_COMPUTE_S: st.t_compute / n,
            **st.sample_metrics(),
        }
        val_data = self._val_data()
        if val_data is not None:
            val = self.accuracy(self.ema.module, *val_data)
            self.best_val = max(self.best_val, val)
            metrics.update({M.VAL_ACC: val, M.VAL_BEST_ACC: self.best_val})
        return EvalEvent(step=self.step, metrics=metrics, class_counts=st.class_counts(self.model.tnc is not None))

    def _val_data(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Validation images and labels: an image folder's val/, else the split's held-out train images."""
        if self.bundle.val is not None:
            return self.bundle.val.x, self.bundle.val.y
        if len(self.split.val):
            idx = torch.from_numpy(self.split.val)
            return self.bundle.train.x[idx], self.bundle.train.y[idx]
        return None

    def _save_weights(self, path: Path) -> Path:
        buf = io.BytesIO()
        torch.save(self.ema.state_dict(), buf)
        atomic_write(path, buf.getvalue())
        return path

    def save_checkpoint(self) -> Path:
        path = save_checkpoint(self.state_dict(), self.ckpt_dir, self.step)
        prune_checkpoints(self.ckpt_dir, self.cfg.train.keep_checkpoints)
        self.last_checkpoint = path
        return path

    # ---------------------------------------------------------------- timing (cost estimates, benchmarks)
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_step(self) -> float:
        """Run one training step and return its seconds, the device's queued work included."""
        self._sync()
        t0 = time.perf_counter()
        self.train_step()
        self._sync()
        return time.perf_counter() - t0

    def time_steps(self, steps: int) -> float:
        """Mean seconds per step of ``steps`` training steps run back to back with one synchronisation at the end,
        as training runs them (a synchronisation after every step would stall the launch queue)."""
        self._sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.train_step()
        self._sync()
        return (time.perf_counter() - t0) / steps

    def time_evaluation(self, images: int | None = None) -> float:
        """Seconds of one whole evaluation, timed on the first ``images`` test images (all by default) scored by
        the EMA model as :meth:`evaluate` does, and scaled to the :attr:`eval_images` an evaluation scores."""
        test = self.bundle.test
        n = max(1, len(test.y) if images is None else min(images, len(test.y)))
        self._sync()
        t0 = time.perf_counter()
        self.accuracy(self.ema.module, test.x[:n], test.y[:n])
        seconds = time.perf_counter() - t0  # accuracy() reads its result on the host: the device is done
        return seconds / n * self.eval_images

    @property
    def eval_images(self) -> int:
        """Images one evaluation scores: the test set twice (EMA and raw model) and the validation images."""
        val = self._val_data()
        return 2 * len(self.bundle.test.y) + (0 if val is None else len(val[1]))

    # ---------------------------------------------------------------- loop
    def fit(self, stop_at: int | None = None) -> RunSummary:
        """Train to ``train.iterations`` (or stop early at step ``stop_at``, keeping the schedule of the full run).
        The run folder stays locked until this returns or raises."""
        cfg = self.cfg.train
        end = cfg.iterations if stop_at is None else min(stop_at, cfg.iterations)
        self.run.lock()
        try:
            start = StartEvent(step=self.step, iterations=cfg.iterations, run=self.run,
                               config_hash=config_hash(self.cfg), split_digest=self.split.digest(),
                               resumed_from=self.resumed_from)
            for cb in self.callbacks:
                cb.on_start(start)
            last_event, last_ckpt = self._train_until(end)
            final_weights = self._save_weights(self.run.final_weights) if self.step >= cfg.iterations else None
            best = self.run.best_weights
            summary = RunSummary(step=self.step, metrics=last_event.metrics if last_event else {},
                                 output_dir=self.out, final_checkpoint=last_ckpt,
                                 best_weights=best if best.exists() else None, final_weights=final_weights)
            for cb in self.callbacks:
                cb.on_end(summary)
            return summary
        finally:
            self.run.unlock()

    def _train_until(self, end: int) -> tuple[EvalEvent | None, Path | None]:
        """Steps with an evaluation every ``train.eval_interval`` and at the last step; the last event and checkpoint.

        A stop (``end``) between evaluations writes a checkpoint without evaluating: an evaluation there would be
        one an uninterrupted run does not have (it moved ``test/best_acc``), and the steps since the last
        evaluation are kept in the checkpoint for the next one."""
        cfg = self.cfg.train
        bar = None
        if cfg.progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.iterations, initial=self.step, dynamic_ncols=True, file=sys.stderr,
                       desc=f"{self.cfg.algorithm.name}")
        last_event: EvalEvent | None = None
        last_ckpt: Path | None = None
        evals_since_ckpt = 0
        stop = False
        self.stats.t_start = time.perf_counter()  # the throughput of this call's steps
        try:
            while self.step < end and not stop:
                self._checked_step()
                if bar is not None:
                    bar.update(1)
                if self.step == end and self.step % cfg.eval_interval and self.step < cfg.iterations:
                    last_ckpt = self.save_checkpoint()
                elif self.step % cfg.eval_interval == 0 or self.step == end:
                    evals_since_ckpt += 1
                    event = self._evaluate_and_log(evals_since_ckpt >= cfg.checkpoint_every or self.step == end)
                    evals_since_ckpt = 0 if event.checkpoint is not None else evals_since_ckpt
                    if bar is not None:
                        m = event.metrics
                        bar.set_postfix(loss=f"{m['train/loss']:.3f}", acc=f"{m['test/acc']:.4f}",
                                        best=f"{m['test/best_acc']:.4f}", img_s=f"{m['perf/img_per_s']:.0f}")
                    for cb in self.callbacks:
                        stop |= bool(cb.on_eval(event))
                    if stop and event.checkpoint is None:
                        event.checkpoint = self.save_checkpoint()
                    last_event, last_ckpt = event, event.checkpoint or last_ckpt
        finally:
            if bar is not None:
                bar.close()
        return last_event, last_ckpt

    def _evaluate_and_log(self, with_checkpoint: bool) -> EvalEvent:
        """Evaluate, keep the best weights, log the metrics line, then (if asked) write the checkpoint.

        The line is appended before the checkpoint is written: a trainer killed between the two resumes from the
        previous checkpoint, which drops the line and redoes the evaluation, so every evaluation is logged once."""
        event = self.evaluate()
        self._reset_accumulators()  # before the checkpoint: it holds the sums of the steps since this evaluation
        if event.metrics[M.TEST_ACC] >= self.best_acc:  # a new best EMA test accuracy (ties: the latest)
            self._save_weights(self.run.best_weights)
        self.run.append_metrics(self.step, event.metrics)
        if with_checkpoint:
            event.checkpoint = self.save_checkpoint()
        return event

    def _checked_step(self) -> None:
        """:meth:`train_step`, with running out of device memory turned into :class:`StepMemoryError`."""
        try:
            self.train_step()
        except Exception as e:
            if not _is_out_of_memory(e):
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StepMemoryError(f"{self._batch_text()} does not fit in the {self.device.type} memory ({first}); "
                                  "lower train.batch_size or train.mu") from None


# -------------------------------------------------------------------- command line
def _load_run_dir(run_dir: Path, overrides: Sequence[str]) -> RunConfig:
    run = RunFolder(run_dir)
    if not run.path.is_dir():
        raise RunDirError(f"--resume {run_dir}: directory not found")
    if not run.is_run():
        raise RunDirError(f"--resume {run_dir}: not a mutexmatch run directory (no {RUN_MARKER} / "
                          f"{run.config.name})")
    raw = read_config_file(run.config, f"--resume {run_dir}:")
    raw["output_dir"] = str(run.path)
    from mutexmatch.config import RESUMABLE, apply_overrides, fields_with_role

    allowed = fields_with_role(RESUMABLE)  # declared on the schema fields
    for item in overrides:
        if not item.split("=", 1)[0].strip().startswith(allowed):
            raise RunDirError(f"--set {item!r}: only {', '.join(allowed)} can change on --resume")

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


def _parser() -> argparse.ArgumentParser:
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
    return parser


CallbackFactory = Callable[[RunConfig, bool], Sequence[Callback]]  # (config, resumed) → the run's callbacks


def _make_trainer(args: argparse.Namespace, callbacks: CallbackFactory | None = None) -> Trainer | None:
    """The run's trainer, after the line that says what it will cost (steps, ETA, output folder); None when the
    user declined a long CPU run (nothing written). ``callbacks`` makes the run's callbacks once it will start."""
    if args.resume is not None:
        if args.config is not None or args.overwrite:
            raise RunDirError("--resume DIR uses the config saved in DIR and continues its run; do not pass "
                              "--config or --overwrite")
        cfg, kwargs = _load_run_dir(args.resume, args.overrides), {"resume": True}
        done = checkpoint_steps_done(cfg.output_dir)
    else:
        cfg, kwargs, done = load_config(args.config, args.overrides), {"overwrite": args.overwrite}, 0
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
        return _run(_parser().parse_args(argv), callbacks)


def _run(args: argparse.Namespace, callbacks: CallbackFactory | None = None) -> int:
    trainer = None
    try:
        trainer = _make_trainer(args, callbacks)
        if trainer is None:
            return 1
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            summary = trainer.fit(stop_at=args.stop_at)
    except (ConfigError, CheckpointError, DatasetError, FileExistsError, FileNotFoundError, ImageFolderError,
            RunFolderError, RunDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_interrupted(trainer, args), file=sys.stderr)
        return INTERRUPTED
    except NonFiniteLossError as e:  # its message says what diverged and where; a traceback adds nothing
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a read-only output_dir, a full disk: what was written is intact
        print(_write_failed(trainer, args, e), file=sys.stderr)
        return 1
    m = summary.metrics
    print(json.dumps({"step": summary.step, "output_dir": str(summary.output_dir),
                      **{k: m[k] for k in (M.TEST_ACC, M.TEST_BEST_ACC, M.TEST_MEDIAN_ACC) if k in m}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
