"""The image kernels of :mod:`mutexmatch.data.augment`: RandAugment's ops on uint8 sub-batches, each image with its
own magnitude, two ways.

* Per op (:data:`COLOUR_OPS`, :func:`geometric`): each op on the images that drew it, one call per op; what the
  equivalence tests compare with torchvision image by image.
* Fused (issue 45): the six pointwise ops (:data:`LUT_OPS`) become one 256-entry lookup table per image and channel,
  applied to all their images by one ``gather`` (:func:`lut_chunk`); Color and Sharpness are one blend
  (:func:`blend_chunk`); the geometric ops stay one ``grid_sample`` (:func:`geometric`). Each table is the per-op
  arithmetic applied to the 256 grey levels instead of to the pixels, so the result is the same bit for bit.

Magnitudes are in the ops' own units (:data:`mutexmatch.data.augment.MAGNITUDE_RANGES`); images are ``(N, C, H, W)``
uint8, C = 1 or 3.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as nnf
import torchvision.transforms.v2.functional as tvf

GEOMETRIC_OPS: tuple[str, ...] = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY")
LUT_OPS: tuple[str, ...] = ("AutoContrast", "Brightness", "Contrast", "Equalize", "Posterize", "Solarize")
BLEND_OPS: tuple[str, ...] = ("Color", "Sharpness")


@functools.lru_cache(maxsize=None)
def constant(values: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The table ``values`` on ``device``, copied there once: a per-call ``torch.tensor(values, device=cuda)`` is a
    blocking host->device copy, i.e. a synchronisation per step. Callers never write into it."""
    return torch.tensor(values, dtype=dtype, device=device)


# --------------------------------------------------------------------------------------------- per op: colour
def blend(img: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_blend`` with a per-image ratio: ``img*r + other*(1-r)``, clamped and truncated to uint8.

    ``addcmul`` reproduces the fused multiply-add of torchvision's ``mul(r).add_(other, alpha=1-r)`` bit for bit
    on CPU (checked by the tests; a plain ``a*r + b*(1-r)`` differs by one level on ~0.1 % of pixels, where the
    truncation to uint8 falls on the other side). CUDA kernels were not compared here."""
    return torch.addcmul(img.float().mul_(ratio), other, 1.0 - ratio).clamp_(0, 255).to(torch.uint8)


def _brightness(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return x.float().mul_(f).clamp_(0, 255).to(torch.uint8)


def _color(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 1:  # PIL (and torchvision): saturation of a grayscale image is a no-op
        return x
    # rgb_to_grayscale's uint8 output is the floored float luma torchvision blends with.
    return blend(x, tvf.rgb_to_grayscale(x).float(), f)


def _grey_mean(x: torch.Tensor) -> torch.Tensor:
    """The float mean of the floored grayscale image, (N, 1, 1, 1): what Contrast blends with."""
    gray = tvf.rgb_to_grayscale(x) if x.shape[1] == 3 else x
    return gray.float().mean(dim=(-3, -2, -1), keepdim=True)


def _contrast(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return blend(x, _grey_mean(x), f)


def smooth_minus_inner(xf: torch.Tensor) -> torch.Tensor:
    """PIL's SMOOTH filter as torchvision's sharpness computes it, minus the image, on the inner pixels (float,
    (N, C, H-2, W-2)): ``round((sum of the 3x3 window + 4 * centre) / 13) - centre`` (kernel 1/13 around, 5/13 in
    the middle).

    The blur is summed exactly in float with shifted slices (several times faster than a grouped conv2d here). It
    rounds to the same integer as torchvision's conv: the exact value T/13 (T an integer) is never closer than 1/26
    to a half-integer, far beyond either computation's float error."""
    rows = xf[..., :-2, :] + xf[..., 1:-1, :] + xf[..., 2:, :]
    inner = xf[..., 1:-1, 1:-1]
    blurred = (rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]).add_(inner, alpha=4).div_(13).round_()
    return blurred.sub_(inner)


def _sharpness(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Blend with the rounded blur (:func:`smooth_minus_inner`), torchvision's ``inner + (blur - inner)*(1 - f)``,
    border pixels kept."""
    h, w = x.shape[-2:]
    if h <= 2 or w <= 2:
        return x
    out = x.float()
    inner = out[..., 1:-1, 1:-1]
    inner.copy_(torch.addcmul(inner, smooth_minus_inner(out), 1.0 - f))
    return out.clamp_(0, 255).to(torch.uint8)


def _posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    keep = constant(tuple(256 - 2 ** (8 - b) for b in range(9)), torch.uint8, x.device)  # (0xFF << (8 - b)) & 0xFF
    return x & keep[bits.long()]


def _solarize(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= threshold, 255 - x, x)


COLOUR_OPS = {
    "AutoContrast": lambda x, m: tvf.autocontrast(x),
    "Brightness": _brightness,
    "Color": _color,
    "Contrast": _contrast,
    "Equalize": lambda x, m: tvf.equalize(x),
    "Identity": lambda x, m: x,
    "Posterize": _posterize,
    "Sharpness": _sharpness,
    "Solarize": _solarize,
}


# ------------------------------------------------------------------------------------------------ geometric ops
# Per geometric op, where t0..t5 of its inverse matrix come from in geometric()'s values
# (1, 0, m, cos, sin, -sin, m*H/2, m*W/2, m*W, m*H).
_MATRIX_ENTRIES = ((3, 4, 1, 5, 3, 1), (0, 2, 6, 1, 0, 1), (0, 1, 1, 2, 0, 7), (0, 1, 8, 1, 0, 1), (0, 1, 1, 1, 0, 9))


@functools.lru_cache(maxsize=None)
def _base_grid(h: int, w: int, device: torch.device) -> torch.Tensor:
    """torchvision's ``_affine_grid`` base: centred pixel coordinates (x, y, 1), (H*W, 3); made once per size."""
    base = torch.empty(h, w, 3, dtype=torch.float32, device=device)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=device))
    base[..., 1].copy_(torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=device).unsqueeze_(-1))
    base[..., 2].fill_(1)
    return base.view(1, h * w, 3)


def geometric(x: torch.Tensor, op: torch.Tensor, mag: torch.Tensor) -> torch.Tensor:
    """Rotate/ShearX/ShearY/TranslateX/TranslateY (``op``: indices into :data:`GEOMETRIC_OPS`), each image with its
    own op and magnitude, in one resample.

    Builds, per image, the inverse affine matrix torchvision's ``rotate``/``affine`` build for that op (in float64,
    then float32, in centred pixel coordinates; a shear uses PIL's v itself, which torchvision's
    ``tan(radians(degrees(atan v)))`` equals to float64 rounding), the sampling grid exactly as torchvision's
    ``_affine_grid`` does, and one nearest ``grid_sample`` with zero padding (= fill 0)."""
    n, _, h, w = x.shape
    dev = x.device
    m = mag.double()
    # torchvision.rotate(a) maps output to input with rot = radians(-(a mod 360)): [[cos, sin], [-sin, cos]].
    rot = torch.deg2rad(-torch.remainder(m, 360.0))
    cos, sin = torch.cos(rot), torch.sin(rot)
    # Shears about the top-left corner (PIL's origin, torchvision center=[0, 0]) add v*H/2 resp. v*W/2; a
    # translation by -v*size (PIL's (1, 0, v*W, ...)) becomes +v*size in the inverse map. Each op's inverse matrix
    # [[t0, t1, t2], [t3, t4, t5]] (centred coordinates, y down) picks its entries from these values
    # (:data:`_MATRIX_ENTRIES`): one gather instead of a select per op and entry.
    values = torch.stack([torch.ones_like(m), torch.zeros_like(m), m, cos, sin, -sin, m * (h * 0.5), m * (w * 0.5),
                          m * w, m * h], dim=1)
    entries = constant(_MATRIX_ENTRIES, torch.long, dev)[op]
    theta = values.gather(1, entries).float().view(n, 2, 3)
    scaled = theta.transpose(1, 2).div_(constant((0.5 * w, 0.5 * h), torch.float32, dev))
    grid = _base_grid(h, w, dev).expand(n, h * w, 3).bmm(scaled).view(n, h, w, 2)
    out = nnf.grid_sample(x.float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return out.round_().to(torch.uint8)


# ---------------------------------------------------------------------------------------- fused: lookup tables
def _levels(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return constant(tuple(range(256)), dtype, device).view(1, 1, 256)


def _autocontrast_lut(x: torch.Tensor, index: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """torchvision's ``autocontrast_image`` arithmetic on the levels: ``(v - min) / ((max - min) / 255)`` per
    channel, clamped; a constant channel keeps its values."""
    flat = x.flatten(-2)
    minimum, maximum = flat.amin(-1, keepdim=True).float(), flat.amax(-1, keepdim=True).float()
    same = maximum == minimum
    inv_scale = torch.where(same, 1.0, maximum.sub(minimum).mul_(1.0 / 255))
    minimum = torch.where(same, 0.0, minimum)
    return _levels(torch.float32, x.device).sub(minimum).div_(inv_scale).clamp_(0, 255).to(torch.uint8)


def _brightness_lut(x: torch.Tensor, index: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return _levels(torch.float32, x.device).mul(f).clamp_(0, 255).to(torch.uint8)  # as _brightness


def _contrast_lut(x: torch.Tensor, index: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    levels = _levels(torch.float32, x.device)
    return torch.addcmul(levels.mul(f), _grey_mean(x).view(-1, 1, 1), 1.0 - f).clamp_(0, 255).to(torch.uint8)


def _equalize_lut(x: torch.Tensor, index: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """torchvision's ``equalize_image`` table (PIL's scheme): ``lut[k] = (cum_hist[k-1] + step // 2) // step``
    with ``step = (pixels - count of the channel's largest value) // 255``; a channel with ``step == 0`` keeps its
    values."""
    hist = torch.zeros(index.shape[:-1] + (256,), dtype=torch.int32, device=x.device)
    hist.scatter_add_(-1, index, hist.new_ones(1).expand_as(index))
    cum_hist = hist.cumsum(dim=-1)
    top = cum_hist.argmax(dim=-1, keepdim=True)
    step = (index.shape[-1] - hist.gather(-1, top)).div_(255, rounding_mode="floor")
    lut = cum_hist[..., :-1].add_(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = nnf.pad(lut, (1, 0)).to(torch.uint8)
    return torch.where(step != 0, lut, _levels(torch.uint8, x.device))


def _posterize_lut(x: torch.Tensor, index: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    return _posterize(_levels(torch.uint8, x.device), bits)


def _solarize_lut(x: torch.Tensor, index: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    return _solarize(_levels(torch.uint8, x.device), threshold)


_LUTS = {"AutoContrast": _autocontrast_lut, "Brightness": _brightness_lut, "Contrast": _contrast_lut,
         "Equalize": _equalize_lut, "Posterize": _posterize_lut, "Solarize": _solarize_lut}


def lut_chunk(x: torch.Tensor, mags: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The ops of :data:`LUT_OPS` on ``x`` sorted by op in that order (``counts[k]`` images of op k, host ints),
    magnitudes ``mags`` (N,): each op builds its images' tables (N_k, 1 or C, 256) from their statistics, and one
    ``gather`` looks every pixel up."""
    n, c, h, w = x.shape
    index = x.reshape(n, c, h * w).long()
    tables, start = [], 0
    for name, count in zip(LUT_OPS, counts):
        if count:
            part = slice(start, start + count)
            f = mags[part].view(-1, 1, 1)
            tables.append(_LUTS[name](x[part], index[part], f).expand(count, c, 256))
        start += count
    return torch.cat(tables).gather(2, index).view(n, c, h, w)


def blend_chunk(x: torch.Tensor, mags: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Color and Sharpness on ``x`` sorted in :data:`BLEND_OPS` order (``counts`` images each; 3 channels and
    both sides above 2 pixels, else they are the identity and the caller leaves them out): one
    ``addcmul(a, b, 1 - f)`` with ``a = x*f, b = grey`` (Color, torchvision's blend) or ``a = x, b = blur - x``
    on the inner pixels and 0 on the border (Sharpness, torchvision's ``x + (blur - x)*(1 - f)``)."""
    xf = x.float()
    f = mags.view(-1, 1, 1, 1)
    colour, sharp = counts
    a, b = [], []
    if colour:
        a.append(xf[:colour] * f[:colour])
        b.append(tvf.rgb_to_grayscale(x[:colour]).float().expand(colour, *x.shape[1:]))
    if sharp:
        a.append(xf[colour:])
        b.append(nnf.pad(smooth_minus_inner(xf[colour:]), (1, 1, 1, 1)))
    return torch.addcmul(torch.cat(a), torch.cat(b), 1.0 - f).clamp_(0, 255).to(torch.uint8)
