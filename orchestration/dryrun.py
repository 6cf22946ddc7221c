"""``--dry-run``: the trial plan, what is skipped as already finished, and a cost estimate measured on this
machine. It never creates an MLflow store just to look at it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestration import tracking
from orchestration.launch import SweepOptions, SweepOutcome, select
from orchestration.plan import SweepPlan, format_plan

__all__ = ["dry_run"]


def dry_run(plan: SweepPlan, opts: SweepOptions, uri: str, storage: str, exp_name: str) -> SweepOutcome:
    import torch

    from orchestration.cost import estimate_plan

    skipped: set[str] = set()
    db = Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None
    if not opts.force and (db is None or db.exists()):  # never create a store just to look at it
        try:
            client = tracking.MlflowClient(uri)
            exp = client.get_experiment_by_name(exp_name)
            if exp is not None:
                grid, phases, _ = select(plan, client, exp.experiment_id, opts.force)
                skipped = {t.key for t in plan.grid if t.key not in grid}
                skipped |= {f"search:{s.key}" for s in plan.searches if s.phase not in phases}
        except Exception as e:  # noqa: BLE001 - the plan is still worth printing
            print(f"[dry-run] could not read MLflow at {uri}: {e}")
    res = plan.spec.resources
    device = "cuda" if res.gpu > 0 and torch.cuda.is_available() else "cpu"
    threads = max(1, round(res.cpu))
    per_trial, costs, problems = estimate_plan(plan, device=device, num_threads=threads, skip=skipped)
    print(f"Sweep {plan.spec.name!r} (spec hash {plan.spec_hash}): {len(plan.grid)} grid trials, "
          f"{len(plan.searches)} search studies ({sum(s.n_trials for s in plan.searches)} trials)"
          + (" [smoke]" if plan.smoke else ""))
    print(f"tracking URI: {uri}\nstorage: {storage}\n")
    print(format_plan(plan, per_trial, skipped))
    for p in problems:
        print(f"warning: {p}")
    total = sum(v for k, v in per_trial.items() if not k.startswith("search:"))
    total += sum(per_trial.get(f"search:{s.key}", 0.0) * s.n_trials for s in plan.searches)
    unit = "GPU" if device == "cuda" else "CPU"
    slots = max(1, int((os.cpu_count() or 1) // res.cpu)) if device == "cpu" else max(
        1, int(torch.cuda.device_count() / res.gpu))
    if opts.max_concurrent:
        slots = min(slots, opts.max_concurrent)
    print()
    for ck, c in costs.items():
        k = json.loads(ck)
        print(f"measured on {c.device} ({threads} thread(s)): {k['backbone']} {k['dataset']} {k['alg']} "
              f"B={k['b']} mu={k['mu']}{' +val split' if k['val'] else ''}: {c.step_s * 1000:.1f} ms/step, "
              f"{c.eval_s:.2f} s/evaluation")
    print(f"estimated cost: {total / 3600:.3f} {unit}-hours ({total:.0f} s of trial time; search trials counted at "
          f"full length, ASHA stops some early; Ray/MLflow overhead not included); "
          f"≈ {total / slots / 60:.1f} min wall time at {slots} concurrent trial(s) on this machine")
    return SweepOutcome(status="dry-run", skipped=sorted(skipped))
