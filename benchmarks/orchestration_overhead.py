"""Overhead of orchestration: the same trial through the trainer CLI and through Ray Tune + MLflow.

    python benchmarks/orchestration_overhead.py [--iterations 1000] [--eval-interval 100] [--repeats 2]

The same digits trial (small_cnn, FixMatch, B=16, μ=4, one CPU thread — one quickstart trial) is run end to end,
alternately, as

- ``python -m mutexmatch.train --config trial.yaml`` (Python start, imports, data, training, evaluations), and
- ``python -m orchestration.sweep spec.yaml``, a one-cell, one-fold sweep with the same resolved config (adds a
  local Ray start, the MLflow store and experiment, a Tune trial in a fresh worker process, the MLflow run with
  params, metrics, class counts and artifacts at every evaluation, and a Tune checkpoint at every evaluation).

Wall times on a shared 2-core machine are noisy (other processes, OpenMP spin-waits), so the trial also measures
its own orchestration work directly (tags ``mutexmatch.overhead.*`` on its MLflow run: bookkeeping before training
and time inside the trainer callbacks). Reported:

- end to end: median wall times of both commands and their ratio;
- per trial: orchestration seconds inside the trial / training seconds — what grows with the trial;
- per launch: the fixed cost (Ray start, driver and worker start-up, store creation), paid once per sweep (and
  about once per trial when a worker is not reused), and the overhead extrapolated to longer trials.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mutexmatch.yamlfile import dump_yaml  # noqa: E402
from orchestration import contract as C  # noqa: E402

TRIAL = {
    "data": {"dataset": "digits", "num_labels": 20, "fold": 0},
    "model": {"backbone": "small_cnn"},
    "algorithm": {"name": "fixmatch"},
    "optim": {"lr": 0.05},
    "train": {"batch_size": 16, "mu": 4, "ema": 0.99, "eval_batch_size": 512, "num_threads": 1, "progress": False},
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.pop("MLFLOW_TRACKING_URI", None)  # the sweep would honour it; trial_tags reads the project's mlflow.db
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
                "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "PYTHONPATH": str(REPO)})
    return env


def _timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}")
    return wall


def run_cli(work: Path, iterations: int, eval_interval: int, data_root: Path, tag: str) -> float:
    cfg = {**TRIAL, "data": {**TRIAL["data"], "root": str(data_root)},
           "train": {**TRIAL["train"], "iterations": iterations, "eval_interval": eval_interval},
           "output_dir": str(work / f"cli_{tag}")}
    path = work / f"trial_{tag}.yaml"
    path.write_text(dump_yaml(cfg))
    return _timed([sys.executable, "-m", "mutexmatch.train", "--config", str(path)], work)


def run_tune(work: Path, iterations: int, eval_interval: int, data_root: Path, tag: str) -> float:
    base = {k: v for k, v in TRIAL.items() if k != "algorithm"}
    base = {**base, "data": {k: v for k, v in base["data"].items() if k != "fold"} | {"root": str(data_root)},
            "train": {k: v for k, v in base["train"].items() if k != "progress"}
            | {"iterations": iterations, "eval_interval": eval_interval}}
    spec = {"name": f"overhead_{tag}", "base": base, "folds": [0],
            "axes": {"method": {"fixmatch": {"algorithm": {"name": "fixmatch"}}}}, "resources": {"cpu": 1, "gpu": 0}}
    project = work / f"tune_{tag}"
    project.mkdir()
    (project / "spec.yaml").write_text(dump_yaml(spec))
    return _timed([sys.executable, "-m", "orchestration.sweep", "spec.yaml"], project)


def trial_tags(work: Path, tag: str) -> dict[str, float]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{work / f'tune_{tag}' / 'mlflow.db'}")
    exp = client.get_experiment_by_name(f"overhead_{tag}")
    run = client.search_runs([exp.experiment_id], f"tags.`{C.ROLE}` = '{C.ROLE_TRIAL}'")[0]
    t = run.data.tags
    return {k: float(t[C.overhead_tag(k)]) for k in ("setup_s", "hooks_s", "wall_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--eval-interval", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--extrapolate", type=int, nargs="+", default=[10_000, 100_000],
                    help="trial lengths (steps, same evaluation interval) to extrapolate the overhead to")
    args = ap.parse_args()
    it, ev = args.iterations, args.eval_interval
    walls: dict[str, list[float]] = {"cli": [], "tune": []}
    inside: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="mm_overhead_") as tmp:
        work = Path(tmp)
        data_root = work / "data"
        run_cli(work, 2, 1, data_root, "warmup")  # decode the digits cache and warm the page cache once
        for rep in range(args.repeats):
            order = ("cli", "tune") if rep % 2 == 0 else ("tune", "cli")
            for name in order:
                tag = f"{name}_{rep}"
                wall = (run_cli if name == "cli" else run_tune)(work, it, ev, data_root, tag)
                walls[name].append(wall)
                if name == "tune":
                    inside.append(trial_tags(work, tag))
                print(f"  {name:4s} repeat {rep}: {wall:7.1f} s", flush=True)
    a, b = statistics.median(walls["cli"]), statistics.median(walls["tune"])
    setup = statistics.median(x["setup_s"] for x in inside)
    hooks = statistics.median(x["hooks_s"] for x in inside)
    trial_wall = statistics.median(x["wall_s"] for x in inside)
    training = trial_wall - setup - hooks
    evals = -(-it // ev)
    fixed = b - trial_wall
    print(f"\ntrial: digits small_cnn FixMatch, T={it} steps, evaluation (+ checkpoint) every {ev} steps "
          f"({evals} evaluations), {args.repeats} repeat(s), medians")
    print(f"end to end: trainer CLI {a:.1f} s, Tune+MLflow {b:.1f} s → ratio {b / a:.3f} "
          f"({100 * (b - a) / a:+.1f}%; includes Ray start and noise)")
    print(f"inside the trial: training {training:.1f} s, orchestration {setup + hooks:.2f} s (setup {setup:.2f} s, "
          f"callbacks {hooks:.2f} s = {1000 * hooks / evals:.0f} ms per evaluation) → "
          f"{100 * (setup + hooks) / training:.2f}% of the training time")
    print(f"fixed per launch (Ray start, driver + worker start-up, MLflow store): {fixed:.1f} s")
    step_s = training / it
    for t in args.extrapolate:
        train_t = step_s * t
        orch_t = setup + hooks / evals * -(-t // ev)
        print(f"T={t}: inside-trial overhead {100 * orch_t / train_t:.2f}%, with the fixed launch cost paid once "
              f"{100 * (orch_t + fixed) / train_t:.2f}%")


if __name__ == "__main__":
    main()
