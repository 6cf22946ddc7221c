"""One run trained twice on the same device: as the single process, and through the trial-spanning path with ONE
Ray Train worker holding the device (issue 30's GPU check).

    python benchmarks/span_check.py [--device cuda] [--config experiments/runs/digits.yaml] [--steps 60]
                                    [--eval-interval 30] [--set KEY=VALUE ...] [--rtol 1e-5] [--out FILE]

The machines lent here have one GPU each, so NCCL across GPUs cannot be run here; what can be run is the spanning
path on one GPU: :func:`orchestration.trial.spanning.fit_spanning` starts a Ray Train V2 ``TorchTrainer`` of one
worker (``Span(workers=1, gpu=1)``: Ray Train initialises the process group, NCCL on CUDA and gloo on the CPU), the
worker trains through :func:`~orchestration.trial.spanning.train_rank` and rank 0's events reach this process over
Ray queues, collected by a callback as ``tests/orchestration/test_spanning.py`` does. The worker loop is wrapped
here to record what the process group is (initialised?, backend, world size, rank) and which device the worker
sees, before it trains.

Checked and recorded (``benchmarks/record.py``, ``results/span_check_<device>.json``): the backend is NCCL on CUDA
(gloo on the CPU), world size 1, and train/loss and test/acc of both runs at every evaluation agree within
``--rtol`` (world size 1 on the same device runs the single process's step: :mod:`mutexmatch.training.distributed`
adds no collective then). The final weights are compared tensor by tensor too (recorded, not required). Exit
status 0 only when every check holds. On CUDA ``train.deterministic=true`` is advised (``device_check.sh`` sets
it): cuDNN's benchmark mode may pick other kernels in the other process.

A private local Ray: its own temp folder, 127.0.0.1 only (``orchestration.launch.cluster.loopback_node``), as many
GPUs as torch sees, shut down at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # run as a script: the checkout's packages and record.py

from orchestration.runtime.env import CLOSED_NETWORK_ENV  # noqa: E402

os.environ.update(CLOSED_NETWORK_ENV)  # before ray and mlflow are imported

import torch  # noqa: E402

import record  # noqa: E402
from mutexmatch.config import apply_overrides, parse_config, read_config_file  # noqa: E402
from mutexmatch.metrics import TEST_ACC, TOTAL, term_metric  # noqa: E402
from mutexmatch.training import Callback, EvalEvent, RunFolder, RunSummary, StartEvent, Trainer  # noqa: E402
from orchestration.trial import spanning  # noqa: E402

COMPARED = (term_metric(TOTAL), TEST_ACC)  # train/loss and test/acc at each evaluation


class Collector(Callback):
    """Each evaluation's compared metrics, and the final weights' path."""

    def __init__(self) -> None:
        self.evals: dict[int, dict[str, float]] = {}
        self.final_weights: Path | None = None

    def on_start(self, event: StartEvent) -> None:
        pass

    def on_eval(self, event: EvalEvent) -> None:
        self.evals[event.step] = {k: float(event.metrics[k]) for k in COMPARED}

    def on_end(self, summary: RunSummary) -> None:
        self.final_weights = summary.final_weights


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--config", default=str(REPO / "experiments" / "runs" / "digits.yaml"))
    p.add_argument("--steps", type=int, default=60, help="train.iterations")
    p.add_argument("--eval-interval", type=int, default=30, help="train.eval_interval")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a further config override (repeatable), e.g. train.deterministic=true")
    p.add_argument("--rtol", type=float, default=1e-5, help="largest relative difference allowed")
    p.add_argument("--out", help="results file (default benchmarks/results/span_check_<device>.json)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.eval_interval < 1 or args.eval_interval > args.steps:
        p.error(f"--steps={args.steps} --eval-interval={args.eval_interval}: need 1 <= eval interval <= steps")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no GPU here; use --device cpu (gloo) on a machine without one")
    return args


def run_config(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The YAML with the check's sizes, absolute paths (a Ray worker runs in another folder) and ``--set``."""
    sets = [f"train.iterations={args.steps}", f"train.eval_interval={args.eval_interval}",
            f"train.device={args.device}", "train.progress=false", f"data.root={root / 'data'}", *args.sets]
    raw = apply_overrides(read_config_file(args.config), sets)
    parse_config({**raw, "output_dir": str(root / "check")})  # a bad --set fails here, before any training
    return raw


def _probed_worker(config: dict[str, Any]) -> None:
    """Ray Train's worker loop: what the process group and the device are, written to ``config["probe"]``, then
    the spanning path's own worker loop."""
    import torch.distributed as dist

    group = dist.is_available() and dist.is_initialized()
    probe = {"initialized": group, "backend": str(dist.get_backend()) if group else None,
             "world_size": dist.get_world_size() if group else None, "rank": dist.get_rank() if group else None,
             "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    Path(config["probe"]).write_text(json.dumps(probe))
    spanning._worker_loop(config)


def run_spanning(args: argparse.Namespace, raw: dict[str, Any], root: Path) -> tuple[Collector, dict[str, Any]]:
    """``raw`` through :func:`spanning.fit_spanning` on one worker of a private local Ray; the callback and the
    worker's probe."""
    import ray

    probe = root / "probe.json"
    gpus = torch.cuda.device_count()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with _loopback() as loopback:
        ray.init(num_cpus=max(2, os.cpu_count() or 1), num_gpus=gpus, include_dashboard=False,
                 _temp_dir=str(root / "ray"), logging_level="WARNING")
    print(f"private local Ray: {gpus} GPU(s), {'127.0.0.1 only' if loopback else 'the node address (no MLflow here)'}")
    make_trainer = spanning._torch_trainer
    try:
        # the probing loop stands in for spanning._worker_loop (looked up when the TorchTrainer is made)
        spanning._torch_trainer = lambda span, config, trial_id: _with_probe(make_trainer, span, config, trial_id,
                                                                             probe)
        span = spanning.Span(workers=1, cpu=1.0, gpu=1.0 if args.device == "cuda" else 0.0,
                             storage=str(root / "train_runs"))
        collector = Collector()
        spanning.fit_spanning(span, {**raw, "output_dir": str(root / "span_run")}, RunFolder(root / "span" / "run"),
                              collector, trial_id="span_check")
    finally:
        spanning._torch_trainer = make_trainer
        ray.shutdown()
    return collector, json.loads(probe.read_text()) if probe.is_file() else {"initialized": None}


@contextlib.contextmanager
def _loopback() -> Iterator[bool]:
    """``orchestration.launch.cluster.loopback_node`` (Ray on 127.0.0.1 only), True; where MLflow, which that
    package imports, is missing (the GPU machines' image: nothing there reaches out), a plain block, False."""
    try:
        from orchestration.launch.cluster import loopback_node
    except ImportError as e:
        print(f"span_check: orchestration.launch is not importable here ({e}); Ray binds its node address")
        yield False
        return
    with loopback_node():
        yield True


def _with_probe(make_trainer: Any, span: Any, config: dict[str, Any], trial_id: str, probe: Path) -> Any:
    loop, spanning._worker_loop = spanning._worker_loop, _probed_worker
    try:
        return make_trainer(span, {**config, "probe": str(probe)}, trial_id)
    finally:
        spanning._worker_loop = loop


def rel_diff(a: float, b: float) -> float:
    """|a - b| / max(|a|, |b|) (0 when both are 0; inf when either is not finite)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def weights_equal(a: Path | None, b: Path | None) -> dict[str, Any]:
    """Tensors of two final-weights files: how many are bit-identical, and the largest absolute difference."""
    if a is None or b is None or not a.is_file() or not b.is_file():
        return {"compared": False}
    x, y = (torch.load(p, weights_only=True, map_location="cpu") for p in (a, b))
    floats = [k for k in x if x[k].is_floating_point()]
    diff = max(((x[k].double() - y[k].double()).abs().max().item() for k in floats), default=0.0)
    return {"compared": True, "tensors": len(x), "bit_identical": sum(torch.equal(x[k], y[k]) for k in x),
            "largest_difference": diff}


def verdict(args: argparse.Namespace, probe: dict[str, Any], single: Collector, span: Collector) -> list[str]:
    """What failed, one line each (empty: every check holds)."""
    want = "nccl" if args.device == "cuda" else "gloo"
    failed = []
    if probe.get("backend") != want or probe.get("world_size") != 1:
        failed.append(f"process group: backend {probe.get('backend')}, world size {probe.get('world_size')} "
                      f"(want {want}, 1)")
    if sorted(single.evals) != sorted(span.evals):
        failed.append(f"evaluated at steps {sorted(span.evals)} through Ray Train, {sorted(single.evals)} alone")
    for step in sorted(set(single.evals) & set(span.evals)):
        for key in COMPARED:
            d = rel_diff(single.evals[step][key], span.evals[step][key])
            if d > args.rtol:
                failed.append(f"step {step} {key}: {span.evals[step][key]!r} through Ray Train vs "
                              f"{single.evals[step][key]!r} alone (relative difference {d:.3g} > {args.rtol:g})")
    return failed


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        sys.exit("span_check: Ray is not installed in this Python; carry Ray 2.60 (ray[train]) to this machine")
    root = Path(tempfile.mkdtemp(prefix="span_check_"))
    try:
        raw = run_config(args, root)
        single = Collector()
        Trainer(parse_config({**raw, "output_dir": str(root / "single")}), callbacks=[single]).fit()
        span, probe = run_spanning(args, raw, root)
        rows = [{"step": s, **{f"{k} alone": single.evals[s][k] for k in COMPARED},
                 **{f"{k} ray train": span.evals.get(s, {}).get(k) for k in COMPARED}} for s in sorted(single.evals)]
        failed = verdict(args, probe, single, span)
        weights = weights_equal(single.final_weights, span.final_weights)
        print(f"process group in the Ray Train worker: {probe}")
        for row in rows:
            print("  ".join(f"{k} {v}" for k, v in row.items()))
        print(f"final weights: {weights}")
        record.write(args.out, f"span_check_{args.device}", {
            **record.header(args.device), "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "process_group": probe, "evaluations": rows, "final_weights": weights, "failed": failed})
        print("\n".join(failed) if failed else f"span check passed: {args.device}, backend {probe['backend']}, "
              f"world size 1, {len(rows)} evaluations equal within {args.rtol:g}")
        return 1 if failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
