"""Images/s of our full MutexMatch training step vs a step in the released code's style, same run.

    python benchmarks/train_step.py [--device cpu|cuda] [--backbone wrn28_2] [--batch 64] [--mu 7] [--steps 3]
                                    [--workers 0] [--precision fp32|bf16]

Ours: `mutexmatch.train.Trainer.train_step` — uint8 images on the device, batched weak+strong augmentation there,
channels-last model, one forward over [labeled | weak | strong]. Reference (the released code's design): per-image
PIL RandAugment+Cutout and flip/crop in a `torch.utils.data.DataLoader`, an NCHW fp32 model, the same backbone, loss
(MutexMatch, official form), batch and optimiser. Both run on CIFAR-sized synthetic uint8 images (speed does not
depend on pixel values). Each side is warmed up by one step, then timed over `--steps` steps; the ratio is printed.
"""

from __future__ import annotations

import argparse
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


def synthetic_cifar(n: int, seed: int = 0) -> DatasetBundle:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.arange(n) % 10
    return DatasetBundle(info=DATASETS["cifar10"], train=ImageData(x, y), test=ImageData(x[:256], y[:256]),
                         extra_unlabeled=None, predefined_folds=None)


def time_ours(args, bundle: DatasetBundle, root: str) -> float:
    cfg = parse_config({
        "data": {"dataset": "cifar10", "root": root, "num_labels": 250},
        "model": {"backbone": args.backbone},
        "algorithm": {"name": "mutexmatch", "form": "official"},
        "train": {"batch_size": args.batch, "mu": args.mu, "device": args.device, "precision": args.precision,
                  "progress": False, "iterations": 1000},
        "output_dir": str(Path(root) / "ours"),
    })
    trainer = Trainer(cfg, bundle=bundle)
    trainer.train_step()
    sync(args.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        trainer.train_step()
    sync(args.device)
    return (time.perf_counter() - start) / args.steps


def time_reference(args, bundle: DatasetBundle) -> float:
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

    step()
    sync(args.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(args.device)
    return (time.perf_counter() - start) / args.steps


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backbone", default="wrn28_2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="reference DataLoader workers (the notes: 0 is fastest "
                    "on 2 cores)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--images", type=int, default=4096)
    args = ap.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)
    bundle = synthetic_cifar(args.images)
    per_step = args.batch * (1 + 2 * args.mu)
    with tempfile.TemporaryDirectory() as root:
        ours = time_ours(args, bundle, root)
    ref = time_reference(args, bundle)
    print(f"device={args.device} backbone={args.backbone} B={args.batch} mu={args.mu} steps={args.steps} "
          f"torch_threads={torch.get_num_threads()}")
    print("| pipeline | s/step | images/s |\n| --- | --- | --- |")
    print(f"| reference (PIL per image in DataLoader, NCHW fp32) | {ref:.3f} | {per_step / ref:.1f} |")
    print(f"| ours (batched on-device augmentation, channels-last, {args.precision}) | {ours:.3f} | "
          f"{per_step / ours:.1f} |")
    print(f"speed-up: {ref / ours:.2f}x")


if __name__ == "__main__":
    main()
