"""Images/s of our full MutexMatch training step vs a step in the released code's style, same run.

    python benchmarks/train_step.py [--device cpu|cuda] [--backbone wrn28_2] [--batch 64] [--mu 7] [--steps 3]
                                    [--rounds 2] [--workers 0] [--precision fp32|bf16]
                                    [--allocator default|retain|both] [--pipelines reference,ours,ours_compile]

Ours: `mutexmatch.train.Trainer.train_step` — uint8 images on the device, batched weak+strong augmentation there,
channels-last model, one forward over [labeled | weak | strong]; measured eager and with ``train.compile`` (torch.compile
of the model, which fuses BatchNorm + LeakyReLU). Reference (the released code's design): per-image PIL
RandAugment+Cutout and flip/crop in a `torch.utils.data.DataLoader`, an NCHW fp32 eager model, the same backbone,
loss (MutexMatch, official form), batch and optimiser. All run on CIFAR-sized synthetic uint8 images (speed does not
depend on pixel values). Each pipeline runs in its own fresh process (so compile caches, allocator state and thread
pools do not leak between them), warmed up by two steps and timed over ``--steps`` steps; ``--rounds`` rounds run
every pipeline once each, interleaved, and each figure is the median over all timed steps.

``--allocator``: glibc's default returns every large block (each activation tensor of a 960-image batch is ~100 MB)
to the kernel and page-faults it back on the next step; ``retain`` sets ``MALLOC_MMAP_MAX_=0`` and a huge
``MALLOC_TRIM_THRESHOLD_`` in the child's environment so freed blocks are reused. ``both`` (default on CPU) measures
every pipeline under both settings, and every ratio is printed against the reference under the *same* setting as
well as against the reference as the released code runs it (default allocator).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from augment import PilPairDataset  # noqa: E402  (the per-image PIL baseline of benchmarks/augment.py)

from mutexmatch.algorithms import ALGORITHMS, StepInputs  # noqa: E402
from mutexmatch.config import parse_config  # noqa: E402
from mutexmatch.datasets import DATASETS, DatasetBundle, ImageData  # noqa: E402
from mutexmatch.models import build_model  # noqa: E402
from mutexmatch.train import Trainer, _param_groups  # noqa: E402

RETAIN_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
PIPELINES = {
    "reference": "reference (PIL per image in DataLoader, NCHW fp32, eager)",
    "ours": "ours (batched on-device augmentation, channels-last, eager)",
    "ours_compile": "ours + train.compile (torch.compile of the model)",
}


def synthetic_cifar(n: int, seed: int = 0) -> DatasetBundle:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.arange(n) % 10
    return DatasetBundle(info=DATASETS["cifar10"], train=ImageData(x, y), test=ImageData(x[:256], y[:256]),
                         extra_unlabeled=None, predefined_folds=None)


def timed(step, args) -> list[float]:
    for _ in range(2):
        step()
    sync(args.device)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync(args.device)
        times.append(time.perf_counter() - start)
    return times


def time_ours(args, bundle: DatasetBundle, root: str, compile_model: bool) -> list[float]:
    cfg = parse_config({
        "data": {"dataset": "cifar10", "root": root, "num_labels": 250},
        "model": {"backbone": args.backbone},
        "algorithm": {"name": "mutexmatch", "form": "official"},
        "train": {"batch_size": args.batch, "mu": args.mu, "device": args.device, "precision": args.precision,
                  "progress": False, "iterations": 1000, "compile": compile_model},
        "output_dir": str(Path(root) / "ours"),
    })
    trainer = Trainer(cfg, bundle=bundle)
    return timed(trainer.train_step, args)


def time_reference(args, bundle: DatasetBundle) -> list[float]:
    device = torch.device(args.device)
    images = bundle.train.x.permute(0, 2, 3, 1).numpy()
    labels = bundle.train.y
    model = build_model(args.backbone, num_classes=10).to(device)  # NCHW, fp32
    opt = torch.optim.SGD(_param_groups(model, 5e-4), lr=0.03, momentum=0.9, nesterov=True)
    alg = ALGORITHMS["mutexmatch"]({"form": "official", "k": 10}, 10)
    sampler = lambda n: torch.utils.data.RandomSampler(range(len(images)), replacement=True, num_samples=10**9)  # noqa
    lb_loader = torch.utils.data.DataLoader(PilPairDataset(images), batch_size=args.batch, sampler=sampler(0),
                                            num_workers=args.workers)
    ulb_loader = torch.utils.data.DataLoader(PilPairDataset(images), batch_size=args.batch * args.mu,
                                             sampler=sampler(0), num_workers=args.workers)
    lb_it, ulb_it = iter(lb_loader), iter(ulb_loader)

    def step() -> None:
        x_lb, _ = next(lb_it)
        x_w, x_s = next(ulb_it)
        x = torch.cat([x_lb, x_w, x_s]).to(device)
        y = labels[: args.batch].to(device)
        model.train()
        feats = model(x)
        out = alg.compute(model, StepInputs(feats=feats, num_lb=args.batch, num_ulb=args.batch * args.mu,
                                            targets_lb=y, ulb_idx=torch.arange(args.batch * args.mu), step=0))
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()

    return timed(step, args)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_child(args) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    bundle = synthetic_cifar(args.images)
    with tempfile.TemporaryDirectory() as root:
        if args.child == "reference":
            times = time_reference(args, bundle)
        else:
            times = time_ours(args, bundle, root, compile_model=args.child == "ours_compile")
    print(json.dumps({"step_s": times, "threads": torch.get_num_threads()}))


def measure(pipeline: str, allocator: str, argv: list[str]) -> list[float]:
    env = dict(os.environ, **(RETAIN_ENV if allocator == "retain" else {}))
    if allocator == "default":
        for key in RETAIN_ENV:
            env.pop(key, None)
    proc = subprocess.run([sys.executable, __file__, *argv, "--child", pipeline], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        sys.exit(f"{pipeline} ({allocator} allocator) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["step_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backbone", default="wrn28_2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per process (after two warm-up steps)")
    ap.add_argument("--rounds", type=int, default=2, help="each pipeline runs once per round, rounds interleaved, "
                    "so slow phases of a shared machine hit every pipeline alike")
    ap.add_argument("--workers", type=int, default=0, help="reference DataLoader workers (the notes: 0 is fastest "
                    "on 2 cores)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--allocator", choices=["default", "retain", "both"], default=None,
                    help="glibc allocator setting of the child processes (default: both on CPU, default on CUDA)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES), help=f"comma-separated subset of {list(PIPELINES)}")
    ap.add_argument("--child", choices=list(PIPELINES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args)
    pipelines = args.pipelines.split(",")
    for name in pipelines:
        if name not in PIPELINES:
            sys.exit(f"--pipelines: {name!r} is not one of {list(PIPELINES)}")
    if "reference" not in pipelines:
        pipelines.insert(0, "reference")
    allocators = {"both": ["default", "retain"], None: ["default", "retain"] if args.device == "cpu"
                  else ["default"]}.get(args.allocator, [args.allocator])
    child_argv = [f"--{k}={getattr(args, k)}" for k in ("device", "backbone", "batch", "mu", "steps", "workers",
                                                          "precision", "images")]
    per_step = args.batch * (1 + 2 * args.mu)
    print(f"device={args.device} backbone={args.backbone} B={args.batch} mu={args.mu} steps={args.steps} "
          f"precision={args.precision} torch_threads={torch.get_num_threads()} load={os.getloadavg()[0]:.2f}")
    steps: dict[tuple[str, str], list[float]] = {(n, a): [] for a in allocators for n in pipelines}
    for r in range(args.rounds):
        for allocator in allocators:
            for name in pipelines:
                times = measure(name, allocator, child_argv)
                steps[name, allocator] += times
                print(f"  round {r + 1}: {name} ({allocator} allocator): "
                      f"{', '.join(f'{t:.2f}' for t in times)} s/step", flush=True)
    # The median over every timed step of every round: robust to a burst of other load on a shared machine.
    results = {key: statistics.median(times) for key, times in steps.items()}
    ref_released = results["reference", "default"] if "default" in allocators else None
    print("\n| pipeline | allocator | median s/step (min-max) | images/s | vs reference, same allocator | "
          "vs reference as released |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (name, allocator), sec in results.items():
        same = results["reference", allocator] / sec
        released = f"{ref_released / sec:.2f}x" if ref_released else "n/a"
        lo, hi = min(steps[name, allocator]), max(steps[name, allocator])
        print(f"| {PIPELINES[name]} | {allocator} | {sec:.3f} ({lo:.2f}-{hi:.2f}) | {per_step / sec:.1f} | "
              f"{same:.2f}x | {released} |")
    best = min((sec, name, alloc) for (name, alloc), sec in results.items() if name != "reference")
    print(f"speed-up of our fastest step ({best[1]}, {best[2]} allocator) vs the reference as released: "
          f"{(ref_released or results['reference', best[2]]) / best[0]:.2f}x; vs the reference with the same "
          f"allocator: {results['reference', best[2]] / best[0]:.2f}x")


if __name__ == "__main__":
    main()
