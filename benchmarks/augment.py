"""Throughput of the weak + strong augmentation of one unlabeled batch: batched on the device vs. the released design.

    python benchmarks/augment.py [--device cpu|cuda] [--batch 448] [--seconds 10] [--workers N] [--threads T]

Both pipelines turn each CIFAR-sized (32x32x3 uint8) image into a weak view (flip, crop pad 4) and a strong view
(RandAugment(3 ops, FixMatch ranges) -> Cutout -> flip -> crop), normalised to float, and are timed in the same run:

* ``batched``: :mod:`mutexmatch.data.augment` on whole uint8 batches on ``--device`` (weak_augment + strong_augment +
  normalize to channels_last float32, as the trainer does), from a uint8 image store on that device; measured with
  the fused ops (the default, issue 45) and with each RandAugment op on its own sub-batch (``fused=False``, the path
  before), the same images.
* ``per-image PIL``: the released code's design, re-written here: per image PIL ImageOps/ImageEnhance RandAugment
  with the released code's ops and magnitude ranges, its Cutout, torchvision's RandomHorizontalFlip/RandomCrop/
  ToTensor/Normalize, in a ``torch.utils.data.DataLoader`` with ``--workers`` processes (default: all cores).

Printed: images/s (source images, each giving a weak and a strong view), augmented views/s, and the ratios.

On a busy CPU (load average above the core count) with more than one torch thread, OpenMP's default spin-waiting
makes each of the pipeline's many small parallel ops wait for a descheduled thread: measured here at load ~10 on 2
cores, 170 images/s with 2 threads vs ~3,000 with ``--threads 1`` or with ``OMP_WAIT_POLICY=PASSIVE`` in the
environment. The script prints the load average and a reminder when the machine is busy.
"""
from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image, ImageDraw, ImageEnhance, ImageOps

from mutexmatch.data.augment import normalize, strong_augment, weak_augment

MEAN = (125.3 / 255, 123.0 / 255, 113.9 / 255)  # CIFAR-10, as the released code
STD = (63.0 / 255, 62.1 / 255, 66.7 / 255)
NUM_IMAGES = 10_000


# ------------------------------------------------------------------------------------ released design, per image
def _shear_x(img: Image.Image, v: float) -> Image.Image:
    return img.transform(img.size, Image.AFFINE, (1, v, 0, 0, 1, 0))


def _shear_y(img: Image.Image, v: float) -> Image.Image:
    return img.transform(img.size, Image.AFFINE, (1, 0, 0, v, 1, 0))


def _translate_x(img: Image.Image, v: float) -> Image.Image:
    return img.transform(img.size, Image.AFFINE, (1, 0, v * img.size[0], 0, 1, 0))


def _translate_y(img: Image.Image, v: float) -> Image.Image:
    return img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, v * img.size[1]))


# (op, lo, hi): the released code's FixMatch list; magnitude lo + (hi - lo) * U(0, 1), fill 0, nearest.
PIL_OPS = [
    (lambda img, v: ImageOps.autocontrast(img), 0, 1),
    (lambda img, v: ImageEnhance.Brightness(img).enhance(v), 0.05, 0.95),
    (lambda img, v: ImageEnhance.Color(img).enhance(v), 0.05, 0.95),
    (lambda img, v: ImageEnhance.Contrast(img).enhance(v), 0.05, 0.95),
    (lambda img, v: ImageOps.equalize(img), 0, 1),
    (lambda img, v: img, 0, 1),
    (lambda img, v: ImageOps.posterize(img, int(v)), 4, 8),
    (lambda img, v: img.rotate(v), -30, 30),
    (lambda img, v: ImageEnhance.Sharpness(img).enhance(v), 0.05, 0.95),
    (_shear_x, -0.3, 0.3),
    (_shear_y, -0.3, 0.3),
    (lambda img, v: ImageOps.solarize(img, v), 0, 256),
    (_translate_x, -0.3, 0.3),
    (_translate_y, -0.3, 0.3),
]


class PilRandAugmentCutout:
    """Released design: ``num_ops`` ops drawn with replacement, then Cutout of side U(0, 0.5)*W filled (125,123,114)."""

    def __init__(self, num_ops: int = 3) -> None:
        self.num_ops = num_ops

    def __call__(self, img: Image.Image) -> Image.Image:
        for op, lo, hi in random.choices(PIL_OPS, k=self.num_ops):
            img = op(img, lo + (hi - lo) * random.random())
        side = random.random() * 0.5 * img.size[0]
        if side > 0:
            w, h = img.size
            x0 = int(max(0, random.uniform(0, w) - side / 2))
            y0 = int(max(0, random.uniform(0, h) - side / 2))
            img = img.copy()
            ImageDraw.Draw(img).rectangle((x0, y0, min(w, x0 + side), min(h, y0 + side)), (125, 123, 114))
        return img


class PilPairDataset(torch.utils.data.Dataset):
    """(weak, strong) float views of one HWC uint8 image, built per image in a DataLoader worker."""

    def __init__(self, images: np.ndarray) -> None:
        self.images = images
        flip_crop = [T.RandomHorizontalFlip(), T.RandomCrop(32, padding=4)]
        to_tensor = [T.ToTensor(), T.Normalize(MEAN, STD)]
        self.weak = T.Compose(flip_crop + to_tensor)
        self.strong = T.Compose([PilRandAugmentCutout(3)] + flip_crop + to_tensor)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = Image.fromarray(self.images[i])
        return self.weak(img), self.strong(img)


def bench_pil(images: np.ndarray, batch: int, seconds: float, workers: int) -> float:
    sampler = torch.utils.data.RandomSampler(range(len(images)), replacement=True, num_samples=10**9)
    loader = torch.utils.data.DataLoader(PilPairDataset(images), batch_size=batch, sampler=sampler,
                                         num_workers=workers, persistent_workers=workers > 0,
                                         prefetch_factor=2 if workers > 0 else None)
    it = iter(loader)
    next(it)  # worker start-up and the first batch are not timed
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        weak, strong = next(it)
        done += len(weak)
    rate = done / (time.perf_counter() - start)
    del it, loader
    return rate


# ------------------------------------------------------------------------------------------------ ours, batched
def bench_batched(images: np.ndarray, batch: int, seconds: float, device: torch.device, fused: bool = True) -> float:
    store = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(device)
    g = torch.Generator(device=device).manual_seed(0)
    op_generator = torch.Generator().manual_seed(1)  # RandAugment's op choices are drawn on the host

    def step() -> torch.Tensor:
        x = store[torch.randint(0, len(store), (batch,), generator=g, device=device)]
        views = [weak_augment(x, flip=True, pad=4, generator=g),
                 strong_augment(x, flip=True, pad=4, generator=g, op_generator=op_generator, fused=fused)]
        return normalize(torch.cat(views), MEAN, STD, channels_last=True)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):  # warm-up (allocator, kernels)
        step()
    sync()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        done += batch
    sync()
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch", type=int, default=448, help="unlabeled images per batch (mu*B = 7*64)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per pipeline")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader workers (PIL)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch intra-op threads of the batched pipeline (default: torch's default)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device available")
    if args.batch < 1 or args.seconds <= 0 or args.workers < 0 or args.threads < 1:
        parser.error("--batch must be >= 1, --seconds > 0, --workers >= 0, --threads >= 1")
    torch.set_num_threads(args.threads)

    images = np.random.default_rng(0).integers(0, 256, (NUM_IMAGES, 32, 32, 3), dtype=np.uint8)
    # fused and per op alternate over 3 rounds (a third of --seconds each), so a slow phase of a shared machine hits
    # both: measured one after the other, whichever ran first looked up to 2.5x slower at load 20-30 on 2 cores.
    rates: dict[bool, list[float]] = {True: [], False: []}
    for r in range(3):
        for fused in (True, False) if r % 2 == 0 else (False, True):
            rates[fused].append(bench_batched(images, args.batch, args.seconds / 3, torch.device(args.device), fused))
    ours, per_op = (sum(rates[f]) / 3 for f in (True, False))
    theirs = bench_pil(images, args.batch, args.seconds, args.workers)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"weak + strong views of CIFAR 32x32x3 uint8, batch {args.batch}, {args.seconds:g} s each, "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} cores, load average {load:.1f}")
    print(f"{'pipeline':<46} {'images/s':>10} {'views/s':>10}")
    print(f"{'batched mutexmatch.data.augment on ' + args.device:<46} {ours:>10.0f} {2 * ours:>10.0f}")
    print(f"{'  the same, each RandAugment op on its own':<46} {per_op:>10.0f} {2 * per_op:>10.0f}")
    print(f"{f'per-image PIL, DataLoader({args.workers} workers)':<46} {theirs:>10.0f} {2 * theirs:>10.0f}")
    print(f"ratio batched / per-image PIL: {ours / theirs:.1f}x")
    print(f"ratio fused / each op on its own (issue 45): {ours / per_op:.2f}x")
    if load > (os.cpu_count() or 1):
        print(f"note: busy machine (load {load:.1f} > {os.cpu_count()} cores): figures are lower and noisier than "
              f"idle; with --threads > 1 set OMP_WAIT_POLICY=PASSIVE (see the module docstring)")


if __name__ == "__main__":
    main()
