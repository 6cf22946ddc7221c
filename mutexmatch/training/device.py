"""The training device and the process-wide settings a run makes on it: which device, threads, the CPU
allocator, determinism, cuDNN autotuning, and the autocast of ``train.precision``.

Every setting is made by every trainer, on or off, because it is process-wide and a Ray worker reused across trials
must not keep the previous trial's.
"""

from __future__ import annotations

import contextlib
import os

import torch

from mutexmatch.config import ConfigError, RunConfig
from mutexmatch.training.allocator import keep_freed_memory

__all__ = ["resolve_device", "configure_process", "autocast_factory", "synchronize", "AUTOCAST_DTYPES"]

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # train.precision


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={spec!r}: CUDA is not available on this machine (use `cpu` or `auto`)")
    return torch.device(spec)


def _set_deterministic(on: bool) -> None:
    """``train.deterministic``."""
    if on:
        # cuBLAS reads it when PyTorch creates a handle's workspace, i.e. before this run's first CUDA matmul.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on, warn_only=True)


def configure_process(cfg: RunConfig, device: torch.device) -> None:
    """``train.num_threads``, ``train.keep_freed_memory`` (CPU), ``train.deterministic`` and, on CUDA, cuDNN's
    autotuning (off when deterministic: autotuned convolution algorithms vary run to run)."""
    t = cfg.train
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    if device.type == "cpu" and t.keep_freed_memory:
        keep_freed_memory()
    _set_deterministic(t.deterministic)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = not t.deterministic


def autocast_factory(device: torch.device, precision: str):
    """A function returning a fresh context of ``precision``'s autocast on ``device`` (a null context for fp32)."""
    dtype = AUTOCAST_DTYPES[precision]
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA; a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
