"""Will the run fit? Memory checks before any image is decoded, before the first step and at a step that fails.

:func:`check_memory` refuses a run whose decoded images and one training step exceed the memory available now
(host, and the device on CUDA); :func:`check_batch_memory` a step whose input batch alone exceeds the device;
:func:`step_memory_error` turns an allocator's out-of-memory error in a step into one line saying what to lower.
One step's activations are estimated from the backbone's own figure
(:attr:`mutexmatch.models.BackboneSpec.activation_bytes_per_pixel`).
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import torch

from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.config import ConfigError, RunConfig
from mutexmatch.data import imagefolder
from mutexmatch.data.load import Footprint, footprint, get_dataset
from mutexmatch.models import BACKBONES

__all__ = ["StepMemoryError", "MemoryBudgetError", "check_memory", "check_batch_memory", "step_memory_error",
           "step_images", "ACTIVATION_SHARE"]

ACTIVATION_SHARE = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.5}  # autocast saves about half (the table's bf16 column)


class StepMemoryError(ConfigError):
    """One training step does not fit in the training device's memory (``train.batch_size`` and ``train.mu``)."""


class MemoryBudgetError(ConfigError):
    """The run's decoded images and one training step would not fit in the memory available now (refused before
    any image is decoded, instead of swapping for minutes until the kernel kills the process)."""


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


def step_images(cfg: RunConfig, forwards: bool = True) -> int:
    """Images of one step: its views (the algorithm's StepSpec; by default B (1 + 2 mu)) and, with ``forwards``,
    the batches of its extra forwards."""
    t, alg = cfg.train, ALGORITHMS[cfg.algorithm.name]
    return alg.step.images_per_step(t.batch_size, t.mu, alg.uses_unlabeled, forwards)


def _step_bytes(cfg: RunConfig, fp: Footprint, world_size: int = 1) -> int:
    """A lower bound of one training step's memory on one rank: its saved activations (data parallel: of this rank's
    1/``world_size`` of the rows), else its float32 input batch (every rank makes the whole batch)."""
    per_pixel = BACKBONES[cfg.model.backbone].activation_bytes_per_pixel
    if per_pixel is None:
        return step_images(cfg) * fp.nbytes(1) * 4
    return int(step_images(cfg) * per_pixel * ACTIVATION_SHARE[cfg.train.precision] * fp.size ** 2) // world_size


def _state(cfg: RunConfig) -> tuple[int, str, str]:
    """The algorithm's own state on the training device (:meth:`Algorithm.state_memory`: CoMatch's memory bank),
    with the dataset's class count (an image folder's is counted at load: 2 here, a lower bound)."""
    classes = 2 if cfg.data.dataset == imagefolder.NAME else get_dataset(cfg.data.dataset).info.num_classes
    return ALGORITHMS[cfg.algorithm.name].state_memory(cfg.algorithm, cfg.train.batch_size, cfg.train.mu, classes)


def _memory_needs(cfg: RunConfig, device: torch.device, fp: Footprint,
                  world_size: int = 1) -> dict[str, tuple[int, int]]:
    """Memory -> (images it holds, bytes of one step and the algorithm's state in it) once the trainer is built
    (one rank's)."""
    ulb_copy = fp.train + fp.unlabeled if fp.unlabeled else 0  # the trainer's cat of train and unlabeled images
    step = _step_bytes(cfg, fp, world_size) + _state(cfg)[0]
    if device.type == "cuda":  # the training images move to the device; the test images stay on the host
        return {"host": (fp.loaded_images, 0), "cuda": (fp.train + ulb_copy, step)}
    return {"host": (fp.loaded_images + ulb_copy, step)}


def check_memory(cfg: RunConfig, device: torch.device, world_size: int = 1) -> None:
    """Refuse, before any image is decoded, a run whose images and one training step need more memory than is
    available (:class:`MemoryBudgetError`, one line with both figures and what to change); data parallel, one
    rank's share of ``world_size``."""
    d = cfg.data
    fp = footprint(d.dataset, d.root, svhn_extra=d.svhn_extra, image_size=d.image_size)
    have = _available_memory(device)
    for where, (images, step) in _memory_needs(cfg, device, fp, world_size).items():
        free = have.get(where)
        need = fp.nbytes(images) + step
        if free is None or need <= free:
            continue
        side = f"{fp.channels}x{fp.size}x{fp.size}"
        parts = f"{_size(fp.nbytes(images))} for {images:,} decoded images of {side}"
        fix = "use a smaller data.image_size or fewer images"
        if step:
            parts, fix = _step_words(cfg, step, world_size, parts, fix)
        raise MemoryBudgetError(f"data.image_size={fp.size}: {d.dataset} needs {_size(need)} of {where} memory "
                                f"({parts}), but {_size(free)} is available; {fix}")


def _step_words(cfg: RunConfig, step: int, world_size: int, parts: str, fix: str) -> tuple[str, str]:
    """The memory message's figures for one step (and the algorithm's state) and what to lower."""
    state, what, field = _state(cfg)
    rank = f" (this rank's 1/{world_size})" if world_size > 1 else ""
    parts += (f", at least {_size(step - state)} for one step of {step_images(cfg)} images{rank} "
              f"({cfg.model.backbone})")
    if state:
        parts += f", {_size(state)} for {what} ({field}={getattr(cfg.algorithm, field.partition('.')[2])})"
    fix += ", or a smaller train.batch_size or train.mu"
    if BACKBONES[cfg.model.backbone].activation_bytes_per_pixel is not None:
        fix += ", or more data-parallel processes (torchrun --nproc-per-node)"
    if state:
        fix += f", or a smaller {field}"
    return parts, fix


def _batch_text(cfg: RunConfig, image_shape: tuple[int, ...]) -> str:
    t = cfg.train
    shape = "x".join(map(str, image_shape))
    return (f"train.batch_size={t.batch_size}, train.mu={t.mu}: one step of {step_images(cfg, False)} "
            f"images of {shape}")


def check_batch_memory(cfg: RunConfig, image_shape: tuple[int, ...], device: torch.device) -> None:
    """Refuse up front a step whose input batch alone (float32, the algorithm's views: by default labeled + weak
    + strong) exceeds the device's memory; a step that still does not fit raises :class:`StepMemoryError` at
    its first step (:func:`step_memory_error`)."""
    need = step_images(cfg, forwards=False) * math.prod(image_shape) * 4
    have = _device_memory(device)
    if have is not None and need > have:
        raise StepMemoryError(f"{_batch_text(cfg, image_shape)}: the input batch alone takes {_size(need)}, more "
                              f"than the {device.type} memory ({_size(have)}); lower train.batch_size or train.mu")


def step_memory_error(e: BaseException, cfg: RunConfig, image_shape: tuple[int, ...],
                      device: torch.device) -> StepMemoryError | None:
    """The :class:`StepMemoryError` for ``e`` raised by a training step if it is the allocator running out of
    memory (PyTorch's: ``torch.OutOfMemoryError`` on CUDA, a RuntimeError on the CPU); None for any other error."""
    if not (isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
            isinstance(e, RuntimeError) and "can't allocate memory" in str(e))):
        return None
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    state, what, field = _state(cfg)
    also = f", or {field} ({what}: {_size(state)})" if state else ""
    return StepMemoryError(f"{_batch_text(cfg, image_shape)} does not fit in the {device.type} memory ({first}); "
                           f"lower train.batch_size or train.mu{also}")


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"
