"""Images/s of N training processes sharing one device vs one process alone: do fractional GPUs pay?

    python benchmarks/gpu_share.py [--device cuda] [--backbone wrn28_2] [--processes 2] [--steps 30]
                                   [--precision fp32|bf16]

The sweep YAMLs give WRN-28-2 / CNN-13 trials `resources: {gpu: 0.5}`, two trials per GPU, on the guess that one
960-image step leaves the GPU partly idle. This measures it: our training step (``benchmarks/train_step.py``'s
``ours`` pipeline: ``Trainer.train_step`` on synthetic CIFAR-sized images) in one process alone, then in
``--processes`` processes at once. Every process warms up (two steps), waits at a barrier until all are warm, then
times ``--steps`` steps. Printed: images/s alone, images/s of all processes together, and their ratio — well above
1 means sharing pays, about 1 means it only adds memory pressure and per-trial latency.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import add_step_arguments, build_ours, sync, synthetic_cifar  # noqa: E402


def run_child(args) -> None:
    with tempfile.TemporaryDirectory() as root:
        trainer = build_ours(args, synthetic_cifar(4096), root)
        for _ in range(2):
            trainer.train_step()
        sync(args.device)
        barrier = Path(args.barrier)
        (barrier / f"{args.rank}.ready").touch()
        while len(list(barrier.glob("*.ready"))) < args.processes:
            time.sleep(0.01)
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        sync(args.device)
        print(json.dumps({"seconds": time.perf_counter() - start}))


def images_per_s(args, processes: int) -> float:
    per_step = args.batch * (1 + 2 * args.mu)
    with tempfile.TemporaryDirectory() as barrier:
        argv = [f"--{k}={getattr(args, k)}" for k in ("device", "backbone", "batch", "mu", "steps", "precision")]
        procs = [subprocess.Popen([sys.executable, __file__, *argv, f"--processes={processes}",
                                   f"--barrier={barrier}", f"--rank={r}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(processes)]
        outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode:
            sys.exit(f"a training process failed:\n{err[-3000:]}")
    seconds = [json.loads(out.strip().splitlines()[-1])["seconds"] for out, _ in outs]
    # every process did the same work; the slowest one bounds the shared throughput
    return processes * args.steps * per_step / max(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(ap)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--barrier", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.barrier:
        return run_child(args)
    if args.processes < 2:
        sys.exit(f"--processes={args.processes}: must be >= 2 (one process alone is always measured)")
    alone = images_per_s(args, 1)
    shared = images_per_s(args, args.processes)
    print(f"device={args.device} backbone={args.backbone} B={args.batch} mu={args.mu} precision={args.precision}")
    print(f"one process alone:          {alone:10.1f} images/s")
    print(f"{args.processes} processes sharing it: {shared:10.1f} images/s in total")
    print(f"ratio shared / alone: {shared / alone:.2f}x")


if __name__ == "__main__":
    main()
