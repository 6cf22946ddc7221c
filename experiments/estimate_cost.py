"""Cost of the experiment sweeps on this machine, including setups too large for ``--dry-run`` here.

``orchestration.sweep --dry-run`` times real training steps at the YAML's batch (B = 64, mu = 7: 960 images per
step). On a CPU machine with ~20 GB of memory that is impossible for WRN-28-8, or WRN-37-2 at 96 px (tens of GB of
activations). This script makes the same kind of measurement -- a real :class:`mutexmatch.train.Trainer` on the
trial's config, warm-up steps, then timed steps and a timed evaluation slice -- at the full batch where it fits and
at a smaller labeled batch (same mu) where it does not (``--batch-for backbone=B`` or ``backbone@dataset=B``),
scaling the step time by 64 / B. Scaling overestimates: a CPU is less efficient on small batches (WRN-28-2: 3.61 s
at B=8, i.e. 28.9 s scaled, vs 18.7 s measured at B=64 on this machine).

One measurement per (dataset, image size, backbone, batch, mu), taken with the first trial's algorithm: the
algorithms differ only in their loss heads (a linear TNC, a few row-wise losses), which cost little next to the
backbone's forward and backward passes over 960 images. Like ``--dry-run`` it times ``--steps`` steps free-running
(back to back, one device synchronisation at the end, as training runs them); unlike it, it takes the fastest of
three evaluation slices, so that other processes on a shared machine inflate the estimate less. Evaluation is timed per image and scaled to the dataset's test set (EMA and raw model,
as the trainer does), so the data root must hold test sets of the real size (``python -m mutexmatch.fakedata`` can
write them: generated pixels cost the same as real ones).

    python experiments/estimate_cost.py experiments/table1_cifar_svhn.yaml ... --project /tmp/cost \\
        --batch-for wrn28_8=16 --batch-for wrn37_2=4 \\
        --batch-for wrn28_8@miniimagenet=1 --batch-for wrn28_8@tinyimagenet=2

prints every measured setup and, per YAML, the trials and the estimated hours of the full sweep (every grid trial at
its full length; Ray/MLflow overhead not included). These are CPU-hours on *this* machine; GPU-hours need the same
measurement on a GPU (``--device cuda``, or ``--dry-run`` on the GPU machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from orchestration.launch.cost import measure_cost
from orchestration.spec.plan import build_plan
from orchestration.spec.sweepfile import deep_merge, load_spec


def _setup(raw: dict[str, Any]) -> tuple[str, str, str]:
    """(key, backbone, dataset): trials with the same key cost about the same per step (module docstring)."""
    from mutexmatch.config import parse_config

    cfg = parse_config(raw)
    key = json.dumps({"dataset": cfg.data.dataset, "image_size": cfg.data.image_size, "backbone": cfg.model.backbone,
                      "batch": cfg.train.batch_size, "mu": cfg.train.mu}, sort_keys=True)
    return key, cfg.model.backbone, cfg.data.dataset


def _batch_overrides(items: Sequence[str]) -> dict[str, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--batch-for {item!r}: expected BACKBONE=B or BACKBONE@DATASET=B with B >= 1")
        out[key] = int(value)
    return out


def measure(raw: dict[str, Any], *, device: str, threads: int, steps: int) -> tuple[float, float]:
    """(seconds per free-running training step, seconds per evaluation) of the trial config ``raw`` on ``device``."""
    # A smaller evaluation batch bounds memory; the cost per evaluated image barely depends on it.
    eval_batch = min(raw.get("train", {}).get("eval_batch_size", 1024), 128)
    cost = measure_cost(deep_merge(raw, {"train": {"eval_batch_size": eval_batch}}), device=device,
                        num_threads=threads, steps=steps, eval_repeats=3)
    return cost.step_s, cost.eval_s


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="+", type=Path, help="experiment YAMLs")
    p.add_argument("--project", type=Path, default=Path.cwd(), help="folder whose `data` is the data root")
    p.add_argument("--batch-for", action="append", default=[], metavar="BACKBONE[@DATASET]=B",
                   help="measure this backbone (on this dataset) at labeled batch B and scale; default: full batch")
    p.add_argument("--steps", type=int, default=10, help="timed steps per setup (free-running)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, help="JSON file of measured setups: read if present, updated after each "
                   "measurement (lets a long estimate be resumed)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps={args.steps}: must be >= 1")
    try:
        batch_for = _batch_overrides(args.batch_for)
    except ValueError as e:
        p.error(str(e))

    # setup -> (seconds per full-batch step, seconds per evaluation)
    measured: dict[str, tuple[float, float]] = {}
    if args.cache is not None and args.cache.is_file():
        measured = {k: tuple(v) for k, v in json.loads(args.cache.read_text()).items()}  # type: ignore[misc]
    grand = 0.0
    for path in args.specs:
        spec = load_spec(path, args.project)
        plan = build_plan(spec, args.project)
        total = 0.0
        for trial in plan.grid:
            key, backbone, dataset = _setup(trial.config)
            if key not in measured:
                full = trial.config["train"]["batch_size"]
                small = min(full, batch_for.get(f"{backbone}@{dataset}", batch_for.get(backbone, full)))
                step_s, eval_s = measure(deep_merge(trial.config, {"train": {"batch_size": small}}),
                                         device=args.device, threads=args.threads, steps=args.steps)
                measured[key] = (step_s * full / small, eval_s)
                if args.cache is not None:
                    args.cache.write_text(json.dumps(measured, indent=1))
                scaled = f" -> {step_s * full / small:.2f} s/step at B={full} (scaled)" if small < full else ""
                print(f"  {key} [{trial.config['algorithm']['name']}]: {step_s:.2f} s/step at B={small}{scaled}; "
                      f"{eval_s:.1f} s/evaluation", flush=True)
            step_s, eval_s = measured[key]
            total += trial.iterations * step_s + trial.evaluations * eval_s
        grand += total
        print(f"{path.name}: {len(plan.grid)} trials, {total / 3600:,.0f} {args.device.upper()}-hours", flush=True)
    print(f"total: {grand / 3600:,.0f} {args.device.upper()}-hours", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
