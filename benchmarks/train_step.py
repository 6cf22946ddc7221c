"""Images/s of our full MutexMatch training step vs a step in the released code's style, same run.

    python benchmarks/train_step.py [--device cpu|cuda] [--backbone wrn28_2] [--batch 64] [--mu 7] [--steps 3]
                                    [--rounds 3] [--timing free|per-step] [--workers 0] [--precision fp32|bf16]
                                    [--pipelines a,b,...] [--out benchmarks/results/NAME.json]

Ours: `mutexmatch.train.Trainer.train_step` with its defaults — uint8 images on the device, batched weak+strong
augmentation there, channels-last model, one forward over [labeled | weak | strong], and on CPU
``train.keep_freed_memory`` (glibc keeps freed activation blocks instead of page-faulting them back every step,
:mod:`mutexmatch.training.allocator`); also measured with ``train.compile`` (torch.compile of the model, which fuses
BatchNorm + LeakyReLU), with ``keep_freed_memory`` off, with ``train.deterministic`` (deterministic kernels,
what a bit-exact CUDA resume needs), with each batch made when the step needs it instead of ahead on a side stream
(``ours+on_demand``) and with foreach instead of fused SGD (``ours+sgd_foreach``; both differ from ours on CUDA
only), with the strong view's RandAugment ops each on its own sub-batch as before issue 45 (``ours+per_op_augment``,
the same images); modifiers combine (``ours+bf16+compile``; ``MODIFIERS`` lists them, ``ours_compile`` is the older spelling
of ``ours+compile``). Reference (the released code's design): per-image PIL
RandAugment+Cutout and flip/crop in a `torch.utils.data.DataLoader`, an NCHW fp32 eager model, the same backbone,
loss (MutexMatch, official form), batch and optimiser, as released (glibc defaults) and — to separate the allocator
from the rest of our design — with the same allocator setting given through the environment (``MALLOC_MMAP_MAX_=0``,
huge ``MALLOC_TRIM_THRESHOLD_``). All run on CIFAR-sized synthetic uint8 images (speed does not depend on pixel
values). Each pipeline runs in its own fresh process (no compile cache, allocator state or thread pool shared),
warmed up by two steps and timed over ``--steps`` steps: free-running by default (the steps back to back, one
device synchronisation at the end, as training runs them: one figure per process), or with ``--timing per-step`` a
synchronisation after each (one figure per step). ``--rounds`` rounds (default 3) run every pipeline once each,
interleaved, and each figure is the median over the rounds' figures. Every ratio is printed against both references.
The figures are also written to ``--out`` (default ``benchmarks/results/train_step_<device>_<backbone>_<precision>
.json``): :func:`record.header` (device, torch, cuda, date, command), the settings, and per pipeline
``median_s_per_step``, ``images_per_s``, ``min_s``, ``max_s``.

On a machine shared with other jobs set ``OMP_WAIT_POLICY=PASSIVE`` (OpenMP spin-waiting, see benchmarks/augment.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from augment import PilPairDataset  # noqa: E402  (the per-image PIL baseline of benchmarks/augment.py)
from record import header, write  # noqa: E402

from mutexmatch.algorithms import ALGORITHMS, StepInputs, TrainContext  # noqa: E402
from mutexmatch.config import parse_config  # noqa: E402
from mutexmatch.data.builtin import DATASETS  # noqa: E402
from mutexmatch.data.images import ImageData  # noqa: E402
from mutexmatch.data.load import DatasetBundle  # noqa: E402
from mutexmatch.models import build_model  # noqa: E402
from mutexmatch.training import Trainer, param_groups  # noqa: E402

RETAIN_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
PIPELINES = {
    "reference": "reference as released (PIL per image in DataLoader, NCHW fp32, eager, glibc defaults)",
    "reference_retain": "reference + the allocator setting through the environment",
    "ours": "ours, defaults (batched on-device augmentation, channels-last, eager, keep_freed_memory)",
}
# What ours can be changed by: ``ours+bf16+compile`` combines them; ``ours_compile`` (one, the older spelling) too.
MODIFIERS = {
    "compile": "train.compile",
    "no_keep": "train.keep_freed_memory=false",
    "deterministic": "train.deterministic",
    "on_demand": "each batch made when the step needs it (CUDA: no side-stream prefetch)",
    "sgd_foreach": "foreach SGD instead of the fused kernel (CUDA)",
    "fp32": "fp32 (whatever --precision says)",
    "bf16": "bf16 autocast (whatever --precision says)",
    "fp16": "fp16 autocast with the GradScaler (whatever --precision says)",
    "graphs": "train.cuda_graphs (CUDA graphs over the compiled backbone; CUDA only)",
    "per_op_augment": "the strong view's RandAugment ops each on its own sub-batch (the path before issue 45)",
}
DEFAULT_PIPELINES = ["reference", "reference_retain", "ours", "ours+compile", "ours+no_keep", "ours+deterministic",
                     "ours+on_demand", "ours+sgd_foreach"]


def modifiers(pipeline: str) -> list[str]:
    """The modifiers of an ``ours`` pipeline (``ours+bf16+compile``, or the older ``ours_compile``); ValueError for
    a name that is neither a reference nor ours with known modifiers."""
    if pipeline in PIPELINES:
        return []
    base, *mods = pipeline.split("+")
    if base.startswith("ours_") and not mods:
        base, mods = "ours", [base[len("ours_"):]]
    unknown = [m for m in mods if m not in MODIFIERS]
    if base != "ours" or unknown or not mods or len(set(mods)) < len(mods):
        raise ValueError(f"--pipelines: {pipeline!r} is not one of {list(PIPELINES)} nor ours+MODIFIER[+...] with "
                         f"modifiers from {list(MODIFIERS)}")
    return mods


def describe(pipeline: str) -> str:
    mods = modifiers(pipeline)
    return PIPELINES[pipeline] if not mods else "ours + " + " + ".join(MODIFIERS[m] for m in mods)


def synthetic_cifar(n: int, seed: int = 0, size: int = 32, num_classes: int = 10) -> DatasetBundle:
    """CIFAR-10-like uint8 images (speed and memory do not depend on pixel values); ``size`` and ``num_classes``
    stand in for the other datasets' shapes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    y = torch.arange(n) % num_classes
    info = dataclasses.replace(DATASETS["cifar10"].info, num_classes=num_classes, image_size=size)
    return DatasetBundle(info=info, train=ImageData(x, y), test=ImageData(x[:256], y[:256]),
                         extra_unlabeled=None, predefined_folds=None)


def timed(step, args) -> list[float]:
    """Seconds per step after two warm-up steps. ``--timing free`` (default): the ``--steps`` steps run back to back
    and the device is synchronised once at the end, as in training (one figure: their mean); ``per-step``: a
    synchronisation after every step (one figure per step; it stalls the host's launch queue, so on a GPU it
    overstates a step whose CPU work could overlap the previous step's kernels)."""
    for _ in range(2):
        step()
    sync(args.device)
    if args.timing == "free":
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync(args.device)
        return [(time.perf_counter() - start) / args.steps]
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync(args.device)
        times.append(time.perf_counter() - start)
    return times


def build_ours(args, bundle: DatasetBundle, root: str, compile_model: bool = False, keep: bool = True,
               deterministic: bool = False, precision: str | None = None, cuda_graphs: bool = False,
               algorithm: dict | None = None) -> Trainer:
    """Our trainer on ``bundle``: MutexMatch (``form: official``) unless ``algorithm`` (a config section) says."""
    cfg = parse_config({
        "data": {"dataset": "cifar10", "root": root, "num_labels": 25 * bundle.info.num_classes},
        "model": {"backbone": args.backbone},
        "algorithm": algorithm or {"name": "mutexmatch", "form": "official"},
        "train": {"batch_size": args.batch, "mu": args.mu, "device": args.device,
                  "precision": precision or args.precision, "progress": False, "iterations": 1000,
                  "compile": compile_model, "keep_freed_memory": keep, "deterministic": deterministic,
                  "cuda_graphs": cuda_graphs},
        "output_dir": str(Path(root) / "ours"),
    })
    return Trainer(cfg, bundle=bundle)


def time_ours(args, bundle: DatasetBundle, root: str, pipeline: str) -> list[float]:
    mods = modifiers(pipeline)
    precision = next((m for m in mods if m in ("fp32", "bf16", "fp16")), None)
    trainer = build_ours(args, bundle, root, compile_model="compile" in mods, keep="no_keep" not in mods,
                         deterministic="deterministic" in mods, precision=precision, cuda_graphs="graphs" in mods)
    if "on_demand" in mods:
        trainer.prefetcher.ahead = False
    if "per_op_augment" in mods:
        trainer.batches.fused_augment = False
    if "sgd_foreach" in mods:
        for group in trainer.optimizer.param_groups:  # read by SGD at every step
            group.update(fused=False, foreach=True)
    return timed(trainer.train_step, args)


def time_reference(args, bundle: DatasetBundle) -> list[float]:
    device = torch.device(args.device)
    images = bundle.train.x.permute(0, 2, 3, 1).numpy()
    labels = bundle.train.y
    model = build_model(args.backbone, num_classes=10).to(device)  # NCHW, fp32
    opt = torch.optim.SGD(param_groups(model, 5e-4), lr=0.03, momentum=0.9, nesterov=True)
    alg = ALGORITHMS["mutexmatch"]({"form": "official", "k": 10}, TrainContext.synthetic(10))
    sampler = lambda n: torch.utils.data.RandomSampler(range(len(images)), replacement=True, num_samples=10**9)  # noqa
    lb_loader = torch.utils.data.DataLoader(PilPairDataset(images), batch_size=args.batch, sampler=sampler(0),
                                            num_workers=args.workers)
    ulb_loader = torch.utils.data.DataLoader(PilPairDataset(images), batch_size=args.batch * args.mu,
                                             sampler=sampler(0), num_workers=args.workers)
    lb_it, ulb_it = iter(lb_loader), iter(ulb_loader)

    def step() -> None:
        x_lb, _ = next(lb_it)
        x_w, x_s = next(ulb_it)
        x = torch.cat([x_lb, x_w, x_s]).to(device)
        y = labels[: args.batch].to(device)
        model.train()
        feats = model(x)
        out = alg.compute(model, StepInputs(feats=feats, num_lb=args.batch, num_ulb=args.batch * args.mu,
                                            targets_lb=y, ulb_idx=torch.arange(args.batch * args.mu), step=0))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()

    return timed(step, args)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_child(args) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    bundle = synthetic_cifar(args.images)
    with tempfile.TemporaryDirectory() as root:
        if args.child.startswith("reference"):
            times = time_reference(args, bundle)
        else:
            times = time_ours(args, bundle, root, args.child)
    from mutexmatch.training import compile_report

    compiled = {"compile": compile_report()} if {"compile", "graphs"} & set(modifiers(args.child)) else {}
    print(json.dumps({"step_s": times, "threads": torch.get_num_threads(), **compiled}))


def measure(pipeline: str, argv: list[str]) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in RETAIN_ENV}
    if pipeline == "reference_retain":
        env.update(RETAIN_ENV)
    proc = subprocess.run([sys.executable, __file__, *argv, "--child", pipeline], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        sys.exit(f"{pipeline} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if "compile" in out:  # graph breaks and recompiles of a compiled pipeline (issue 24)
        c = out["compile"]
        print(f"  {pipeline}: {c['graphs']} graph(s), {c['graph_breaks']} graph break(s), {c['recompiles']} "
              f"recompile(s)" + (f"; breaks: {c['break_reasons']}" if c["break_reasons"] else ""), flush=True)
    return out["step_s"]


def add_step_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the measured step, shared with benchmarks/gpu_share.py."""
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backbone", default="wrn28_2")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mu", type=int, default=7)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(ap)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per process (after two warm-up steps)")
    ap.add_argument("--rounds", type=int, default=3, help="each pipeline runs once per round, rounds interleaved, "
                    "so slow phases of a shared machine hit every pipeline alike")
    ap.add_argument("--timing", default="free", choices=["free", "per-step"], help="free: time --steps steps back "
                    "to back, one synchronisation at the end (as training runs); per-step: synchronise after each")
    ap.add_argument("--workers", type=int, default=0, help="reference DataLoader workers (the notes: 0 is fastest "
                    "on 2 cores)")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES), help=f"comma-separated: {list(PIPELINES)} "
                    f"or ours+MODIFIER[+...] with modifiers {list(MODIFIERS)} (the references are always measured)")
    ap.add_argument("--out", help="results JSON (default benchmarks/results/train_step_<device>_<backbone>_"
                    "<precision>.json)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args)
    pipelines = args.pipelines.split(",")
    for name in pipelines:
        try:
            modifiers(name)
        except ValueError as e:
            sys.exit(str(e))
    # The allocator setting concerns host memory: on a GPU the reference is measured as released only.
    references = ["reference", "reference_retain"] if args.device == "cpu" else ["reference"]
    pipelines = references + [p for p in pipelines if not p.startswith("reference")]
    child_argv = [f"--{k}={getattr(args, k)}" for k in ("device", "backbone", "batch", "mu", "steps", "workers",
                                                          "precision", "images", "timing")]
    per_step = args.batch * (1 + 2 * args.mu)
    print(f"device={args.device} backbone={args.backbone} B={args.batch} mu={args.mu} steps={args.steps} "
          f"rounds={args.rounds} precision={args.precision} torch_threads={torch.get_num_threads()} "
          f"load={os.getloadavg()[0]:.2f}")
    steps: dict[str, list[float]] = {name: [] for name in pipelines}
    for r in range(args.rounds):
        for name in pipelines:
            times = measure(name, child_argv)
            steps[name] += times
            print(f"  round {r + 1}: {name}: {', '.join(f'{t:.2f}' for t in times)} s/step", flush=True)
    # The median over every timed step of every round: robust to a burst of other load on a shared machine.
    results = {name: statistics.median(times) for name, times in steps.items()}
    ref, ref_retain = results["reference"], results.get("reference_retain")
    retain_col = " vs reference + allocator setting |" if ref_retain else ""
    print(f"\n| pipeline | median s/step (min-max) | images/s | vs reference as released |{retain_col}")
    print("| --- | --- | --- | --- |" + (" --- |" if ref_retain else ""))
    for name, sec in results.items():
        lo, hi = min(steps[name]), max(steps[name])
        print(f"| {describe(name)} | {sec:.3f} ({lo:.2f}-{hi:.2f}) | {per_step / sec:.1f} | {ref / sec:.2f}x |"
              + (f" {ref_retain / sec:.2f}x |" if ref_retain else ""))
    best = min((sec, name) for name, sec in results.items() if not name.startswith("reference"))
    print(f"speed-up of our fastest step ({best[1]}): {ref / best[0]:.2f}x vs the reference as released"
          + (f", {ref_retain / best[0]:.2f}x vs the reference with the same allocator setting" if ref_retain else ""))
    record_results(args, steps, per_step)


def record_results(args, steps: dict[str, list[float]], per_step: int) -> None:
    """The run's figures as ``--out`` JSON: header, settings, and per pipeline the median, images/s, min and max."""
    ref = statistics.median(steps["reference"])
    pipelines = {}
    for name, times in steps.items():
        sec = statistics.median(times)
        pipelines[name] = {"median_s_per_step": sec, "images_per_s": per_step / sec, "min_s": min(times),
                           "max_s": max(times), "vs_reference": ref / sec, "what": describe(name),
                           "figures_s": times}
    settings = {k: getattr(args, k) for k in ("backbone", "batch", "mu", "precision", "steps", "rounds", "workers",
                                              "images", "timing")}
    write(args.out, f"train_step_{torch.device(args.device).type}_{args.backbone}_{args.precision}",
          {**header(args.device), "settings": {**settings, "images_per_step": per_step}, "pipelines": pipelines})


if __name__ == "__main__":
    main()
