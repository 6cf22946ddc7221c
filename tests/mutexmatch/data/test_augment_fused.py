"""The fused augmentation (issue 45: RandAugment's ops as lookup tables, one blend and one resample per slot; Cutout,
flip and crop as one gather) == each op on its own sub-batch, the path test_augment.py checks image by image against
torchvision; the same draws give the same images, bit for bit."""
import pytest
import torch

from mutexmatch.data import augment_ops
from mutexmatch.data.augment import STRONG_OPS, apply_ops, rand_augment, strong_augment

torch.set_num_threads(1)


def _images(n: int, c: int, h: int, w: int, seed: int) -> torch.Tensor:
    """Noise on a ramp, one constant image (AutoContrast's and Equalize's degenerate branches) and one image that
    holds every grey level (every entry of a lookup table is used)."""
    g = torch.Generator().manual_seed(seed)
    x = (0.5 * torch.randint(0, 256, (n, c, h, w), generator=g).float() + torch.linspace(0, 127, w)).to(torch.uint8)
    x[0] = 77
    if n > 1:
        x[1].view(-1)[: min(256, c * h * w)] = torch.arange(min(256, c * h * w), dtype=torch.uint8)
    return x


def _paths_differ(call) -> list[str]:
    """Where ``call(fused)`` gives other images fused than per op, from the same seed."""
    a, b = call(True), call(False)
    return [] if torch.equal(a, b) else [f"{int((a != b).sum())} values differ, by up to "
                                         f"{int((a.int() - b.int()).abs().max())}"]


SHAPES = [(24, 3, 32, 32), (12, 1, 16, 16), (6, 3, 21, 30), (4, 3, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_op_fused_equals_per_op(shape):
    """Each op alone on every image (both of its groups: alone and mixed with the others below)."""
    x = _images(*shape, seed=1)
    mags = torch.rand(shape[0], generator=torch.Generator().manual_seed(2))
    for i, name in enumerate(STRONG_OPS):
        m = 4 + (mags * 5).floor() if name == "Posterize" else mags * 0.9 + 0.05 if name != "Solarize" else mags * 256
        ops = torch.full((shape[0],), i)
        assert _paths_differ(lambda fused: apply_ops(x, ops, m, fused=fused)) == [], name


@pytest.mark.parametrize("shape", SHAPES + [(0, 3, 8, 8)])
@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
def test_strong_augment_fused_equals_per_op(shape, pad_mode):
    x = _images(max(shape[0], 1), *shape[1:], seed=3)[: shape[0]]
    pad = min(shape[-1] - 1, 4)
    for seed in range(2):
        def call(fused):
            return strong_augment(x, flip=True, pad=pad, pad_mode=pad_mode, fused=fused,
                                  generator=torch.Generator().manual_seed(seed))
        assert _paths_differ(call) == []


def test_same_draws_either_way():
    """The random stream is the same: same ops and magnitudes, and the generator ends in the same state."""
    x = _images(30, 3, 16, 16, seed=4)
    states, params = [], []
    for fused in (True, False):
        g = torch.Generator().manual_seed(5)
        params.append(rand_augment(x, generator=g, return_params=True, fused=fused)[1])
        strong_augment(x, flip=True, pad=2, generator=g, fused=fused)
        states.append(g.get_state())
    assert torch.equal(states[0], states[1])
    assert all(torch.equal(params[0][k], params[1][k]) for k in ("ops", "magnitudes"))


def test_a_mutated_lookup_table_is_caught(monkeypatch):
    """The comparison can fail: Brightness's table rounded instead of truncated (a one-level error on about half the
    levels) is found."""
    def rounded(x, index, f):
        return augment_ops._levels(torch.float32, x.device).mul(f).round_().clamp_(0, 255).to(torch.uint8)

    x = _images(16, 3, 8, 8, seed=6)
    ops = torch.full((16,), STRONG_OPS.index("Brightness"))
    mags = torch.linspace(0.05, 0.95, 16)
    monkeypatch.setitem(augment_ops._LUTS, "Brightness", rounded)
    assert _paths_differ(lambda fused: apply_ops(x, ops, mags, fused=fused)) != []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_equals_per_op_on_cuda():
    """On a GPU too (benchmarks/device_check.sh's profile part runs it), and without reading from the device."""
    x = _images(64, 3, 32, 32, seed=9).cuda()
    ops = torch.Generator().manual_seed(10)

    def call(fused):
        ops.manual_seed(10)
        return strong_augment(x, flip=True, pad=4, fused=fused, op_generator=ops,
                              generator=torch.Generator(device="cuda").manual_seed(11))

    call(True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fused, per_op = call(True), call(False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(fused, per_op)
