"""Host->device transfers that do not synchronise.

On CUDA a copy from ordinary (pageable) host memory makes the host wait for the copy, which waits for the work
already queued on the stream: a step that copies its sampler indices that way waits for the previous step to finish.
:func:`to_device` copies through pinned memory, asynchronously.
"""

from __future__ import annotations

import torch

__all__ = ["to_device"]


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (on the host) on ``device``, queued on the current stream without making the host wait: CUDA copies
    go through pinned memory (the caching host allocator keeps the pinned block until the copy has run)."""
    if device.type == "cuda":
        return t.contiguous().pin_memory().to(device, non_blocking=True)
    return t.to(device, non_blocking=True)
