"""What the golden-record tests (test_shrinkmatch, test_rda) share: the tiny network of the golden runs, and one
replayed step checked against the official step's gradients and BatchNorm statistics, then moved onto the official
weights."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import torch
from torch import nn

CLOSE = {"atol": 1e-6, "rtol": 1e-6}


class GoldenNet(nn.Module):
    """The golden runs' network by our names: ``body`` (Linear, BatchNorm1d, tanh), the classifier ``tpc`` and the
    algorithm's other modules by name (RDA's complementary classifier ``tnc``, ShrinkMatch's ``heads``), sized by
    the record's config (``d_in``, ``width``, ``num_classes``)."""

    def __init__(self, cfg: Mapping, **modules: nn.Module) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(cfg["d_in"], cfg["width"]), nn.BatchNorm1d(cfg["width"]), nn.Tanh())
        self.tpc = nn.Linear(cfg["width"], cfg["num_classes"])
        for name, module in modules.items():
            setattr(self, name, module)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.fixture
def golden_net() -> type[GoldenNet]:
    """:class:`GoldenNet`."""
    return GoldenNet


def check_and_take_official_step(model: nn.Module, run: Mapping, t: int, official_name: Callable[[str], str],
                                 lr: float, at: str) -> None:
    """Every gradient of ``model`` and every buffer after its forward equal the official step ``t``'s (within 1e-6);
    then the official SGD update (``lr``) and statistics are applied, so the next step starts on its weights."""
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, run["grads"][official_name(name)][t], **CLOSE,
                                   msg=lambda m: f"{at}: gradient of {name}\n{m}")
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, run["buffers"][official_name(name)][t], **CLOSE,
                                   msg=lambda m: f"{at}: {name} after the forward\n{m}")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(run["grads"][official_name(name)][t], alpha=-lr)
            p.grad = None
        for name, buf in model.named_buffers():
            buf.copy_(run["buffers"][official_name(name)][t])


@pytest.fixture
def official_step() -> Callable[..., None]:
    """:func:`check_and_take_official_step`."""
    return check_and_take_official_step


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread (on a loaded 2-core machine test_rda's 132 steps took 27 s with the default
    threads, 0.4 s with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
