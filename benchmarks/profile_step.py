"""Where one steady-state training step spends its time, and how often it makes the host wait for the device.

    python benchmarks/profile_step.py [--device cpu|cuda] [--backbone wrn28_2] [--batch 64] [--mu 7]
                                      [--precision fp32|bf16] [--compile] [--warmup 5] [--steps 3]
                                      [--sync-steps 5] [--per-op-augment]
                                      [--out benchmarks/results/NAME.json]

Builds ``benchmarks/train_step.py``'s ``ours`` step (``Trainer.train_step`` on synthetic CIFAR-sized images), runs
``--warmup`` steps, then records ``--steps`` steps with ``torch.profiler`` and writes, per step:

* ``time_by_category_s``: CUDA kernel time (on the CPU: operators' own CPU time) split into ``augmentation`` (all
  of the batch: indices, gather, weak + strong views, normalisation; on CUDA made ahead on the side stream),
  ``losses`` (heads and losses, forward and their backward), ``optimizer_ema`` (SGD step and EMA update),
  ``convolutions`` and ``bn_activation`` (backbone forward and backward, by operator) and ``other`` (the rest:
  residual adds, pooling, copies, ...);
* ``gpu``: wall time, GPU busy time (union of kernel, copy and memset intervals over all streams; the GPU
  annotation spans that named ``record_function`` ranges add are left out: they cover kernels, they are none), idle
  time = wall - busy, and the idle gaps between kernels (count over 10 us, largest, total);
* ``cpu_launch``: CPU time spent in kernel launch and async copy calls, their number, and their number by the
  categories above (``launches_by_category``); null on the CPU;
* ``ops``: leaf ATen operators per step (those calling no other ATen operator; allocations and views left out), in
  all and by category: on a CPU
  the launch count's stand-in. The launch count per step (CUDA) or the operator count (CPU), whole step and
  augmentation, is printed on one line;
* ``syncs``: device->host synchronisations per step over ``--sync-steps`` more steady-state steps, counted with
  ``torch.cuda.set_sync_debug_mode("warn")`` (warnings from the Python thread by call site, plus those the
  autograd thread prints). PyTorch's one-time notice that the mode is a prototype ("Synchronization debug mode is a
  prototype feature...") is no synchronisation and is not counted (``notices_ignored``); null on the CPU.

``--per-op-augment`` profiles the strong view's RandAugment ops each on its own sub-batch (the path before issue 45,
``_per_op_augment`` in the default output name): the launch count before and after the fused ops.

Default output: ``benchmarks/results/profile_<device>_<backbone>_<precision>.json``, headed by
:func:`record.header`. No ratio is printed: this is a breakdown, not a speed claim (``train_step.py`` measures).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import header, write  # noqa: E402
from train_step import add_step_arguments, build_ours, sync, synthetic_cifar  # noqa: E402

CATEGORIES = ("augmentation", "losses", "optimizer_ema", "convolutions", "bn_activation", "other")
PHASES = {"mutexmatch.augmentation": "augmentation", "mutexmatch.losses": "losses", "mutexmatch.ema": "optimizer_ema"}
# PyTorch prints this once when the sync debug mode is first switched on; a real synchronisation warns "called a
# synchronizing CUDA operation".
DEBUG_MODE_NOTICE = "Synchronization debug mode is a prototype feature"
SYNC_WARNING = "called a synchronizing CUDA operation"
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
GAP_S = 10e-6
# ATen operators that touch no data (allocation, views, metadata): no kernel on a GPU, left out of the CPU's count
NO_DATA_OPS = frozenset({"aten::empty", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_unsafe_view",
                         "aten::_reshape_alias", "aten::alias", "aten::resize_", "aten::set_", "aten::detach",
                         "aten::detach_", "aten::lift_fresh", "aten::result_type"})


def _ranged(name: str, fn):
    def wrapped(*args, **kwargs):
        with record_function(name):
            return fn(*args, **kwargs)
    return wrapped


def label_phases(trainer) -> None:
    """Wrap the trainer's batch making, loss computation and EMA update in named profiler ranges (the optimiser
    step has its own, ``Optimizer.step#SGD.step``)."""
    trainer.prefetcher.make = _ranged("mutexmatch.augmentation", trainer.prefetcher.make)
    trainer.algorithm.compute = _ranged("mutexmatch.losses", trainer.algorithm.compute)
    trainer.ema.update = _ranged("mutexmatch.ema", trainer.ema.update)


def _chain(event) -> list:
    out = []
    while event is not None:
        out.append(event)
        event = event.cpu_parent
    return out


def categorise(event, loss_seqs: set[int]) -> str:
    """The category of an operator: its labelled phase if it runs inside one (a backward node counts with the
    forward operator of the same sequence number), else by the operator names along its call chain."""
    chain = _chain(event)
    for e in chain:
        if e.name in PHASES:
            return PHASES[e.name]
        if e.name.startswith("Optimizer.step"):
            return "optimizer_ema"
        if e.name.startswith("autograd::engine::evaluate_function") and e.sequence_nr in loss_seqs:
            return "losses"
    names = " ".join(e.name.lower() for e in chain)
    if "conv" in names:
        return "convolutions"
    if any(k in names for k in ("batch_norm", "batchnorm", "leaky_relu", "leakyrelu", "relu", "threshold")):
        return "bn_activation"
    return "other"


def _loss_sequence_numbers(events) -> set[int]:
    return {e.sequence_nr for e in events if e.sequence_nr >= 0 and e.device_type == torch.autograd.DeviceType.CPU
            and any(p.name == "mutexmatch.losses" for p in _chain(e))}


def breakdown(events, steps: int, cuda: bool) -> dict[str, float]:
    """Seconds per step by category: CUDA kernel time of the operators that launched them, or on the CPU the
    operators' own (self) CPU time."""
    loss_seqs = _loss_sequence_numbers(events)
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU or e.name in PHASES:
            continue
        us = sum(k.duration for k in e.kernels) if cuda else e.self_cpu_time_total
        if us:
            totals[categorise(e, loss_seqs)] += us * 1e-6 / steps
    return totals


def _annotation(event) -> bool:
    """A GPU span that a named ``record_function`` range adds over its kernels (not device work of its own)."""
    return bool(getattr(event, "is_user_annotation", False)) or event.name in PHASES \
        or event.name.startswith("Optimizer.")


def gpu_timeline(events, steps: int, wall_s: float) -> dict:
    """GPU busy time (union of device intervals over all streams, annotation spans left out), idle = wall - busy,
    and the gaps between."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.device_type == torch.autograd.DeviceType.CUDA and not _annotation(e))
    busy, gaps, end = 0.0, [], None
    for start, stop in spans:
        if end is None or start > end:
            if end is not None:
                gaps.append((start - end) * 1e-6)
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    busy_s = busy * 1e-6 / steps
    wall = wall_s / steps
    return {"wall_s": wall, "busy_s": busy_s, "idle_s": max(0.0, wall - busy_s),
            "gaps_over_10us_per_step": sum(g > GAP_S for g in gaps) / steps,
            "gap_total_s": sum(gaps) / steps, "largest_gap_s": max(gaps, default=0.0)}


def cpu_launch(events, steps: int) -> dict:
    """CPU seconds and number of kernel launches and async copies per step, the number also by category."""
    launches = [e for e in events if e.name in LAUNCHES]
    loss_seqs = _loss_sequence_numbers(events)
    by_category = dict.fromkeys(CATEGORIES, 0.0)
    for e in launches:
        by_category[categorise(e, loss_seqs)] += 1 / steps
    return {"seconds": sum(e.cpu_time_total for e in launches) * 1e-6 / steps, "calls": len(launches) / steps,
            "launches_by_category": by_category}


def op_count(events, steps: int) -> dict:
    """Leaf ATen operators per step (those calling no other ATen operator: the ones that do the work, each one
    kernel launch or more on a GPU, a loop over the data on a CPU; :data:`NO_DATA_OPS` left out), in all and by
    category: on a CPU the stand-in for :func:`cpu_launch`'s launch count (issue 35: how many kernels augmentation
    and the whole step make)."""
    loss_seqs = _loss_sequence_numbers(events)
    by_category = dict.fromkeys(CATEGORIES, 0.0)
    for e in events:
        if (e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::")
                and e.name not in NO_DATA_OPS and not any(c.name.startswith("aten::") for c in e.cpu_children)):
            by_category[categorise(e, loss_seqs)] += 1 / steps
    return {"per_step": sum(by_category.values()), "by_category": by_category}


def launch_line(result: dict) -> str:
    """The launch count per step, whole step and augmentation: CUDA kernel launches (and async copies) on a GPU,
    leaf ATen operators on a CPU."""
    launches = result["cpu_launch"]
    if launches is not None:
        return (f"launches per step (CUDA kernels and async copies): {launches['calls']:.0f}, augmentation "
                f"{launches['launches_by_category']['augmentation']:.0f}")
    ops = result["ops"]
    return (f"operators per step (leaf ATen operators, the CPU's stand-in for launches): {ops['per_step']:.0f}, "
            f"augmentation {ops['by_category']['augmentation']:.0f}")


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send file descriptor 2 (where C++ warnings of threads without a Python handler go) to ``path``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def tally_syncs(caught, stderr_lines: list[str], steps: int) -> dict:
    """Synchronisations per step from the warnings of the Python thread (``caught``: objects with ``message``,
    ``filename``, ``lineno``) and the lines other threads printed; the debug mode's notice is counted apart."""
    sites: collections.Counter = collections.Counter()
    notices = 0
    for w in caught:
        text = str(w.message)
        if DEBUG_MODE_NOTICE in text:
            notices += 1
        elif SYNC_WARNING in text:
            sites[f"{Path(w.filename).name}:{w.lineno}"] += 1
    notices += sum(DEBUG_MODE_NOTICE in line for line in stderr_lines)
    other_threads = sum(SYNC_WARNING in line and DEBUG_MODE_NOTICE not in line for line in stderr_lines)
    return {"syncs_per_step": (sum(sites.values()) + other_threads) / steps, "steps": steps, "sites": dict(sites),
            "from_other_threads": other_threads, "notices_ignored": notices}


def count_syncs(trainer, root: str, steps: int) -> dict:
    """Device->host synchronisations per steady-state step over ``steps`` steps, by Python call site."""
    torch.cuda.synchronize()
    log = Path(root) / "sync_stderr.txt"
    with warnings.catch_warnings(record=True) as caught, _stderr_to(log):
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                trainer.train_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return tally_syncs(caught, log.read_text().splitlines(), steps)


def run(args, root: str) -> dict:
    trainer = build_ours(args, synthetic_cifar(args.images), root, compile_model=args.compile)
    trainer.batches.fused_augment = not args.per_op_augment
    label_phases(trainer)
    for _ in range(args.warmup):
        trainer.train_step()
    sync(args.device)
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        sync(args.device)
        wall = time.perf_counter() - start
    events = prof.events()
    out = {"time_by_category_s": breakdown(events, args.steps, cuda),
           "timed": "CUDA kernel time" if cuda else "operators' own CPU time"}
    out["gpu"] = gpu_timeline(events, args.steps, wall) if cuda else None
    out["cpu_launch"] = cpu_launch(events, args.steps) if cuda else None
    out["ops"] = op_count(events, args.steps)
    out["syncs"] = count_syncs(trainer, root, args.sync_steps) if cuda else None
    out["step_s_unprofiled"] = _unprofiled(trainer, args)
    return out


def _unprofiled(trainer, args) -> float:
    """Median wall time of a few steps without the profiler (its own overhead inflates the profiled ones)."""
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        trainer.train_step()
        sync(args.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(ap)
    ap.add_argument("--compile", action="store_true", help="train.compile (torch.compile of the backbone)")
    ap.add_argument("--warmup", type=int, default=5, help="steps before the profiled ones")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps")
    ap.add_argument("--sync-steps", type=int, default=5, help="steps whose synchronisations are counted (CUDA)")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--per-op-augment", action="store_true", help="the strong view's RandAugment ops each on its "
                    "own sub-batch (before issue 45) instead of fused")
    ap.add_argument("--out", help="results JSON (default benchmarks/results/profile_<device>_<backbone>_"
                    "<precision>.json)")
    args = ap.parse_args()
    if min(args.warmup, args.steps, args.sync_steps) < 1:
        ap.error("--warmup, --steps and --sync-steps must be >= 1")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        result = run(args, root)
    per_step = args.batch * (1 + 2 * args.mu)
    settings = {k: getattr(args, k) for k in ("backbone", "batch", "mu", "precision", "compile", "warmup", "steps",
                                              "per_op_augment")}
    record = {**header(args.device), "settings": {**settings, "images_per_step": per_step}, **result}
    print(f"| category | s per step ({result['timed']}) |\n| --- | --- |")
    for name, sec in result["time_by_category_s"].items():
        print(f"| {name} | {sec:.6f} |")
    for key in ("gpu", "cpu_launch", "syncs"):
        if result[key] is not None:
            print(f"{key}: {result[key]}")
    print(launch_line(result))
    print(f"step without the profiler: {result['step_s_unprofiled']:.4f} s")
    suffix = ("_compile" if args.compile else "") + ("_per_op_augment" if args.per_op_augment else "")
    write(args.out, f"profile_{torch.device(args.device).type}_{args.backbone}_{args.precision}{suffix}", record)


if __name__ == "__main__":
    main()
