"""Host->device transfers that do not synchronise, and making the next step's batch ahead of time.

On CUDA a copy from ordinary (pageable) host memory makes the host wait for the copy, which waits for the work
already queued on the stream: a step that copies its sampler indices that way waits for the previous step to finish.
:func:`to_device` copies through pinned memory, asynchronously. :class:`Prefetcher` makes step t+1's batch (indices,
gather, weak + strong augmentation, normalisation) on a side CUDA stream while step t computes, and keeps the
batch-making state from *before* that batch so a checkpoint written meanwhile resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import torch

__all__ = ["to_device", "Prefetcher"]

T = TypeVar("T")


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (on the host) on ``device``, queued on the current stream without making the host wait: CUDA copies
    go through pinned memory (the caching host allocator keeps the pinned block until the copy has run)."""
    if device.type == "cuda":
        return t.contiguous().pin_memory().to(device, non_blocking=True)
    return t.to(device, non_blocking=True)


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


class Prefetcher(Generic[T]):
    """Hands out ``make()``'s batches in order; with ``ahead`` (default: on CUDA) each :meth:`next` also starts the
    following batch, on a side stream on CUDA, so it is made while the caller computes with the current one.

    ``state()`` returns the batch-making state (the samplers' and generators' states, via ``get_state``) from
    before any batch made ahead: a checkpoint that saves it and a resume that restores it make that batch again,
    so the sequence of batches is the same with and without ``ahead``. ``make`` must draw its randomness only from
    the state ``get_state`` covers. Stream order: the side stream waits for the work already queued on the
    consumer's stream before making a batch, the consumer's stream waits for the side stream before using one, and
    every tensor of a handed-out batch is marked as used on the consumer's stream (``record_stream``), so the
    allocator does not reuse its memory for the side stream while the consumer may still read it.
    """

    def __init__(self, make: Callable[[], T], get_state: Callable[[], dict], device: torch.device,
                 ahead: bool | None = None):
        self.make = make
        self.get_state = get_state
        self.device = torch.device(device)
        self.ahead = self.device.type == "cuda" if ahead is None else ahead
        self.stream = torch.cuda.Stream(self.device) if self.ahead and self.device.type == "cuda" else None
        self._pending: tuple[dict, T] | None = None

    def next(self) -> T:
        """The next batch in sequence (the one made ahead, or one made now); with ``ahead`` starts the following."""
        if self._pending is None:
            batch = self.make()
        else:
            batch = self._take()
        if self.ahead:
            self._start()
        return batch

    def state(self) -> dict:
        """The batch-making state before any batch made ahead (what a checkpoint saves)."""
        return self._pending[0] if self._pending is not None else self.get_state()

    def drop(self) -> None:
        """Forget the batch made ahead (after the batch-making state was set from a checkpoint)."""
        self._pending = None

    def _start(self) -> None:
        state = self.get_state()
        if self.stream is None:
            batch = self.make()
        else:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                batch = self.make()
        self._pending = (state, batch)

    def _take(self) -> T:
        _, batch = self._pending
        self._pending = None
        if self.stream is not None:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_stream(self.stream)
            for t in _tensors(batch):
                t.record_stream(consumer)
        return batch
