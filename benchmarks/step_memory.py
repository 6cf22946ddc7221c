"""Peak device memory of one full training step per (backbone, image size) setup of the experiment YAMLs.

    python benchmarks/step_memory.py [--device cuda] [--batch 64] [--mu 7] [--precision fp32,bf16]
                                     [--setups wrn28_2@32,wrn28_8@80,...]

Answers "does this paper setting fit on my GPU?" before a sweep is launched: each setup runs in its own fresh
process (so an out-of-memory error or allocator fragmentation does not leak into the next), builds our
:class:`mutexmatch.train.Trainer` on synthetic uint8 images of the setup's size (memory does not depend on pixel
values), runs two training steps and one evaluation batch, and prints

* the bytes of the tensors autograd saves for the backward pass of one step (counted with
  ``torch.autograd.graph.saved_tensors_hooks``, each storage once) — the activations, which dominate. The count
  is linear in the batch (up to the saved weights, a small constant) and nearly the same on any device (CUDA
  autocast keeps BatchNorm in fp32, so its bf16 count is somewhat higher), so on a machine too small for the full
  batch, run a small ``--batch`` and add ``--scale-to 64``;
* on CUDA, PyTorch's peak allocated and reserved memory, or ``OOM`` with the device's capacity.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import build_ours, synthetic_cifar  # noqa: E402  (the `ours` step of benchmarks/train_step.py)

# backbone@image size for every setup of experiments/*.yaml (CIFAR/SVHN 32, STL-10 96, mini-ImageNet 80, Tiny 64)
SETUPS = ["wrn28_2@32", "cnn13@32", "wrn28_8@32", "resnet18@96", "wrn37_2@96", "resnet18@80", "wrn28_8@80",
          "resnet18@64", "wrn28_8@64"]
GB = 2 ** 30


def run_child(args) -> None:
    backbone, size = args.child.split("@")
    step_args = argparse.Namespace(backbone=backbone, batch=args.batch, mu=args.mu, device=args.device,
                                   precision=args.precision)
    result = {"setup": args.child, "precision": args.precision}
    with tempfile.TemporaryDirectory() as root:
        try:
            # 100 classes: the classifier heads are a negligible share of the memory
            trainer = build_ours(step_args, synthetic_cifar(4000, size=int(size), num_classes=100), root)
            trainer.train_step()
            storages: dict[int, int] = {}

            def pack(t: torch.Tensor) -> torch.Tensor:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                trainer.train_step()
            result["saved_gb"] = sum(storages.values()) / GB
            trainer.time_evaluation()  # the EMA model over the whole test set, as an evaluation scores it
            if trainer.device.type == "cuda":
                torch.cuda.synchronize()
                result.update(allocated_gb=torch.cuda.max_memory_allocated() / GB,
                              reserved_gb=torch.cuda.max_memory_reserved() / GB)
        except torch.OutOfMemoryError:
            result.update(oom=True, capacity_gb=torch.cuda.get_device_properties(0).total_memory / GB)
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16, fp16")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated backbone@image_size")
    ap.add_argument("--scale-to", type=int, help="also print the saved activations scaled to this labeled batch")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args)
    setups = args.setups.split(",")
    for s in setups:
        backbone, _, size = s.partition("@")
        if not size.isdigit():
            sys.exit(f"--setups: {s!r} is not backbone@image_size (e.g. wrn28_8@80)")
    print(f"device={args.device} B={args.batch} mu={args.mu} ({args.batch * (1 + 2 * args.mu)} images per step)")
    scaled = f" saved activations GB at B={args.scale_to} (scaled) |" if args.scale_to else ""
    print(f"\n| setup | precision | saved activations GB |{scaled} peak allocated GB | peak reserved GB |")
    print("| --- | --- | ---: |" + (" ---: |" if args.scale_to else "") + " ---: | ---: |")
    for setup in setups:
        for precision in args.precision.split(","):
            proc = subprocess.run([sys.executable, __file__, f"--device={args.device}", f"--batch={args.batch}",
                                   f"--mu={args.mu}", f"--precision={precision}", f"--child={setup}"],
                                  capture_output=True, text=True)
            if proc.returncode:
                print(f"| {setup} | {precision} | failed: {proc.stderr.strip().splitlines()[-1][:120]} | |",
                      flush=True)
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            if r.get("oom"):
                cells = f"OOM (> {r['capacity_gb']:.0f} GB on this device) |" + (" |" if args.scale_to else "")
                cells += " | |"
            else:
                cells = f"{r['saved_gb']:.2f} |"
                if args.scale_to:
                    cells += f" {r['saved_gb'] * args.scale_to / args.batch:.1f} |"
                cells += (f" {r['allocated_gb']:.1f} | {r['reserved_gb']:.1f} |" if "allocated_gb" in r
                          else " (CPU) | (CPU) |")
            print(f"| {setup} | {precision} | {cells}", flush=True)


if __name__ == "__main__":
    main()
