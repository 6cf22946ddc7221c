"""Does the fast path keep fp32's accuracy on real photos? FixMatch and MutexMatch on CIFAR-10 (an image folder),
250 labels, WRN-28-2, fp32 vs the fast path, two seeds: every run at once on one device, then a table.

    python benchmarks/fidelity.py --data DIR [--device cuda] [--steps 3000] [--seeds 0,1]
                                  [--fast train.precision=bf16,train.compile=true] [--backbone wrn28_2]
                                  [--batch 64] [--mu 7] [--out benchmarks/results/NAME.json]

``DIR`` holds ``train/<class>/*.jpg`` and ``test/<class>/*.jpg`` (``tar xzf .data/cifar10-jpeg.tar.gz -C DIR``,
the CIFAR-10 JPEG archive copied as benchmarks/README.md says). Each run is ``python -m mutexmatch.train`` on
fold 0 with ``train.seed`` = the seed (model, sampling, augmentation), the paper's optimiser and a cosine schedule over ``--steps``; the runs differ only in the
algorithm, the seed and, for the fast path, the ``--fast`` settings. Printed: the final and best test accuracy of
the EMA model per run, and per algorithm the fast path's mean minus fp32's against the spread between seeds (the
fast path is "within seed noise" when |mean difference| <= the largest fp32 seed-to-seed difference). Written
to ``--out`` (default ``benchmarks/results/fidelity_<device>_cifar10_250.json``) with :func:`record.header`.
A few thousand steps are far from the paper's 2^20: this compares the two paths, it reproduces no number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import header, write  # noqa: E402

ALGORITHMS = {"fixmatch": ["algorithm.name=fixmatch", "algorithm.tau=0.95"],
              "mutexmatch": ["algorithm.name=mutexmatch", "algorithm.form=official", "algorithm.tau=0.95",
                             "algorithm.k=0.6C"]}


def _command(args, root: Path, algorithm: str, seed: int, fast: bool) -> list[str]:
    settings = [f"data.root={args.data}", "data.dataset=imagefolder", "data.num_labels=250", "data.fold=0",
                "data.split_rule=official", f"model.backbone={args.backbone}", "optim.lr=0.03",
                "optim.schedule=cosine", f"train.iterations={args.steps}",
                f"train.eval_interval={max(1, args.steps // 4)}", f"train.batch_size={args.batch}",
                f"train.mu={args.mu}", f"train.device={args.device}", f"train.seed={seed}", "train.progress=false",
                f"output_dir={root / _name(algorithm, seed, fast)}", *ALGORITHMS[algorithm]]
    if fast:
        settings += [s for s in args.fast.split(",") if s]
    cmd = [sys.executable, "-m", "mutexmatch.train", "--yes"]
    for s in settings:
        cmd += ["--set", s]
    return cmd


def _name(algorithm: str, seed: int, fast: bool) -> str:
    return f"{algorithm}_seed{seed}_{'fast' if fast else 'fp32'}"


def _accuracies(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    accs = [r["test/acc"] for r in rows if "test/acc" in r]
    return {"final": accs[-1], "best": max(accs), "evaluations": len(accs)}


def run_all(args, root: Path) -> dict[str, dict]:
    """Every (algorithm, seed, path) run at once; their accuracies by run name."""
    runs = {_name(a, s, f): _command(args, root, a, s, f) for a in ALGORITHMS for s in args.seeds for f in (False, True)}
    procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, cmd in runs.items()}
    failed = {}
    for name, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode:
            failed[name] = out[-2000:]
    if failed:
        sys.exit("failed runs:\n" + "\n".join(f"--- {n}\n{o}" for n, o in failed.items()))
    return {name: {**_accuracies(root / name), "command": " ".join(runs[name][1:])} for name in runs}


def compare(results: dict[str, dict], seeds: list[int]) -> dict[str, dict]:
    """Per algorithm: fp32 and fast-path final accuracies by seed, the mean difference and the seed spread."""
    out = {}
    for a in ALGORITHMS:
        fp32 = [results[_name(a, s, False)]["final"] for s in seeds]
        fast = [results[_name(a, s, True)]["final"] for s in seeds]
        diff = statistics.fmean(fast) - statistics.fmean(fp32)
        noise = max(fp32) - min(fp32)
        out[a] = {"fp32": fp32, "fast": fast, "mean_difference": diff, "fp32_seed_spread": noise,
                  "within_seed_noise": abs(diff) <= noise}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="image folder with train/ and test/")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--fast", default="train.precision=bf16,train.compile=true",
                    help="comma-separated --set items of the fast path")
    ap.add_argument("--backbone", default="wrn28_2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    if not (args.data / "train").is_dir() or not (args.data / "test").is_dir():
        ap.error(f"--data {args.data}: no train/ and test/ class folders there; unpack the CIFAR-10 JPEG archive "
                 "into it (tar xzf cifar10-jpeg.tar.gz -C DIR)")
    with tempfile.TemporaryDirectory(prefix="mm_fidelity_") as tmp:
        results = run_all(args, Path(tmp))
    table = compare(results, args.seeds)
    print(f"| algorithm | fp32 final acc % by seed | fast path ({args.fast}) | fast - fp32 (mean) | fp32 seed spread |"
          "\n| --- | --- | --- | ---: | ---: |")
    for a, row in table.items():
        print(f"| {a} | {', '.join(f'{100 * v:.2f}' for v in row['fp32'])} | "
              f"{', '.join(f'{100 * v:.2f}' for v in row['fast'])} | {100 * row['mean_difference']:+.2f} | "
              f"{100 * row['fp32_seed_spread']:.2f} |")
    verdict = all(row["within_seed_noise"] for row in table.values())
    print(f"fast path within seed noise of fp32 for every algorithm: {'yes' if verdict else 'no'} "
          f"({args.steps} steps, seeds {args.seeds})")
    settings = {k: getattr(args, k) for k in ("steps", "seeds", "fast", "backbone", "batch", "mu")}
    write(args.out, f"fidelity_{args.device.split(':')[0]}_cifar10_250",
          {**header(args.device), "settings": settings, "runs": results, "comparison": table,
           "within_seed_noise": verdict})


if __name__ == "__main__":
    main()
