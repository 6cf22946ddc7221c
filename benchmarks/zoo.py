"""Every registered algorithm trained for a few hundred steps in fp32 and in its fastest path: ms/step, peak memory,
the first steps' loss against fp32, and any error.

    python benchmarks/zoo.py [--device cuda] [--backbone wrn28_2] [--batch 64] [--mu 7] [--steps 200]
                             [--fast bf16,compile,graphs] [--algorithms a,b] [--shard K/N] [--budget-s 540]
                             [--out benchmarks/results/NAME.json]

The algorithms are the registry's (``mutexmatch.algorithms.ALGORITHMS``, each with its default parameters), never a
hand list; ``--algorithms`` picks some of them (a rerun of the ones that failed) and ``--shard K/N`` the K-th of N
slices of the list (a zoo too long for one device call). Each runs ``benchmarks/train_step.py``'s synthetic
CIFAR-sized step through the trainer's public surface (``Trainer.train_step``) twice from the same seed, so both
runs see the same batches:

* ``fp32``: ``train.precision=fp32``;
* ``fast``: ``--fast``'s modifiers (default ``bf16,compile,graphs``: ``train.precision=bf16``, ``train.compile``,
  ``train.cuda_graphs``). A modifier the trainer refuses for the algorithm (its one-line ``ConfigError``, e.g.
  ``train.cuda_graphs`` for a step of separate forwards, or on a CPU) is dropped and the refusal recorded
  (``refused``), so the fast path is the fastest one the algorithm allows.

Per run: ``ms_per_step`` (free-running: the steps after ``--warmup`` back to back, one synchronisation at the end,
as ``train_step.py`` times), ``first_steps_s`` (the warm-up steps, compiling included), ``peak_memory_mib`` (CUDA's
peak allocated over the run; null on a CPU) and the total loss of the first ``--loss-steps`` steps. ``fast`` adds
``loss_rel_diff``: the largest |fast - fp32| / max(|fp32|, 1e-8) over those steps (bf16 drifts by design; a value
near 1 or a non-finite loss is the failure to look at). An exception is recorded as ``error`` (its last line) and
the next algorithm runs. The results file is rewritten after every algorithm, so a run cut off by its time limit
keeps what it measured; an algorithm not started within ``--budget-s`` is recorded as ``skipped``.

Default output: ``benchmarks/results/zoo_<device>_<backbone>.json`` (``_shardKofN`` when sharded), headed by
:func:`record.header`. Nothing here is compared with a baseline: it proves each algorithm trains on the device; the
step's speed claims are ``train_step.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import header, write  # noqa: E402
from train_step import add_step_arguments, build_ours, sync, synthetic_cifar  # noqa: E402

from mutexmatch.algorithms import ALGORITHMS  # noqa: E402
from mutexmatch.config import ConfigError  # noqa: E402

# A fast-path modifier -> the build_ours keyword it sets and the config field a refusal of it names.
FAST_MODIFIERS = {"bf16": ("precision", "bf16", "train.precision"), "compile": ("compile_model", True, "train.compile"),
                  "graphs": ("cuda_graphs", True, "train.cuda_graphs")}


def fast_modifiers(text: str) -> list[str]:
    """``--fast``'s comma-separated modifiers, each known and once."""
    mods = [m for m in text.split(",") if m]
    bad = [m for m in mods if m not in FAST_MODIFIERS] + [m for m in set(mods) if mods.count(m) > 1]
    if bad or not mods:
        raise ValueError(f"--fast {text!r}: {bad or 'empty'} not one of {list(FAST_MODIFIERS)} (each at most once)")
    return mods


def shard(names: list[str], spec: str) -> list[str]:
    """The K-th of N slices (``spec`` "K/N", 1 <= K <= N) of ``names``, every name in exactly one slice."""
    try:
        k, n = (int(v) for v in spec.split("/"))
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise ValueError(f"--shard {spec!r}: not K/N with 1 <= K <= N (e.g. 1/2)")
    return names[k - 1::n]


def _build(args, bundle, root: str, algorithm: str, mods: list[str]):
    """A trainer with ``mods``; a modifier whose config field the trainer's refusal names is dropped and the
    refusal returned (any other ConfigError is the algorithm's error)."""
    refused = {}
    mods = list(mods)
    while True:
        kwargs = {FAST_MODIFIERS[m][0]: FAST_MODIFIERS[m][1] for m in mods}
        try:
            return build_ours(args, bundle, root, algorithm={"name": algorithm}, **kwargs), mods, refused
        except ConfigError as e:
            # the field the refusal is about comes first ("train.cuda_graphs=true: ..."); later ones are advice
            named = sorted((str(e).find(f"{FAST_MODIFIERS[m][2]}="), m) for m in mods
                           if f"{FAST_MODIFIERS[m][2]}=" in str(e))
            if not named:
                raise
            refused[named[0][1]] = str(e)
            mods.remove(named[0][1])


def _capture_losses(trainer, n: int) -> list:
    """Keep the total loss of the first ``n`` steps (on the device: read after the run, no sync per step)."""
    losses: list = []
    compute = trainer.algorithm.compute

    def recorded(*a, **kw):
        out = compute(*a, **kw)
        if len(losses) < n:
            losses.append(out.loss.detach().float().clone())
        return out
    trainer.algorithm.compute = recorded
    return losses


def train(args, bundle, algorithm: str, mods: list[str]) -> dict:
    """One algorithm, one path: the figures of the module docstring."""
    cuda = args.device.startswith("cuda")
    with contextlib.suppress(Exception):
        torch._dynamo.reset()  # a fresh model per run: no recompile limit reached through earlier models' guards
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        trainer, used, refused = _build(args, bundle, root, algorithm, mods)
        losses = _capture_losses(trainer, args.loss_steps)
        start = time.perf_counter()
        for _ in range(args.warmup):
            trainer.train_step()
        sync(args.device)
        warm = time.perf_counter()
        for _ in range(args.steps - args.warmup):
            trainer.train_step()
        sync(args.device)
        end = time.perf_counter()
    timed = args.steps - args.warmup
    return {"modifiers": used, "refused": refused, "first_steps_s": warm - start,
            "ms_per_step": (end - warm) * 1e3 / timed if timed else None,
            "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            "losses": [v.item() for v in losses]}


def _guarded(args, bundle, algorithm: str, mods: list[str]) -> dict:
    try:
        return train(args, bundle, algorithm, mods)
    except Exception as e:  # recorded: the next algorithm still runs
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"}


def loss_rel_diff(fp32: list[float], fast: list[float]) -> float | None:
    """Largest |fast - fp32| / max(|fp32|, 1e-8) over the steps both recorded (inf where either is non-finite)."""
    pairs = list(zip(fp32, fast))
    if not pairs:
        return None
    return max(abs(b - a) / max(abs(a), 1e-8) if math.isfinite(a) and math.isfinite(b) else math.inf
               for a, b in pairs)


def run_zoo(args, names: list[str], on_result=lambda results: None) -> dict:
    """Every name in fp32 and the fast path; ``on_result`` gets the results so far after each algorithm."""
    bundle = synthetic_cifar(args.images)
    results: dict = {}
    start = time.perf_counter()
    for name in names:
        if time.perf_counter() - start > args.budget_s:
            results[name] = {"skipped": f"not started: --budget-s {args.budget_s:g} s spent"}
            continue
        print(f"--- {name}", flush=True)
        row = {"fp32": _guarded(args, bundle, name, []), "fast": _guarded(args, bundle, name, args.fast)}
        if "losses" in row["fp32"] and "losses" in row["fast"]:
            row["fast"]["loss_rel_diff"] = loss_rel_diff(row["fp32"]["losses"], row["fast"]["losses"])
        results[name] = row
        on_result(results)
    return results


def _cell(fig: dict, key: str, fmt: str) -> str:
    value = fig.get(key)
    return "-" if value is None else format(value, fmt)


def table(results: dict) -> str:
    """The Markdown table printed (and pasted into benchmarks/README.md)."""
    lines = ["| algorithm | fp32 ms/step | fp32 peak MiB | fast path | fast ms/step | fast peak MiB | first-steps "
             "loss vs fp32 | error or refusal |", "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for name, row in results.items():
        if "skipped" in row:
            lines.append(f"| {name} | - | - | - | - | - | - | {row['skipped']} |")
            continue
        fp32, fast = row["fp32"], row["fast"]
        notes = [f"{p}: {r['error']}" for p, r in row.items() if "error" in r]
        notes += [f"{m} refused" for m in fast.get("refused", {})]
        lines.append(f"| {name} | {_cell(fp32, 'ms_per_step', '.1f')} | {_cell(fp32, 'peak_memory_mib', '.0f')} | "
                     f"{'+'.join(fast.get('modifiers', [])) or '-'} | {_cell(fast, 'ms_per_step', '.1f')} | "
                     f"{_cell(fast, 'peak_memory_mib', '.0f')} | {_cell(fast, 'loss_rel_diff', '.2e')} | "
                     f"{'; '.join(notes) or '-'} |")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(ap)
    ap.add_argument("--steps", type=int, default=200, help="steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=10, help="first steps, not timed (compiling happens there)")
    ap.add_argument("--loss-steps", type=int, default=5, help="first steps whose loss is compared with fp32")
    ap.add_argument("--fast", default="bf16,compile,graphs", help=f"the fast path's modifiers, of {list(FAST_MODIFIERS)}")
    ap.add_argument("--algorithms", help="comma-separated registered names (default: every registered algorithm)")
    ap.add_argument("--shard", default="1/1", help="K/N: the K-th of N slices of the algorithms")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no algorithm after this many seconds")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--out", help="results JSON (default benchmarks/results/zoo_<device>_<backbone>.json)")
    args = ap.parse_args(argv)
    names = args.algorithms.split(",") if args.algorithms else list(ALGORITHMS)
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        ap.error(f"--algorithms: {unknown} not registered; registered: {sorted(ALGORITHMS)}")
    if not 0 <= args.warmup < args.steps or args.loss_steps < 0:
        ap.error(f"--warmup {args.warmup} must be >= 0 and below --steps {args.steps}; --loss-steps >= 0")
    try:
        args.fast = fast_modifiers(args.fast)
        args.names = shard(names, args.shard)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    settings = {k: getattr(args, k) for k in ("backbone", "batch", "mu", "steps", "warmup", "loss_steps", "fast",
                                                "shard")}
    k, n = args.shard.split("/")
    name = f"zoo_{torch.device(args.device).type}_{args.backbone}" + (f"_shard{k}of{n}" if n != "1" else "")
    record = {**header(args.device), "settings": settings, "algorithms": {}}

    def save(results: dict) -> None:
        record["algorithms"] = results
        write(args.out, name, record)
    results = run_zoo(args, args.names, save)
    save(results)
    print(table(results))
    failed = [a for a, row in results.items() if any("error" in r for r in row.values() if isinstance(r, dict))]
    print(f"{len(results) - len(failed)} of {len(results)} algorithms trained in both paths"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
