"""ModelEMA: the multi-tensor update equals the per-parameter formula up to float rounding; buffers are copied."""

from __future__ import annotations

import torch
from torch import nn

from mutexmatch.training.ema import ModelEMA


def test_foreach_update_equals_the_formula_and_copies_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(2, 3, 6, 6))
    ema = ModelEMA(model, 0.999)
    expected = [p.detach().clone() for p in ema.module.parameters()]
    for _ in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model(torch.randn(2, 3, 6, 6))  # train mode: moves the BN running statistics
        ema.update()
        expected = [0.999 * e + (1 - 0.999) * p.detach() for e, p in zip(expected, model.parameters())]
    for got, want, trained in zip(ema.module.parameters(), expected, model.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        assert (got - trained).abs().min() > 1e-3  # an average, not a copy of the trained weights
    for got, want in zip(ema.module.buffers(), model.buffers()):
        assert torch.equal(got, want)


def test_zero_decay_copies_the_parameters():
    model = nn.Linear(3, 2)
    ema = ModelEMA(model, 0.0)
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update()
    assert torch.equal(ema.module.weight, model.weight)
