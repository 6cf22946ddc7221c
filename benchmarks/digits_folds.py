"""Test accuracy of supervised, FixMatch and MutexMatch (paper and official forms) on `digits` over five folds.

    python benchmarks/digits_folds.py [--iterations 1000] [--folds 0 1 2 3 4] [--out outputs/digits_folds]

Runs the trainer directly (no Ray, no MLflow) from experiments/runs/digits.yaml and prints, per method, the EMA
test accuracy at the end of training and the best over evaluations, mean ± std over folds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from mutexmatch.config import load_config
from mutexmatch.training import RunFolder, Trainer

METHODS = {
    "supervised": ["algorithm.name=supervised"],
    "fixmatch": ["algorithm.name=fixmatch"],
    "mutexmatch (paper)": ["algorithm.name=mutexmatch", "algorithm.form=paper"],
    "mutexmatch (official)": ["algorithm.name=mutexmatch", "algorithm.form=official"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="experiments/runs/digits.yaml")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", default="outputs/digits_folds")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {}
    for method in args.methods:
        for fold in args.folds:
            out = Path(args.out) / method.replace(" ", "_").replace("(", "").replace(")", "") / f"fold{fold}"
            sets = METHODS[method] + [f"data.fold={fold}", f"output_dir={out}", "train.progress=false"]
            if args.iterations:
                sets.append(f"train.iterations={args.iterations}")
            cfg = load_config(args.config, sets + args.overrides)
            resume = "auto" if RunFolder(out).is_run() else False
            summary = Trainer(cfg, resume=resume).fit()
            m = summary.metrics
            results.setdefault(method, []).append((m["test/acc"], m["test/best_acc"]))
            print(json.dumps({"method": method, "fold": fold, "final": m["test/acc"], "best": m["test/best_acc"]}),
                  flush=True)
    print(f"\n| method | final acc (%) | best acc (%) | folds |\n| --- | --- | --- | --- |")
    for method, vals in results.items():
        fin = [100 * v[0] for v in vals]
        best = [100 * v[1] for v in vals]
        sd = (lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0)
        print(f"| {method} | {statistics.mean(fin):.2f} ± {sd(fin):.2f} | {statistics.mean(best):.2f} ± "
              f"{sd(best):.2f} | {len(vals)} |")


if __name__ == "__main__":
    main()
