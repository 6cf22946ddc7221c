"""Batched augmentation == torchvision's functional ops (PIL semantics) applied to each image on its own."""
import math

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from PIL import Image, ImageDraw
from torch.utils._python_dispatch import TorchDispatchMode

from mutexmatch.data.augment import (MAGNITUDE_RANGES, STRONG_OPS, apply_ops, cutout, normalize, rand_augment,
                                strong_augment, weak_augment)

torch.set_num_threads(1)

# Every geometric and colour op is bit-exact against its per-image reference, so no tolerance is used anywhere:
# the batched ops replicate torchvision's arithmetic (fused blend, float64 -> float32 affine matrices, the same
# sampling grid) rather than approximating it.


def _images(n: int, c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Noise on a horizontal ramp (so histograms, edges and borders all matter), plus one constant image (the
    min == max / degenerate-histogram branches of AutoContrast and Equalize)."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 256, (n, c, h, w), generator=g).float()
    x = (0.4 * noise + torch.linspace(0, 150, w)).clamp(0, 255).to(torch.uint8)
    x[0] = 77
    return x


def _reference(img: torch.Tensor, name: str, m: float) -> torch.Tensor:
    """The op applied to one image with torchvision (the released code's PIL op, see mutexmatch.data.augment)."""
    h, w = img.shape[-2:]
    if name == "AutoContrast":
        return F.autocontrast(img)
    if name == "Brightness":
        return F.adjust_brightness(img, m)
    if name == "Color":
        return F.adjust_saturation(img, m)
    if name == "Contrast":
        return F.adjust_contrast(img, m)
    if name == "Equalize":
        return F.equalize(img)
    if name == "Identity":
        return img
    if name == "Posterize":
        return F.posterize(img, int(m))
    if name == "Rotate":
        return F.rotate(img, m)
    if name == "Sharpness":
        return F.adjust_sharpness(img, m)
    if name in ("ShearX", "ShearY"):
        deg = math.degrees(math.atan(m))
        shear = [deg, 0.0] if name == "ShearX" else [0.0, deg]
        return F.affine(img, angle=0.0, translate=[0.0, 0.0], scale=1.0, shear=shear, center=[0.0, 0.0])
    if name == "Solarize":  # PIL inverts nothing above 255; torchvision refuses such thresholds
        return F.solarize(img, m) if m <= 255 else img
    if name == "TranslateX":
        return F.affine(img, angle=0.0, translate=[-m * w, 0.0], scale=1.0, shear=[0.0, 0.0])
    if name == "TranslateY":
        return F.affine(img, angle=0.0, translate=[0.0, -m * h], scale=1.0, shear=[0.0, 0.0])
    raise AssertionError(name)


def _magnitudes(name: str, n: int, seed: int) -> torch.Tensor:
    """Uniform magnitudes in the op's range, with both ends (and for Solarize a threshold above 255)."""
    lo, hi = MAGNITUDE_RANGES[name]
    if name == "Posterize":
        return torch.arange(n).remainder(5).float() + 4  # 4..8 (8 = no-op)
    m = lo + (hi - lo) * torch.rand(n, generator=torch.Generator().manual_seed(seed))
    m[1], m[2] = lo, hi - 1e-3 * (hi - lo)
    if name == "Solarize":
        m[3] = 255.5
    return m


@pytest.mark.parametrize("name", STRONG_OPS)
@pytest.mark.parametrize("shape", [(16, 3, 32, 32), (8, 1, 16, 16), (4, 3, 20, 27)])
def test_each_op_equals_torchvision_per_image(name, shape):
    x = _images(*shape, seed=1)
    mags = _magnitudes(name, shape[0], seed=2)
    out = apply_ops(x, torch.full((shape[0],), STRONG_OPS.index(name)), mags)
    assert out.shape == x.shape and out.dtype == torch.uint8
    for i in range(shape[0]):
        torch.testing.assert_close(out[i], _reference(x[i], name, float(mags[i])), rtol=0, atol=0,
                                   msg=lambda s: f"{name} m={float(mags[i])} image {i}: {s}")


@pytest.mark.parametrize("shape", [(48, 3, 32, 32), (24, 1, 16, 16), (6, 3, 96, 96)])
def test_rand_augment_equals_sequential_per_image_ops(shape):
    x = _images(*shape, seed=3)
    out, params = rand_augment(x, num_ops=3, generator=torch.Generator().manual_seed(4), return_params=True)
    assert params["ops"].shape == params["magnitudes"].shape == (shape[0], 3)
    for i in range(shape[0]):
        ref = x[i]
        for k in range(3):
            ref = _reference(ref, STRONG_OPS[params["ops"][i, k]], float(params["magnitudes"][i, k]))
        torch.testing.assert_close(out[i], ref, rtol=0, atol=0)


def test_rand_augment_draws_ops_uniformly_with_replacement_and_magnitudes_in_range():
    x = torch.zeros(7000, 1, 3, 3, dtype=torch.uint8)
    _, params = rand_augment(x, num_ops=2, generator=torch.Generator().manual_seed(5), return_params=True)
    ops, mags = params["ops"], params["magnitudes"]
    counts = torch.bincount(ops.flatten(), minlength=len(STRONG_OPS)).float()
    expected = ops.numel() / len(STRONG_OPS)
    assert (counts - expected).abs().max() < 5 * math.sqrt(expected)  # ~5 sigma of a uniform multinomial
    assert (ops[:, 0] == ops[:, 1]).float().mean() > 0.5 / len(STRONG_OPS)  # repeats allowed
    for j, name in enumerate(STRONG_OPS):
        m = mags[ops == j]
        lo, hi = MAGNITUDE_RANGES[name]
        assert lo <= m.min() and m.max() < hi
        assert m.max() - m.min() >= (3 if name == "Posterize" else 0.9 * (hi - lo))  # the whole range is used
    # Released code: int(U(4, 8)) -> bits in {4, 5, 6, 7}.
    assert set(mags[ops == STRONG_OPS.index("Posterize")].tolist()) == {4.0, 5.0, 6.0, 7.0}


def test_op_choices_come_from_the_host_op_generator_and_magnitudes_from_generator():
    x = _images(40, 3, 16, 16, seed=16)
    g, h = torch.Generator().manual_seed(17), torch.Generator().manual_seed(18)
    _, params = rand_augment(x, num_ops=3, generator=g, op_generator=h, return_params=True)
    assert torch.equal(params["ops"], torch.randint(0, len(STRONG_OPS), (40, 3),
                                                    generator=torch.Generator().manual_seed(18)))
    after_u = torch.Generator().manual_seed(17)
    torch.rand(40, 3, generator=after_u)  # the generator gave the magnitudes' U(0, 1) and nothing else
    assert torch.equal(g.get_state(), after_u.get_state())


class _HostToDeviceCopies(TorchDispatchMode):
    """Records copies from the host to another device that are not asynchronous (a blocking copy waits for the
    device's queue: a synchronisation on CUDA)."""

    def __init__(self):
        super().__init__()
        self.blocking = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src, dst = args[0].device, kwargs.get("device")
            if src.type == "cpu" and dst is not None and dst.type != "cpu" and not kwargs.get("non_blocking"):
                self.blocking.append(func)
        elif func is torch.ops.aten.copy_.default:
            if args[1].device.type == "cpu" and args[0].device.type != "cpu" and not (args[2:] or [False])[0]:
                self.blocking.append(func)
        return func(*args, **kwargs)


def test_steady_state_augmentation_reads_nothing_from_the_device(monkeypatch):
    """On the meta device (shapes, no data) every read of a device value raises (``item``/``tolist``, ``nonzero``,
    boolean indexing, ``bincount``), so the whole weak + strong + normalize path running there proves it needs no
    device->host synchronisation. After one warm-up call (constant tables copied once), a steady-state call also
    makes no blocking host->device copy (``torch.tensor(..., device=...)`` or a synchronous ``.to``)."""
    x = torch.zeros(64, 3, 32, 32, dtype=torch.uint8, device="meta")
    op_generator = torch.Generator().manual_seed(19)

    def step():
        views = [weak_augment(x, flip=True, pad=4),
                 strong_augment(x, flip=True, pad=4, pad_mode="reflect", op_generator=op_generator)]
        return normalize(torch.cat(views), (0.5, 0.4, 0.3), (0.2, 0.2, 0.3))

    step()
    made_on_device = []
    tensor = torch.tensor

    def recording_tensor(*args, **kwargs):
        if torch.device(kwargs.get("device") or "cpu").type != "cpu":
            made_on_device.append(args)
        return tensor(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", recording_tensor)
    with _HostToDeviceCopies() as copies:
        out = step()
    assert out.shape == (128, 3, 32, 32) and out.device.type == "meta"
    assert made_on_device == [] and copies.blocking == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_steady_state_augmentation_does_not_synchronise_cuda():
    x = _images(64, 3, 32, 32).cuda()
    g, h = torch.Generator(device="cuda").manual_seed(20), torch.Generator().manual_seed(21)

    def step():
        views = [weak_augment(x, flip=True, pad=4, generator=g),
                 strong_augment(x, flip=True, pad=4, generator=g, op_generator=h)]
        return normalize(torch.cat(views), (0.5, 0.4, 0.3), (0.2, 0.2, 0.3))

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def _released_cutout_pil(img: torch.Tensor, side: float, cx: float, cy: float, fill) -> torch.Tensor:
    """The released CutoutAbs drawn with PIL (its exact arithmetic, given the centre)."""
    h, w = img.shape[-2:]
    if side <= 0:
        return img
    x0, y0 = int(max(0, cx - side / 2.0)), int(max(0, cy - side / 2.0))
    x1, y1 = min(w, x0 + side), min(h, y0 + side)
    mode = "RGB" if img.shape[0] == 3 else "L"
    pil = Image.fromarray(img.permute(1, 2, 0).squeeze(-1).numpy(), mode)
    ImageDraw.Draw(pil).rectangle((x0, y0, x1, y1), fill)
    return torch.from_numpy(np.array(pil)).reshape(h, w, -1).permute(2, 0, 1)


@pytest.mark.parametrize("shape", [(64, 3, 32, 32), (32, 1, 16, 16), (8, 3, 30, 21)])
def test_cutout_equals_released_box_via_pil_and_torchvision_erase(shape):
    x = _images(*shape, seed=6)
    out, p = cutout(x, generator=torch.Generator().manual_seed(7), return_params=True)
    c, h, w = shape[1:]
    fill = (125, 123, 114) if c == 3 else 121  # 1 channel: round(mean(fill))
    value = torch.tensor(fill if c == 3 else [fill], dtype=torch.uint8).view(c, 1, 1)
    assert ((p["side"] >= 0) & (p["side"] < 0.5 * w)).all()
    for i in range(shape[0]):
        side, (cx, cy) = float(p["side"][i]), p["centre"][i].tolist()
        torch.testing.assert_close(out[i], _released_cutout_pil(x[i], side, cx, cy, fill), rtol=0, atol=0)
        x0, y0 = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
        bw, bh = min(w - 1, math.floor(x0 + side)) - x0 + 1, min(h - 1, math.floor(y0 + side)) - y0 + 1
        torch.testing.assert_close(out[i], F.erase(x[i], y0, x0, bh, bw, value), rtol=0, atol=0)
    # Shifted inside at the top-left edge, clipped at the bottom-right one: both happen in this batch.
    assert ((p["centre"][:, 0] - p["side"] / 2) < 0).any() and ((p["centre"][:, 0] + p["side"] / 2) > w).any()


def test_cutout_fill_and_zero_size():
    x = torch.full((2, 3, 8, 8), 9, dtype=torch.uint8)
    assert (cutout(x, max_frac=0.0, generator=torch.Generator().manual_seed(0)) == x).all()
    out = cutout(x, max_frac=1.0, fill=(200,), generator=torch.Generator().manual_seed(0))
    assert set(out.unique().tolist()) == {9, 200}


@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("shape,pad", [((64, 3, 32, 32), 4), ((16, 1, 16, 16), 2), ((4, 3, 21, 30), 10)])
def test_weak_augment_equals_flip_pad_crop_per_image(shape, pad, flip, pad_mode):
    x = _images(*shape, seed=8)
    out, p = weak_augment(x, flip=flip, pad=pad, pad_mode=pad_mode, generator=torch.Generator().manual_seed(9),
                          return_params=True)
    h, w = shape[-2:]
    for i in range(shape[0]):
        img = F.horizontal_flip(x[i]) if p["flip"][i] else x[i]
        ref = F.crop(F.pad(img, [pad], fill=0, padding_mode=pad_mode), int(p["top"][i]), int(p["left"][i]), h, w)
        torch.testing.assert_close(out[i], ref, rtol=0, atol=0)
    assert bool(p["flip"].any()) == flip
    if shape[0] >= 64:  # per-image offsets cover [0, 2*pad] and flips happen about half the time
        assert set(p["top"].tolist()) == set(p["left"].tolist()) == set(range(2 * pad + 1))
        assert not flip or 16 < int(p["flip"].sum()) < 48


def test_weak_augment_pad_zero_without_flip_is_identity():
    x = _images(5, 3, 12, 12)
    assert torch.equal(weak_augment(x, flip=False, pad=0, generator=torch.Generator().manual_seed(0)), x)


@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
def test_strong_augment_is_randaugment_cutout_then_flip_crop(pad_mode):
    x = _images(32, 3, 32, 32, seed=10)
    out = strong_augment(x, flip=True, pad=4, pad_mode=pad_mode, generator=torch.Generator().manual_seed(11))
    g = torch.Generator().manual_seed(11)
    ref = weak_augment(cutout(rand_augment(x, num_ops=3, generator=g), generator=g), flip=True, pad=4,
                       pad_mode=pad_mode, generator=g)
    assert torch.equal(out, ref)
    # And not the other order (flip/crop first): the order matters for translations near the padded border.
    g = torch.Generator().manual_seed(11)
    other = cutout(rand_augment(weak_augment(x, flip=True, pad=4, pad_mode=pad_mode, generator=g), generator=g),
                   generator=g)
    assert not torch.equal(out, other)


def test_identical_images_get_different_ops_and_outputs():
    x = _images(1, 3, 32, 32, seed=12).expand(64, -1, -1, -1).contiguous()
    g = torch.Generator().manual_seed(13)
    out, p = rand_augment(x, generator=g, return_params=True)
    assert len({tuple(r) for r in p["ops"].tolist()}) > 40
    continuous = p["magnitudes"][p["ops"] != STRONG_OPS.index("Posterize")]  # Posterize bits are integers
    assert len(set(continuous.tolist())) == continuous.numel()
    for views in (out, strong_augment(x, flip=True, pad=4, generator=g), weak_augment(x, flip=True, pad=4,
                                                                                      generator=g)):
        assert len({v.numpy().tobytes() for v in views}) > 40


def test_same_seed_same_batch_other_seed_other_batch():
    x = _images(32, 3, 32, 32, seed=14)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return weak_augment(x, flip=True, pad=4, generator=g), strong_augment(x, flip=True, pad=4, generator=g)

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])


@pytest.mark.parametrize("shape", [(5, 1, 16, 16), (3, 3, 84, 84), (2, 3, 64, 64), (0, 3, 32, 32), (3, 3, 2, 2)])
def test_shapes_and_dtypes_preserved(shape):
    x = _images(max(shape[0], 1), *shape[1:])[: shape[0]]
    g = torch.Generator().manual_seed(15)
    pad = min(shape[-1] - 1, 4)
    for fn in (lambda: weak_augment(x, flip=True, pad=pad, pad_mode="reflect", generator=g),
               lambda: strong_augment(x, flip=True, pad=pad, generator=g),
               lambda: rand_augment(x, num_ops=5, generator=g), lambda: cutout(x, generator=g)):
        out = fn()
        assert out.shape == x.shape and out.dtype == torch.uint8
    assert torch.equal(rand_augment(x, num_ops=0, generator=g), x)


def test_normalize_matches_torchvision_and_layout():
    x = _images(4, 3, 8, 8)
    mean, std = (0.491, 0.482, 0.447), (0.247, 0.243, 0.262)
    ref = F.normalize(F.to_dtype(x, torch.float32, scale=True), mean, std)
    out = normalize(x, mean, std)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last) and out.dtype == torch.float32
    flat = normalize(x, mean, std, channels_last=False, dtype=torch.float64)
    assert flat.is_contiguous() and flat.dtype == torch.float64
    torch.testing.assert_close(flat.float(), ref, rtol=0, atol=1e-5)
    gray = normalize(x[:, :1], (0.5,), (0.25,))
    torch.testing.assert_close(gray, (x[:, :1] / 255.0 - 0.5) / 0.25, rtol=0, atol=1e-5)


X = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)


@pytest.mark.parametrize("call,argument", [
    (lambda: rand_augment(X, num_ops=-1), "num_ops"),
    (lambda: rand_augment(X, num_ops=1.5), "num_ops"),
    (lambda: weak_augment(X, flip=True, pad=-1), "pad"),
    (lambda: strong_augment(X, flip=True, pad=-2), "pad"),
    (lambda: weak_augment(X, flip=True, pad=8, pad_mode="reflect"), "pad"),
    (lambda: weak_augment(X, flip=True, pad=4, pad_mode="edge"), "pad_mode"),
    (lambda: strong_augment(X, flip=True, pad=4, pad_mode="circular"), "pad_mode"),
    (lambda: weak_augment(X, flip=1, pad=4), "flip"),
    (lambda: weak_augment(X.float(), flip=True, pad=4), "x"),
    (lambda: rand_augment(X[0]), "x"),
    (lambda: strong_augment(X[None], flip=True, pad=4), "x"),
    (lambda: cutout(torch.zeros(2, 4, 8, 8, dtype=torch.uint8)), "x"),
    (lambda: cutout(X, max_frac=1.5), "max_frac"),
    (lambda: cutout(X, fill=(1, 2)), "fill"),
    (lambda: cutout(X, fill=(1, 2, 300)), "fill"),
    (lambda: rand_augment(X, generator=1), "generator"),
    (lambda: rand_augment(X, op_generator=1), "op_generator"),
    (lambda: rand_augment(X.to("meta")), "op_generator"),
    (lambda: strong_augment(X.to("meta"), flip=True, pad=4), "op_generator"),
    (lambda: apply_ops(X, torch.tensor([0, 14]), torch.zeros(2)), "ops"),
    (lambda: apply_ops(X, torch.tensor([0, 1]), torch.zeros(3)), "magnitudes"),
    (lambda: normalize(X, (0.5, 0.5), (0.2, 0.2, 0.2)), "mean"),
    (lambda: normalize(X, (0.5,) * 3, (0.2, 0.0, 0.2)), "std"),
    (lambda: normalize(X, (0.5,) * 3, (0.2,) * 3, dtype=torch.int32), "dtype"),
])
def test_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}\b"):
        call()
