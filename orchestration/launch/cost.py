"""Cost estimate for ``--dry-run``: a few real training steps and a timed evaluation slice per distinct setup.

Trials that differ only in fold, seed or loss weights cost the same per step, so one measurement is made per
distinct (dataset, image size, backbone, batch size, μ, algorithm, imbalance algorithm and its parameters,
precision, memory format, validation split, evaluation batch): a :class:`mutexmatch.train.Trainer` is built on the
device the trials will use, ``warmup`` steps are run and ``steps`` more are timed; one evaluation is timed on a
slice of the test set and scaled to the whole evaluation (EMA and raw model on the test set, EMA model on the
validation split). A trial then costs ``iterations × step_s + evaluations × eval_s``; Ray and MLflow start-up is not
in it, but said apart (:data:`STARTUP_S`; per trial: ``benchmarks/orchestration_overhead.py``). A trial of
``resources.workers`` N > 1 data-parallel ranks takes that time / N (:func:`trial_wall_s`) and holds N workers'
devices (:func:`devices_per_trial`): N × its wall time.

Not in the timed steps (the first few of a run), by USB's classic-CV-imb schedule: work an imbalance algorithm
starts later or does between steps; the shares below are counted in images (a forward-only image taken as a third
of a trained one), not measured. CoSSL's teacher forwards ((1 + ``tfe_u_ratio``) B EMA-model images a step,
forward only) from epoch ``warm_epoch`` on, 56 of 256 epochs, about 1 % of the run at B = 64, μ = 7, and its
warm-up; the pass over the unlabeled pool at each 1,024-step epoch (Adsh, SAW; CReST at each generation), N_u
forward-only images against 1,024 × B (1 + 2μ) trained ones: about 0.3 % for CIFAR-10-LT's pool of ≈ 10,000, 3 %
for STL-10's 100,000; DARP's refinement every 10 steps, host arithmetic on the pool's pseudo-labels. DASO's and
TRAS's switches (after 2 % and 4 % of the run) add only small products of the step's features with prototypes or a
linear head.
"""

from __future__ import annotations

import json
from typing import Any

from mutexmatch.config import parse_config
from mutexmatch.training import StepCost, measure_cost

from orchestration.spec.models import Resources
from orchestration.spec.plan import SweepPlan
from orchestration.spec.sweepfile import deep_merge

__all__ = ["StepCost", "measure_cost", "estimate_plan", "trial_wall_s", "devices_per_trial", "STARTUP_S",
           "startup_line"]

STARTUP_S = {"idle": 72.0, "at a load of 12-16": 225.0}
"""Seconds a launch takes beyond its trials' own time on this project's 2-core CPU machine: the driver's imports,
the MLflow store and experiment, Ray's and Tune's start, each trial's worker process and the shut-down. Idle: issue
34's launch, 80 s of wall time for ≈ 8 s of trials. Loaded (measured 2026-11-27 with the machine shared by six
sessions): ``python -m orchestration.sweep experiments/quickstart.yaml --smoke`` in a fresh folder took 237 s of wall
time for 3 trials whose MLflow runs lasted 2.9-5.5 s (12.7 s in all): 122 s to the parent run (imports, store, Ray),
83 s from Tune's start to the first trial's run (worker processes), 13 s after the parent run ended."""


def startup_line() -> str:
    """The dry run's line for :data:`STARTUP_S`: said apart from the trials' wall clock, never folded into it."""
    measured = ", ".join(f"≈ {s:.0f} s {when}" for when, s in STARTUP_S.items())
    return (f"start-up on top of that wall clock: {measured} per launch, measured on a 2-core CPU machine (imports, "
            "the MLflow store, Ray and Tune, each trial's worker process, shut-down)")


def trial_wall_s(one_process_s: float, workers: int) -> float:
    """A trial's wall time on ``workers`` data-parallel ranks, from one process's: ``one_process_s / workers``, the
    ideal scaling and so a lower bound. Not counted: each rank still makes the whole global batch's augmentations
    (the price of the single process's exact batches, :mod:`mutexmatch.training.distributed`) and the ranks
    exchange features and gradients every step, a few percent on one node, more across nodes."""
    return one_process_s / workers


def devices_per_trial(resources: Resources) -> float:
    """What one trial holds while it runs: ``resources.gpu`` per worker (a CPU sweep counts each worker as one
    unit), times ``resources.workers``; device-hours = wall hours × this."""
    return (resources.gpu if resources.gpu > 0 else 1.0) * resources.workers


def _cost_key(raw: dict[str, Any]) -> str:
    cfg = parse_config(raw)
    d, t = cfg.data, cfg.train
    key = {"dataset": d.dataset, "image_size": d.image_size, "val": d.val_per_class, "backbone": cfg.model.backbone,
           "cl": cfg.model.channels_last, "alg": cfg.algorithm.name, "b": t.batch_size, "mu": t.mu,
           "prec": t.precision, "compile": t.compile, "eb": t.eval_batch_size, "threads": t.num_threads,
           "device": t.device,
           # a composed imbalance algorithm steps otherwise (ABC's head, DASO's and CoSSL's EMA-model forwards)
           "imb": None if cfg.imb_algorithm is None else cfg.imb_algorithm.model_dump(mode="json")}
    return json.dumps(key, sort_keys=True)


def estimate_plan(plan: SweepPlan, *, device: str, num_threads: int, skip: set[str] = frozenset()
                  ) -> tuple[dict[str, float], dict[str, StepCost], list[str]]:
    """Seconds per trial for every grid trial (key) and search study (``search:<key>``, one trial), the
    measurements made, and the problems met (a dataset missing on this machine leaves its trials unestimated)."""
    costs: dict[str, StepCost] = {}
    problems: list[str] = []
    per_trial: dict[str, float] = {}
    items = [(t.key, t.config, t.iterations, t.evaluations) for t in plan.grid if t.key not in skip]
    items += [(f"search:{s.key}", s.config, s.iterations, s.evaluations) for s in plan.searches
              if f"search:{s.key}" not in skip]
    for key, raw, iterations, evaluations in items:
        ck = _cost_key(deep_merge(raw, {"train": {"device": device}}))
        if ck not in costs:
            try:
                costs[ck] = measure_cost(raw, device=device, num_threads=num_threads)
            except Exception as e:  # noqa: BLE001 - reported to the user, the plan is still printed
                problems.append(f"{key}: cannot measure ({type(e).__name__}: {e})")
                costs[ck] = None  # type: ignore[assignment]
        if costs[ck] is not None:
            per_trial[key] = trial_wall_s(costs[ck].trial_seconds(iterations, evaluations),
                                          plan.spec.resources.workers)
    return per_trial, {k: v for k, v in costs.items() if v is not None}, problems
