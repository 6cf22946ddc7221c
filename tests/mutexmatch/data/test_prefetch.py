"""Prefetcher: the same batches in the same order with or without making them ahead, and the state from before a
batch made ahead; to_device leaves host tensors and queues device copies asynchronously."""

from __future__ import annotations

import pytest
import torch

from mutexmatch.data.prefetch import Prefetcher, to_device


def _source(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return g, (lambda: (torch.rand(3, generator=g), {"i": torch.randint(9, (2,), generator=g)})), (
        lambda: {"g": g.get_state()})


@pytest.mark.parametrize("ahead", [False, True])
def test_sequence_is_the_same_with_and_without_ahead(ahead):
    _, make, state = _source()
    ref = [make() for _ in range(4)]
    _, make, state = _source()
    p = Prefetcher(make, state, torch.device("cpu"), ahead=ahead)
    for want in ref:
        got = p.next()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1]["i"], want[1]["i"])


def test_state_is_from_before_the_batch_made_ahead_and_replays_it():
    g, make, state = _source()
    p = Prefetcher(make, state, torch.device("cpu"), ahead=True)
    p.next()
    saved = p.state()  # a checkpoint now: batch 2 is already made
    assert not torch.equal(saved["g"], g.get_state())
    second = p.next()
    g.set_state(saved["g"])  # a resume restores the saved state and forgets the batch made ahead
    p.drop()
    again = p.next()
    assert torch.equal(again[0], second[0]) and torch.equal(again[1]["i"], second[1]["i"])


def test_without_ahead_state_is_the_current_one():
    g, make, state = _source()
    p = Prefetcher(make, state, torch.device("cpu"))
    assert not p.ahead and p.stream is None
    p.next()
    assert torch.equal(p.state()["g"], g.get_state())


def test_to_device_keeps_host_tensors_and_copies_asynchronously():
    t = torch.arange(5)
    assert to_device(t, torch.device("cpu")) is t
    assert to_device(t, torch.device("meta")).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_made_on_the_side_stream_equal_those_made_inline():
    g = torch.Generator(device="cuda").manual_seed(0)
    make = lambda: torch.rand(1 << 20, generator=g, device="cuda").mul_(2)  # noqa: E731
    state = lambda: {"g": g.get_state()}  # noqa: E731
    ref = [make() for _ in range(3)]
    g.manual_seed(0)
    p = Prefetcher(make, state, torch.device("cuda"))
    assert p.ahead and p.stream is not None
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [p.next().clone() for _ in range(3)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
