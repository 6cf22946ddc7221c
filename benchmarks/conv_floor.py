"""How much of a training step is convolution alone: the floor under any faithful step on this machine.

    python benchmarks/conv_floor.py [--device cpu|cuda] [--backbone wrn28_2] [--batch 64] [--mu 7] [--image-size 32]
                                    [--repeats 3]

A MutexMatch step runs every image of [labeled | weak | strong] (B·(1 + 2μ) = 960 at B = 64, μ = 7) forward and
backward through the backbone. The weak rows cannot be skipped in the backward pass: BatchNorm normalises over the
whole batch, so they receive gradient through the batch statistics. This script records every Conv2d that a forward
pass of that batch meets (the input shape, weight shape, stride and padding). It then times each distinct
convolution alone, forward plus backward (input and weight gradients, except for a first layer, which needs no input
gradient), in channels-last and in NCHW. It prints per-shape times, GFLOP/s, and the sum over the whole network for
the faster layout of each shape: the step time that convolutions alone cost, whatever else a pipeline does. Compare
it with ``benchmarks/train_step.py``'s step times from the same machine.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import torch
import torch.nn.functional as F

from mutexmatch.training import keep_freed_memory
from mutexmatch.models import build_model


def conv_calls(backbone: str, batch: int, image_size: int) -> Counter:
    """(input shape, weight shape, stride, padding) -> number of times one forward pass meets that convolution."""
    model = build_model(backbone, num_classes=10)
    calls: Counter = Counter()

    def hook(mod: torch.nn.Conv2d, inputs: tuple) -> None:
        calls[(tuple(inputs[0].shape), tuple(mod.weight.shape), mod.stride, mod.padding)] += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_pre_hook(hook)
    with torch.no_grad():
        model(torch.zeros(2, 3, image_size, image_size))
    # the hook saw a batch of 2; the step's batch is `batch`
    return Counter({((batch, *x[1:]), w, s, p): n for (x, w, s, p), n in calls.items()})


def time_conv(x_shape, w_shape, stride, padding, fmt, device, repeats) -> float:
    x = torch.randn(x_shape, device=device).contiguous(memory_format=fmt)
    w = torch.randn(w_shape, device=device).contiguous(memory_format=fmt).requires_grad_()
    first_layer = x_shape[1] == 3  # the images need no gradient
    x.requires_grad_(not first_layer)
    best = float("inf")
    for i in range(repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = F.conv2d(x, w, stride=stride, padding=padding)
        y.backward(torch.ones_like(y))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:  # the first call pays one-off set-up
            best = min(best, time.perf_counter() - t0)
        x.grad = w.grad = None
    return best


def gflop(x_shape, w_shape, stride, padding) -> float:
    """Forward + backward multiply-adds ×2: forward, weight gradient, and input gradient unless a first layer."""
    n, _, h, wd = x_shape
    cout, cin, kh, kw = w_shape
    ho = (h + 2 * padding[0] - kh) // stride[0] + 1
    wo = (wd + 2 * padding[1] - kw) // stride[1] + 1
    one = 2 * n * cout * ho * wo * cin * kh * kw
    return one * (2 if cin == 3 else 3) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backbone", default="wrn28_2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per shape (the fastest is kept)")
    args = ap.parse_args()
    if args.device == "cpu":
        keep_freed_memory()  # as the trainer does on CPU: no page faults for the ~100 MB activation blocks
    images = args.batch * (1 + 2 * args.mu)
    calls = conv_calls(args.backbone, images, args.image_size)
    print(f"device={args.device} backbone={args.backbone} images per step={images} threads={torch.get_num_threads()}")
    print("\n| input | weight | stride | count | channels-last s | NCHW s | GFLOP/s (faster) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    total = total_gflop = 0.0
    for (x, w, s, p), n in calls.items():
        cl = time_conv(x, w, s, p, torch.channels_last, args.device, args.repeats)
        nchw = time_conv(x, w, s, p, torch.contiguous_format, args.device, args.repeats)
        best = min(cl, nchw)
        total += n * best
        total_gflop += n * gflop(x, w, s, p)
        print(f"| {list(x)} | {list(w)} | {s[0]} | {n} | {cl:.3f} | {nchw:.3f} | {gflop(x, w, s, p) / best:.0f} |",
              flush=True)
    print(f"\nconvolutions of one step, forward + backward, faster layout per shape: {total:.2f} s "
          f"({total_gflop:.0f} GFLOP, {total_gflop / total:.0f} GFLOP/s)")


if __name__ == "__main__":
    main()
