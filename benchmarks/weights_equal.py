"""Does a refactor leave training bit-identical? Trains the quickstart's fold-0 runs of FixMatch and MutexMatch with
this tree and with a git revision, then compares every tensor of the final weights (model and EMA) with
``torch.equal``.

    python benchmarks/weights_equal.py --ref d7546ce^ [--steps 1000] [--algorithms fixmatch,mutexmatch | --zoo]
                                       [--out benchmarks/results/weights_equal.json]

Each run is ``python -m mutexmatch.train`` (the public CLI of each tree, started with ``PYTHONPATH`` at that tree)
with the settings of ``experiments/quickstart.yaml``'s base and fold 0, on one thread, so both trees see the same
command; the revision is checked out with ``git worktree add`` into a temporary folder and removed afterwards. The
default ``--ref`` is the commit before ``mutexmatch/algorithms.py`` became a package (issue 22). Prints one line per
algorithm ("equal" or the first differing tensor) and writes the result with :func:`record.header`; exits 1 when
any differs. ``--zoo`` compares every method row of ``experiments/zoo_digits.yaml`` (its algorithm settings, on the
same quickstart base the zoo uses) instead of the two default algorithms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import header, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mutexmatch.training import FINAL_WEIGHTS  # noqa: E402

# experiments/quickstart.yaml's base (its method axis gives the algorithm; MutexMatch in the paper's form), fold 0.
QUICKSTART_FOLD0 = ["data.dataset=digits", "data.num_labels=20", "data.split_rule=official", "data.fold=0",
                    "model.backbone=small_cnn", "optim.lr=0.05", "train.eval_interval=100", "train.batch_size=16",
                    "train.mu=4", "train.ema=0.99", "train.eval_batch_size=512", "train.num_threads=1",
                    "train.progress=false"]
ALGORITHMS = {"fixmatch": ["algorithm.name=fixmatch"],
              "mutexmatch": ["algorithm.name=mutexmatch", "algorithm.form=paper"]}


ZOO = ROOT / "experiments" / "zoo_digits.yaml"


def zoo_algorithms() -> dict[str, list[str]]:
    """Every method row of the zoo YAML as ``--set`` items: ``{"dash": ["algorithm.name=dash", ...]}``."""
    from mutexmatch.yamlfile import read_yaml_mapping

    methods = read_yaml_mapping(ZOO, "zoo YAML")["axes"]["method"]
    return {m: [f"algorithm.{k}={v}" for k, v in row["algorithm"].items()] for m, row in methods.items()}


def _train(tree: Path, settings: list[str], steps: int, out: Path, data: Path) -> Path:
    cmd = [sys.executable, "-m", "mutexmatch.train", *[a for s in [*QUICKSTART_FOLD0, *settings,
           f"train.iterations={steps}", f"data.root={data}", f"output_dir={out}"] for a in ("--set", s)]]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    return out / FINAL_WEIGHTS


def _first_difference(a, b, path: str = "") -> str | None:
    """The path of the first tensor (or value) that differs between two loaded weight files, None when all equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path or '/'}: keys {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := _first_difference(a[k], b[k], f"{path}/{k}"))), None)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return None if a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) else path
    return None if a == b else path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref", default="d7546ce^", help="git revision to compare with (default: before issue 22)")
    p.add_argument("--steps", type=int, default=1000, help="training steps (quickstart: 1000)")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--zoo", action="store_true", help=f"every method of {ZOO.name} (replaces --algorithms)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    known = {**ALGORITHMS, **zoo_algorithms()}
    names = list(zoo_algorithms()) if args.zoo else args.algorithms.split(",")
    if unknown := [n for n in names if n not in known]:
        p.error(f"--algorithms: unknown {unknown}; known: {', '.join(known)}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref_tree = tmp / "ref"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(ref_tree), args.ref], cwd=ROOT, check=True)
        try:
            for name in names:
                new = _train(ROOT, known[name], args.steps, tmp / f"new-{name}", tmp / "data")
                old = _train(ref_tree, known[name], args.steps, tmp / f"old-{name}", tmp / "data")
                diff = _first_difference(torch.load(new, weights_only=True), torch.load(old, weights_only=True))
                rows[name] = "equal" if diff is None else f"differs at {diff}"
                print(f"{name}: {args.steps} steps, final weights vs {args.ref}: {rows[name]}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=ROOT, check=False)
    result = {**header("cpu"), "ref": args.ref, "steps": args.steps, "results": rows}
    write(args.out, "weights_equal", result)
    return 0 if all(v == "equal" for v in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
