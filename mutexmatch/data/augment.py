"""Batched weak / strong augmentation of uint8 image batches on the training device.

The paper (Sec. 3) uses a weak augmentation alpha_w (flip + crop) and a strong augmentation alpha_s (RandAugment);
the released code builds both per image with PIL in DataLoader workers, which cannot feed a GPU (a step needs about
47k augmented images/s). Here images stay ``uint8`` tensors ``(N, C, H, W)`` (C = 1 or 3) and whole batches are
augmented on their own device, every image with its own random ops and magnitudes, all drawn from one
``torch.Generator`` on the images' device (same seed, same device -> same batch).

Semantics (what the released code does, see ``shared/notes/official-code.md`` "Data"):

* weak: random horizontal flip (p = 0.5, if the dataset flips), then a random crop of the original size from the
  image padded by ``pad`` pixels (zeros, or reflection), offsets uniform per image.
* strong: ``RandAugment(3)`` -> ``Cutout`` -> flip -> pad-crop, i.e. RandAugment **before** flip/crop. RandAugment is
  the FixMatch variant of the released code: per image ``num_ops`` ops drawn with replacement uniformly from the 14
  of :data:`STRONG_OPS`, each with its own magnitude ``lo + (hi - lo) * U(0, 1)`` (the ``m`` argument is ignored),
  ranges in :data:`MAGNITUDE_RANGES`.

Every op equals the ``torchvision.transforms.v2.functional`` op applied to one image with the same magnitude; these
are PIL's ImageOps / ImageEnhance semantics (the released code's ops), with these documented choices:

* Brightness/Color/Contrast/Sharpness(f): ``adjust_brightness/adjust_saturation/adjust_contrast/adjust_sharpness``,
  bit for bit on CPU (float32 blend, clamp, truncation to uint8). Contrast blends with the float mean of the floored
  grayscale image as torchvision does (PIL rounds that mean to an integer first).
* AutoContrast, Equalize: ``autocontrast`` / ``equalize`` (per image and channel; Equalize uses PIL's LUT scheme).
* Posterize(b): ``posterize(img, b)``. The released code draws ``int(U(4, 8))``, so b is uniform over {4, 5, 6, 7}
  (8 is never drawn); we do the same.
* Solarize(t), t in [0, 256): pixels ``>= t`` are inverted (``solarize``; for t > 255 nothing is inverted, as in
  PIL — torchvision refuses such thresholds).
* Geometric ops use nearest-neighbour sampling and **fill 0**: the released code calls ``img.rotate(v)`` and
  ``img.transform(size, AFFINE, ...)`` without a fill colour, which fill black (the fill (128, 128, 128) belongs to
  other FixMatch ports, not to this code). Rotate(a): ``rotate(img, a)`` (counter-clockwise, about the centre).
  ShearX(v) = PIL ``transform(AFFINE, (1, v, 0, 0, 1, 0))`` = ``affine(shear=[degrees(atan v), 0], center=[0, 0])``,
  ShearY(v) likewise on y. TranslateX(v) = PIL ``(1, 0, v*W, 0, 1, 0)`` (content moves left by v*W pixels) =
  ``affine(translate=[-v*W, 0])``; TranslateY(v) uses v*H.
* Cutout: see :func:`cutout`.

Within one op slot the images are grouped by op (one sort per slot) so each op runs once on the images that drew
it; no Python loop runs over images. By default (``fused=True``, issue 45) a slot is three batched operations
(:mod:`mutexmatch.data.augment_ops`): the six pointwise ops as one per-image lookup table applied by one gather,
Color + Sharpness as one blend, the five geometric ops as one ``grid_sample``; consecutive slots re-sort in one
``index_select``, and the strong view's last un-sort, Cutout, flip and pad-crop are one gather and one masked fill.
``fused=False`` runs each op on its own sub-batch (the path before issue 45); both give the same images bit for bit
from the same random draws (tests/mutexmatch/data/test_augment_fused.py).

Nothing is read back from the images' device, so a CUDA step never waits for its augmentation: the op choices are
drawn on the host (``op_generator``, a CPU generator; on the CPU the images' own generator), the grouping (sort order,
group sizes) is computed there and sent to the device in one asynchronous copy, and small constant tables are copied
to a device once and cached (a ``torch.tensor(..., device=cuda)`` per call is a blocking copy).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as nnf

from mutexmatch.checks import check_int
from mutexmatch.data.augment_ops import (BLEND_OPS, COLOUR_OPS, GEOMETRIC_OPS, LUT_OPS, blend_chunk, constant,
                                         geometric, lut_chunk)
from mutexmatch.data.prefetch import to_device

STRONG_OPS: tuple[str, ...] = (
    "AutoContrast", "Brightness", "Color", "Contrast", "Equalize", "Identity", "Posterize",
    "Rotate", "Sharpness", "ShearX", "ShearY", "Solarize", "TranslateX", "TranslateY",
)

# (lo, hi) of the released code's FixMatch augment list; the magnitude is lo + (hi - lo) * U(0, 1). Ops without a
# magnitude keep the released code's dummy (0, 1) range: their draw is recorded but unused.
MAGNITUDE_RANGES: dict[str, tuple[float, float]] = {
    "AutoContrast": (0.0, 1.0), "Brightness": (0.05, 0.95), "Color": (0.05, 0.95), "Contrast": (0.05, 0.95),
    "Equalize": (0.0, 1.0), "Identity": (0.0, 1.0), "Posterize": (4.0, 8.0), "Rotate": (-30.0, 30.0),
    "Sharpness": (0.05, 0.95), "ShearX": (-0.3, 0.3), "ShearY": (-0.3, 0.3), "Solarize": (0.0, 256.0),
    "TranslateX": (-0.3, 0.3), "TranslateY": (-0.3, 0.3),
}

CUTOUT_FILL: tuple[int, int, int] = (125, 123, 114)
PAD_MODES: tuple[str, ...] = ("constant", "reflect")


def weak_crop(info, crop_ratio: float | None) -> tuple[int, str]:
    """(pad, pad_mode) of the weak crop of images of ``info`` (a DatasetInfo): the dataset's own, or with
    ``data.crop_ratio`` USB-CV's, ``RandomCrop(size, padding=int(size * (1 - crop_ratio)), padding_mode='reflect')``
    (the same float expression)."""
    if crop_ratio is None:
        return info.pad, info.pad_mode
    return int(info.image_size * (1 - crop_ratio)), "reflect"

_OP_INDEX = {name: i for i, name in enumerate(STRONG_OPS)}
# Per-op processing order inside a slot: the geometric ops last, so that after sorting by this rank they form one
# contiguous chunk that is resampled with a single grid_sample call.
_PROCESS_ORDER = tuple(n for n in STRONG_OPS if n not in GEOMETRIC_OPS) + GEOMETRIC_OPS
_RANK_OF_OP = tuple(_PROCESS_ORDER.index(n) for n in STRONG_OPS)
_NUM_NON_GEOMETRIC = len(STRONG_OPS) - len(GEOMETRIC_OPS)
# Fused order: lookup-table ops, blend ops, Identity (nothing to do), geometric ops (issue 45).
_FUSED_ORDER = LUT_OPS + BLEND_OPS + ("Identity",) + GEOMETRIC_OPS
# geometric()'s op code (index into GEOMETRIC_OPS) of each op; 0 for the others, whose code is never read.
_GEOMETRIC_CODE = tuple(GEOMETRIC_OPS.index(n) if n in GEOMETRIC_OPS else 0 for n in STRONG_OPS)


# ----------------------------------------------------------------------------------------------- argument checks
def _check_images(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor of uint8 images (N, C, H, W), got {type(x).__name__}")
    if x.dtype != torch.uint8:
        raise ValueError(f"x must have dtype torch.uint8, got {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"x must have 4 dimensions (N, C, H, W), got ndim={x.ndim} (shape {tuple(x.shape)})")
    if x.shape[1] not in (1, 3):
        raise ValueError(f"x must have 1 or 3 channels (N, C, H, W), got C={x.shape[1]}")


def _check_generator(generator: torch.Generator | None, x: torch.Tensor) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != x.device.type:
        raise ValueError(f"generator must be on the images' device: generator is on {generator.device}, "
                         f"x on {x.device}")


def _op_generator(op_generator: torch.Generator | None, generator: torch.Generator | None,
                  x: torch.Tensor) -> torch.Generator | None:
    """The CPU generator the op choices are drawn from: ``op_generator``, or for CPU images ``generator`` itself
    (so a CPU batch is the same function of one generator as before op choices moved to the host)."""
    if op_generator is None:
        if x.device.type != "cpu":
            raise ValueError(f"op_generator must be a CPU torch.Generator for images on {x.device}: the op choices "
                             f"are drawn on the host so that grouping images by op reads nothing from the device")
        return generator
    if not isinstance(op_generator, torch.Generator) or op_generator.device.type != "cpu":
        raise ValueError(f"op_generator must be a CPU torch.Generator or None, got "
                         f"{getattr(op_generator, 'device', type(op_generator).__name__)}")
    return op_generator


def _check_crop_args(x: torch.Tensor, flip: object, pad: object, pad_mode: object) -> None:
    if not isinstance(flip, bool):
        raise ValueError(f"flip must be a bool, got {flip!r}")
    check_int("pad", pad, low=0)
    if pad_mode not in PAD_MODES:
        raise ValueError(f"pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
    h, w = x.shape[-2:]
    if pad_mode == "reflect" and pad >= min(h, w):
        raise ValueError(f"pad must be < min(H, W) = {min(h, w)} for pad_mode='reflect', got {pad}")


# ------------------------------------------------------------------------------------------------- weak: flip/crop
def _crop_draws(n: int, flip: bool, pad: int, generator: torch.Generator | None,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per image: flipped (bool), top and left offsets in ``[0, 2*pad]``."""
    # One draw per image for the flip even when flip=False keeps the generator's stream independent of the flag.
    flipped = (torch.rand(n, generator=generator, device=device) < 0.5) & flip
    offsets = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator, device=device)
    return flipped, offsets[:, 0], offsets[:, 1]


def _crop_source(flipped: torch.Tensor, top: torch.Tensor, left: torch.Tensor, h: int, w: int, pad: int,
                 pad_mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Where each output pixel of flip -> pad -> crop reads the image: rows (N, H), columns (N, W), and for zero
    padding which pixels are inside the image (N, H, W; None for reflection)."""
    dev = top.device
    rows = top[:, None] + torch.arange(h, device=dev) - pad  # (N, H) row in the unpadded image
    cols = left[:, None] + torch.arange(w, device=dev) - pad  # (N, W) column in the (flipped) unpadded image
    if pad_mode == "reflect":
        rows = torch.where(rows < 0, -rows, torch.where(rows >= h, 2 * (h - 1) - rows, rows))
        cols = torch.where(cols < 0, -cols, torch.where(cols >= w, 2 * (w - 1) - cols, cols))
        valid = None
    else:
        valid = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
        rows, cols = rows.clamp(0, h - 1), cols.clamp(0, w - 1)
    # Flip before padding == read the mirrored column of the unflipped image (the padding is symmetric).
    return rows, torch.where(flipped[:, None], w - 1 - cols, cols), valid


def _gather_pixels(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``out[i, :, r, c] = x[i, :, rows[i, r], cols[i, c]]`` as one gather."""
    n, c, h, w = x.shape
    index = (rows[:, :, None] * w + cols[:, None, :]).reshape(n, 1, h * w).expand(n, c, h * w)
    return torch.gather(x.reshape(n, c, h * w), 2, index).reshape(n, c, h, w)


def weak_augment(x: torch.Tensor, *, flip: bool, pad: int, pad_mode: str = "constant",
                 generator: torch.Generator | None = None,
                 return_params: bool = False) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weak augmentation alpha_w: per image random horizontal flip (p = 0.5 when ``flip``), then a random crop of
    the original size from the image padded by ``pad`` pixels on every side.

    ``pad_mode="constant"`` pads with zeros (the released code's CIFAR/SVHN/STL ``RandomCrop(padding=4)``),
    ``"reflect"`` mirrors without repeating the edge (its mini-ImageNet ``padding_mode='reflect'``; needs
    ``pad < min(H, W)``). The offsets ``top, left`` are uniform in ``[0, 2*pad]`` per image. Equal, image by image,
    to ``crop(pad(horizontal_flip?(img), pad, mode), top, left, H, W)`` of torchvision. Flip, padding and crop are
    done as one gather of precomputed source indices.

    With ``return_params`` also returns ``{"flip": bool (N,), "top": long (N,), "left": long (N,)}``.
    """
    _check_images(x)
    _check_generator(generator, x)
    _check_crop_args(x, flip, pad, pad_mode)
    n, c, h, w = x.shape
    flipped, top, left = _crop_draws(n, flip, pad, generator, x.device)
    rows, cols, valid = _crop_source(flipped, top, left, h, w, pad, pad_mode)
    out = _gather_pixels(x, rows, cols)
    if valid is not None:
        out.mul_(valid[:, None].to(torch.uint8))  # zero padding; a broadcast multiply is ~10x a masked_fill here
    if return_params:
        return out, {"flip": flipped, "top": top, "left": left}
    return out


# ------------------------------------------------------------------------------------------------- RandAugment
def apply_ops(x: torch.Tensor, ops: torch.Tensor, magnitudes: torch.Tensor, *, fused: bool = True) -> torch.Tensor:
    """One RandAugment op slot with given choices: image i gets ``STRONG_OPS[ops[i]]`` with magnitude
    ``magnitudes[i]`` (the op's own unit, as :func:`rand_augment` records it). Images are grouped by op so that
    each op runs once on its sub-batch (``fused``: the ops in three batched operations, see the module docstring).
    The grouping is computed from ``ops`` on the host (``ops`` on a device is read back once: pass a CPU tensor to
    avoid that)."""
    _check_images(x)
    n = x.shape[0]
    if not isinstance(ops, torch.Tensor) or ops.shape != (n,) or ops.dtype != torch.long:
        raise ValueError(f"ops must be a long tensor of shape ({n},), got {getattr(ops, 'dtype', type(ops))} "
                         f"{tuple(getattr(ops, 'shape', ()))}")
    ops = ops.cpu()
    if n and not (0 <= int(ops.min()) and int(ops.max()) < len(STRONG_OPS)):
        raise ValueError(f"ops must be indices in [0, {len(STRONG_OPS)}), got values in "
                         f"[{int(ops.min())}, {int(ops.max())}]")
    if not isinstance(magnitudes, torch.Tensor) or magnitudes.shape != (n,) or not magnitudes.is_floating_point():
        raise ValueError(f"magnitudes must be a float tensor of shape ({n},), got "
                         f"{getattr(magnitudes, 'dtype', type(magnitudes))} {tuple(getattr(magnitudes, 'shape', ()))}")
    mags = magnitudes.to(x.device, torch.float32)
    if fused:
        out, unsort = _fused_slots(x, _fused_plans(ops[:, None], x.shape, x.device), mags[:, None])
        return out.index_select(0, unsort)
    plan, counts = _slot_plans(ops[:, None], x.device)
    return _apply_slot(x, plan[:, 0], mags, counts[0])


def _slot_plans(ops: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, list[list[int]]]:
    """Group each op slot's images by op, on the host: for host ``ops`` (N, K), returns ``plan`` (3, K, N) on
    ``device`` — per slot k the ops, the stable sort order by processing rank and its inverse permutation — and the
    group sizes ``counts[k][r]`` of the ranks r in :data:`_PROCESS_ORDER` order. ``plan`` travels in one
    asynchronous copy; nothing is read from the device."""
    rank = constant(_RANK_OF_OP, torch.long, ops.device)[ops]
    order = torch.argsort(rank, dim=0, stable=True)
    inverse = torch.argsort(order, dim=0)
    counts = nnf.one_hot(rank, len(_PROCESS_ORDER)).sum(dim=0).tolist()  # host arithmetic, not a device sync
    return to_device(torch.stack([ops, order, inverse]).transpose(1, 2), device), counts


def _apply_slot(x: torch.Tensor, plan: torch.Tensor, mag: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Apply one op slot, each op on its own sub-batch: image i gets op ``op[i]`` with magnitude ``mag[i]``, where
    ``op, order, inverse = plan`` and ``counts`` come from :func:`_slot_plans`."""
    op, order, inverse = plan
    # Sorting copies and un-sorting by index_select (row memcpy) are far cheaper than index_put/index_copy.
    xs, ops, mags = x.index_select(0, order), op[order], mag[order].view(-1, 1, 1, 1)
    chunks, start = [], 0
    for name, count in zip(_PROCESS_ORDER[:_NUM_NON_GEOMETRIC], counts):
        if count:
            chunks.append(COLOUR_OPS[name](xs[start:start + count], mags[start:start + count]))
        start += count
    if start < len(order):
        codes = constant(_GEOMETRIC_CODE, torch.long, x.device)[ops[start:]]
        chunks.append(geometric(xs[start:], codes, mags[start:, 0, 0, 0]))
    if not chunks:
        return xs
    return torch.cat(chunks).index_select(0, inverse)


def _fused_plans(ops: torch.Tensor, shape: torch.Size,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Group each slot's images by op in :data:`_FUSED_ORDER`, on the host (host ``ops`` (N, K)): returns the ops
    (K, N) and ``index`` (4, K, N) on ``device`` (one asynchronous copy) — per slot the sort order, the re-sort of
    the previous slot's output, the sorted images' geometric op codes, the inverse order — and the host group sizes
    ``counts[k][r]``. Slot k re-sorts slot k-1's sorted output with ``inverse[k-1][order[k]]``: one
    ``index_select`` per slot. Color of a 1-channel image and Sharpness of an image with a side <= 2 are the
    identity (as in torchvision) and grouped so."""
    c, h, w = shape[1:]
    identity = ({"Color"} if c == 1 else set()) | ({"Sharpness"} if min(h, w) <= 2 else set())
    ranks = tuple(_FUSED_ORDER.index("Identity" if name in identity else name) for name in STRONG_OPS)
    rank = constant(ranks, torch.long, ops.device)[ops]
    order = torch.argsort(rank, dim=0, stable=True)
    inverse = torch.argsort(order, dim=0)
    resort = order.clone()
    resort[:, 1:] = inverse[:, :-1].gather(0, order[:, 1:])
    codes = constant(_GEOMETRIC_CODE, torch.long, ops.device)[ops.gather(0, order)]
    counts = nnf.one_hot(rank, len(_FUSED_ORDER)).sum(dim=0).tolist()  # host arithmetic, not a device sync
    plan = to_device(torch.stack([ops, order, resort, codes, inverse]).transpose(1, 2), device)
    return plan[0], plan[1:], counts


def _fused_slots(x: torch.Tensor, plan: tuple, mags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every slot of ``plan`` on ``x`` with magnitudes ``mags`` (N, K): the images in the last slot's sorted order
    and the index that un-sorts them (``out.index_select(0, unsort)``)."""
    _, (order, resort, codes, inverse), counts = plan
    if not counts:
        return x.clone(), torch.arange(x.shape[0], device=x.device)  # never writes into its input
    nl, nb = len(LUT_OPS), len(BLEND_OPS)
    for k, count in enumerate(counts):
        xs, m = x.index_select(0, resort[k]), mags[:, k].index_select(0, order[k])
        ends = [sum(count[:nl]), sum(count[:nl + nb]), sum(count[:nl + nb + 1]), len(xs)]
        parts = [lut_chunk(xs[:ends[0]], m[:ends[0]], count[:nl]) if ends[0] else None,
                 blend_chunk(xs[ends[0]:ends[1]], m[ends[0]:ends[1]], count[nl:nl + nb]) if ends[1] > ends[0]
                 else None, xs[ends[1]:ends[2]],
                 geometric(xs[ends[2]:], codes[k, ends[2]:], m[ends[2]:]) if ends[3] > ends[2] else None]
        x = torch.cat([p for p in parts if p is not None])
    return x, inverse[-1]


def rand_augment(x: torch.Tensor, *, num_ops: int = 3, generator: torch.Generator | None = None,
                 op_generator: torch.Generator | None = None, return_params: bool = False,
                 fused: bool = True) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The released code's FixMatch RandAugment, batched: per image ``num_ops`` ops drawn with replacement
    uniformly from :data:`STRONG_OPS`, each with its own magnitude ``lo + (hi - lo) * U(0, 1)`` from
    :data:`MAGNITUDE_RANGES` (Posterize: ``4 + floor(4 U)``, the released ``int(U(4, 8))``), applied slot by slot.
    Op semantics: see the module docstring. Cutout is not part of it (see :func:`strong_augment`).

    The op choices are drawn on the host from ``op_generator`` (a CPU generator; required for images on another
    device, defaults to ``generator`` for CPU images), then the magnitudes' U(0, 1) from ``generator``. ``fused``
    (default) or each op on its own sub-batch: the same draws, the same images.

    With ``return_params`` also returns ``{"ops": long (N, num_ops) indices into STRONG_OPS,
    "magnitudes": float32 (N, num_ops)}`` (the magnitude actually used, e.g. the integer Posterize bits).
    """
    out, unsort, params = _rand_augment(x, num_ops, generator, op_generator, fused)
    out = out if unsort is None else out.index_select(0, unsort)
    return (out, params) if return_params else out


def _rand_augment(x: torch.Tensor, num_ops: int, generator: torch.Generator | None,
                  op_generator: torch.Generator | None,
                  fused: bool) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
    """:func:`rand_augment`'s images (fused: in sorted order, with the index that un-sorts them; else None) and
    params."""
    _check_images(x)
    _check_generator(generator, x)
    op_generator = _op_generator(op_generator, generator, x)
    num_ops = check_int("num_ops", num_ops, low=0)
    n, dev = x.shape[0], x.device
    host_ops = torch.randint(0, len(STRONG_OPS), (n, num_ops), generator=op_generator)
    if fused:
        plan = _fused_plans(host_ops, x.shape, dev)
        ops = plan[0].T
    else:
        plan, counts = _slot_plans(host_ops, dev)
        ops = plan[0].T
    u = torch.rand(n, num_ops, generator=generator, device=dev)
    lo = constant(tuple(MAGNITUDE_RANGES[s][0] for s in STRONG_OPS), torch.float32, dev)[ops]
    hi = constant(tuple(MAGNITUDE_RANGES[s][1] for s in STRONG_OPS), torch.float32, dev)[ops]
    mags = torch.where(ops == _OP_INDEX["Posterize"], 4.0 + torch.floor(4.0 * u), lo + (hi - lo) * u)
    params = {"ops": ops, "magnitudes": mags}
    if fused:
        return *_fused_slots(x, plan, mags), params
    out = x.clone() if num_ops == 0 else x  # _apply_slot never writes into its input
    for k in range(num_ops):
        out = _apply_slot(out, plan[:, k], mags[:, k], counts[k])
    return out, None, params


# ------------------------------------------------------------------------------------------------------- cutout
def _fill_values(fill: object, c: int) -> tuple[int, ...]:
    """Cutout's fill as C channel values (1-channel images: ``round(mean(fill))``)."""
    values = tuple(fill) if isinstance(fill, Sequence) else ()
    if len(values) not in (1, 3, c) or not all(isinstance(v, int) and 0 <= v <= 255 for v in values):
        raise ValueError(f"fill must be 1 or 3 ints in [0, 255] (or C of them), got {fill!r}")
    if c == 1 and len(values) != 1:
        return (round(sum(values) / len(values)),)
    return values * c if len(values) == 1 else values


def _cutout_box(n: int, h: int, w: int, max_frac: float, generator: torch.Generator | None,
                device: torch.device) -> tuple[torch.Tensor, ...]:
    """Cutout's draws (side, cx, cy) and its inclusive box (x0, y0, x1, y1), float64 (N,), as the released code."""
    # float64 keeps the floor() of the box edges identical to the released code's Python-float arithmetic.
    u = torch.rand(n, 3, generator=generator, device=device, dtype=torch.float64)
    side = u[:, 0] * (max_frac * w)
    cx, cy = u[:, 1] * w, u[:, 2] * h
    x0 = torch.floor(torch.clamp(cx - side / 2, min=0))
    y0 = torch.floor(torch.clamp(cy - side / 2, min=0))
    x1 = torch.clamp(torch.floor(x0 + side), max=w - 1)
    y1 = torch.clamp(torch.floor(y0 + side), max=h - 1)
    return side, cx, cy, x0, y0, x1, y1


def _in_box(rows: torch.Tensor, cols: torch.Tensor, box: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Whether pixel (rows[i, r], cols[i, c]) of image i lies in its cutout box: (N, 1, H, W) uint8."""
    side, _, _, x0, y0, x1, y1 = box
    in_x = (cols >= x0[:, None]) & (cols <= x1[:, None]) & (side > 0)[:, None]
    in_y = (rows >= y0[:, None]) & (rows <= y1[:, None])
    return (in_y[:, :, None] & in_x[:, None, :])[:, None].to(torch.uint8)


def cutout(x: torch.Tensor, *, max_frac: float = 0.5, fill: Sequence[int] = CUTOUT_FILL,
           generator: torch.Generator | None = None,
           return_params: bool = False) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The released code's Cutout (always applied after RandAugment): a square of side ``s = U(0, max_frac) * W``
    (W = width, used for both sides as the released ``v * img.size[0]``) around a centre ``(cx, cy)`` uniform in the
    image, filled with ``fill``.

    The box is the released ``CutoutAbs`` drawn with PIL's inclusive ``ImageDraw.rectangle``: columns
    ``x0 = floor(max(0, cx - s/2))`` to ``min(W - 1, floor(x0 + s))`` (rows likewise with H), so a box reaching
    past the left/top edge is shifted inside and one past the right/bottom edge is clipped; ``s = 0`` draws nothing.
    The released code's centre is ``np.random.uniform(w)``, i.e. ``U(1, w)`` by numpy's argument order; we use the
    intended ``U(0, W)`` (``U(0, H)`` for rows). For 1-channel images a 3-value ``fill`` becomes
    ``round(mean(fill))`` (121 for the default, the gray PIL would draw for that colour up to rounding).

    With ``return_params`` also returns ``{"side": float64 (N,), "centre": float64 (N, 2) as (cx, cy)}``.
    """
    _check_images(x)
    _check_generator(generator, x)
    if isinstance(max_frac, bool) or not isinstance(max_frac, (int, float)) or not 0.0 <= max_frac <= 1.0:
        raise ValueError(f"max_frac must be a float in [0, 1], got {max_frac!r}")
    n, c, h, w = x.shape
    values = _fill_values(fill, c)
    dev = x.device
    box = _cutout_box(n, h, w, max_frac, generator, dev)
    rows, cols = torch.arange(h, device=dev).expand(n, h), torch.arange(w, device=dev).expand(n, w)
    mask = _in_box(rows, cols, box)
    colour = constant(values, torch.uint8, dev).view(1, c, 1, 1)
    # x*(1-mask) + colour*mask in uint8 (no overflow: one term is always 0); much faster than a broadcast where().
    out = torch.addcmul(x.mul(1 - mask), colour, mask)
    if return_params:
        return out, {"side": box[0], "centre": torch.stack(box[1:3], dim=1)}
    return out


# ------------------------------------------------------------------------------------------------ strong + norm
def strong_augment(x: torch.Tensor, *, flip: bool, pad: int, pad_mode: str = "constant", num_ops: int = 3,
                   generator: torch.Generator | None = None, op_generator: torch.Generator | None = None,
                   fused: bool = True) -> torch.Tensor:
    """Strong augmentation alpha_s in the released code's order: :func:`rand_augment` (``num_ops``, op choices from
    ``op_generator``) -> :func:`cutout` -> flip -> pad-crop (:func:`weak_augment`), all with the one ``generator``.

    ``fused`` (default): RandAugment fused, and its un-sort, Cutout, flip and pad-crop as one gather of the source
    pixels and one masked fill (the box tested at each output pixel's source pixel); the same draws, the same
    images as the three functions one after the other."""
    _check_images(x)
    # Validate the flip/crop arguments before any random draw so a bad call consumes nothing.
    _check_crop_args(x, flip, pad, pad_mode)
    if not fused:
        out = rand_augment(x, num_ops=num_ops, generator=generator, op_generator=op_generator, fused=False)
        out = cutout(out, generator=generator)
        return weak_augment(out, flip=flip, pad=pad, pad_mode=pad_mode, generator=generator)
    out, unsort, _ = _rand_augment(x, num_ops, generator, op_generator, fused=True)
    n, c, h, w = x.shape
    box = _cutout_box(n, h, w, 0.5, generator, x.device)
    rows, cols, valid = _crop_source(*_crop_draws(n, flip, pad, generator, x.device), h, w, pad, pad_mode)
    out = _gather_pixels(out.index_select(0, unsort), rows, cols)
    boxed = _in_box(rows, cols, box)
    keep = 1 - boxed if valid is None else (valid[:, None] & (boxed == 0)).to(torch.uint8)
    fill = boxed if valid is None else boxed.mul_(valid[:, None])
    colour = constant(_fill_values(CUTOUT_FILL, c), torch.uint8, x.device).view(1, c, 1, 1)
    return torch.addcmul(out.mul_(keep), colour, fill)


def normalize(x: torch.Tensor, mean: Sequence[float] | torch.Tensor, std: Sequence[float] | torch.Tensor, *,
              channels_last: bool = True, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 images -> ``(x / 255 - mean) / std`` in ``dtype`` (mean/std per channel, in [0, 1] units as the
    released code's constants), in channels_last memory format when ``channels_last``.

    The arithmetic runs in NCHW, where the per-channel broadcast vectorises, and the layout is changed once at the
    end: about 4x faster on CPU than computing in channels_last (whose innermost dimension is C = 3)."""
    _check_images(x)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    c = x.shape[1]
    stats = {}
    for name, value in (("mean", mean), ("std", std)):
        t = torch.as_tensor(value, dtype=torch.float64).cpu().flatten()  # checked on the host, not the device
        if t.numel() not in (1, c):
            raise ValueError(f"{name} must have 1 or C={c} values, got {t.numel()}")
        if name == "std" and not bool((t > 0).all()):
            raise ValueError(f"std must be > 0, got {std!r}")
        # float64 -> dtype on the host rounds as the device would; the cached copy goes to the device once.
        stats[name] = constant(tuple(t.to(dtype).tolist()), dtype, x.device).view(1, -1, 1, 1)
    out = x.to(dtype, memory_format=torch.contiguous_format).div_(255).sub_(stats["mean"]).div_(stats["std"])
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out
