"""``--dry-run``: the trial plan, what is skipped as already finished, and what the sweep will cost — always.

No dataset is needed: a step costs the same on any pixels, so where the trials' device is here the step is timed on
generated data of the dataset's shape and class count (``mutexmatch.data.fake``) and the evaluation is scaled to
the real test-set size. Without that device here (a GPU sweep planned on a CPU head node) the committed
measurements are used — ``benchmarks/results/*.json`` (``{"device", "setups": [{"dataset", "backbone",
"batch_size", "mu", "step_s", "eval_s"}]}``), else the GPU table of ``experiments/README.md`` — and the output says
which device they are for. An estimate is never zero: what cannot be estimated is "unknown" with the reason.
It never creates an MLflow store just to look at it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mutexmatch.training import format_duration

from orchestration.trial import tracking
from orchestration.launch.cost import devices_per_trial, startup_line, trial_wall_s
from orchestration.launch.launch import SweepError, SweepOptions, SweepOutcome, reusable, select
from orchestration.spec.plan import SweepPlan
from orchestration.store.store import Store
from orchestration.launch.summary import format_hours

__all__ = ["dry_run", "committed_costs", "CommittedCosts", "Estimate", "missing_data_warning"]

_REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = _REPO / "benchmarks" / "results"
README_TABLE = _REPO / "experiments" / "README.md"
_README_HEADING = "**Cost on a GPU (GPU-hours).**"
_TABLE_HEADER = "| dataset | backbone | measured at B | s/step | s/evaluation |"
# The committed tables give seconds per step at this batch (B labeled + 2·μ·B unlabeled images).
_TABLE_B, _TABLE_MU = 64, 7
# fp32 parameter copies a trial stores: best + final weights and the final checkpoint (model, EMA, momentum)
# in MLflow; Tune keeps the last two checkpoints (num_to_keep=2) in its storage.
_MLFLOW_COPIES, _TUNE_COPIES = 5, 6


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"


def _norm(name: str) -> str:
    """``WRN-28-2`` / ``wrn28_2`` → ``wrn282``; ``CIFAR-10`` → ``cifar10``: README names meet config names."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass
class CommittedCosts:
    device: str                       # e.g. "NVIDIA H200"
    source: str                       # the file the figures come from
    setups: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # → (s/step, s/eval) at B=64

    @property
    def unit(self) -> str:
        return self.device.split()[-1] if self.device else "GPU"


def _shown(path: Path) -> str:
    return str(path.relative_to(_REPO)) if path.is_relative_to(_REPO) else str(path)


def _from_results(path: Path) -> CommittedCosts | None:
    try:
        data = json.loads(path.read_text())
        setups = {(_norm(s["dataset"]), _norm(s["backbone"])):
                  (float(s["step_s"]) * _TABLE_B * (1 + 2 * _TABLE_MU) / (s["batch_size"] * (1 + 2 * s["mu"])),
                   float(s["eval_s"])) for s in data["setups"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return CommittedCosts(str(data.get("device", "GPU")), _shown(path), setups)


def _from_readme(path: Path) -> CommittedCosts | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    start = next((i for i, line in enumerate(lines) if line.startswith(_README_HEADING)), None)
    if start is None:
        return None
    device = re.search(r"Measured on one (\S+ \S+)", " ".join(lines[start:start + 2]))
    costs = CommittedCosts(device.group(1) if device else "GPU", f"{_shown(path)} (GPU table)")
    head = next((i for i in range(start, len(lines)) if lines[i].strip() == _TABLE_HEADER), None)
    for line in lines[(head or len(lines)) + 2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            break
        try:
            costs.setups[(_norm(cells[0]), _norm(cells[1]))] = (float(cells[3].split()[0]), float(cells[4]))
        except ValueError:
            break
    return costs if costs.setups else None


def committed_costs() -> CommittedCosts | None:
    """The committed GPU measurements: the newest ``benchmarks/results/*.json`` with setups, else the README's."""
    for path in sorted(RESULTS_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        found = _from_results(path)
        if found is not None and found.setups:
            return found
    return _from_readme(README_TABLE)


def _step_images(cfg: Any) -> int:
    """Images one training step of ``cfg`` forwards: its algorithm's declared views (``Algorithm.step``; B (1 + 2 mu)
    for the default step, B (1 + 3 mu) for CoMatch's two strong views) and extra forwards. An imbalance algorithm's
    forward-only EMA-model images (DASO's B a step, CoSSL's (1 + tfe_u_ratio) B after its warm-up) are not counted:
    a few percent of a step that trains B (1 + 2 mu) images."""
    from mutexmatch.algorithms import ALGORITHMS

    alg = ALGORITHMS[cfg.algorithm.name]
    return alg.step.images_per_step(cfg.train.batch_size, cfg.train.mu, alg.uses_unlabeled)


@dataclass(frozen=True)
class Estimate:
    seconds: float | None             # one trial; None: unknown
    reason: str = ""                  # why unknown
    crashed: bool = False             # the measured step failed: the configuration cannot train (issue 33)


class _Estimator:
    """Seconds per trial, from committed figures or measured here on generated data (one measurement per
    setup); everything it could not estimate carries the reason."""

    def __init__(self, device: str | None, threads: int, tmp: Path) -> None:
        self.device, self.threads, self.tmp = device, threads, tmp
        self.committed = committed_costs() if device is None else None
        self.measured: dict[str, Any] = {}
        self.fake_roots: dict[str, Path] = {}

    def label(self) -> str:
        if self.device is not None:
            return f"measured here on {self.device} ({self.threads} thread(s)) on generated data of each dataset's " \
                   "shape, evaluation scaled to the real test set"
        if self.committed is None:
            return "no measurements committed (benchmarks/results/*.json, experiments/README.md)"
        return f"committed measurements for {self.committed.device} ({self.committed.source}), steps scaled " \
               f"linearly in images per step (the algorithm's views) from B={_TABLE_B}, mu={_TABLE_MU}"

    @property
    def unit(self) -> str:
        if self.device is not None:
            return "GPU" if self.device == "cuda" else "CPU"
        return self.committed.unit if self.committed else "GPU"

    def trial(self, raw: dict[str, Any], iterations: int, evaluations: int) -> Estimate:
        from mutexmatch.config import parse_config

        if self.device is None:
            if self.committed is None:
                return Estimate(None, "no committed GPU measurements and no GPU here")
            cfg = parse_config(raw)
            key = (_norm(cfg.data.dataset), _norm(cfg.model.backbone))
            if key not in self.committed.setups:
                return Estimate(None, f"{cfg.data.dataset}/{cfg.model.backbone} not among the committed "
                                "measurements")
            step_s, eval_s = self.committed.setups[key]
            scale = _step_images(cfg) / (_TABLE_B * (1 + 2 * _TABLE_MU))
            return Estimate(iterations * step_s * scale + evaluations * eval_s)
        return self._measured(raw, iterations, evaluations)

    def _measured(self, raw: dict[str, Any], iterations: int, evaluations: int) -> Estimate:
        from orchestration.launch.cost import _cost_key, measure_cost
        from orchestration.spec.sweepfile import deep_merge

        ck = _cost_key(deep_merge(raw, {"train": {"device": self.device}}))
        if ck not in self.measured:
            try:
                local, scale = self._local_data(raw)
            except Exception as e:  # noqa: BLE001 - no data here to measure on: the plan may still run elsewhere
                self.measured[ck] = Estimate(None, f"cannot measure ({_first_line(e)})")
            else:
                try:
                    cost = measure_cost(local, device=self.device, num_threads=self.threads)
                    self.measured[ck] = (cost.step_s, cost.eval_s * scale)
                except Exception as e:  # noqa: BLE001 - its step fails on generated data: so would every trial
                    self.measured[ck] = Estimate(None, f"cannot train ({_first_line(e)})", crashed=True)
        got = self.measured[ck]
        if isinstance(got, Estimate):
            return got
        return Estimate(iterations * got[0] + evaluations * got[1])

    def _local_data(self, raw: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """``raw`` pointed at generated data of its dataset, and the factor from that evaluation to the real one."""
        from mutexmatch.data.builtin import DATASETS
        from mutexmatch.data.fake import FakeSize, write_fake_root
        from orchestration.spec.sweepfile import deep_merge

        name = raw["data"]["dataset"]
        dataset = DATASETS.get(name)
        if dataset is None or dataset.fake_size is None:
            return raw, 1.0  # digits ships with scikit-learn; an image folder must be there
        if name not in self.fake_roots:
            size = FakeSize(dataset.fake_size.train_per_class, 2, dataset.fake_size.unlabeled)
            self.fake_roots[name] = write_fake_root(self.tmp / name, [name], sizes={name: size})
        classes = dataset.info.num_classes
        val = raw["data"].get("val_per_class", 0) * classes
        # The evaluation runs the EMA and the raw model over the real test set (and the validation images).
        scale = (2 * dataset.real_test_images + val) / (2 * 2 * classes + val)
        local = {"root": str(self.fake_roots[name]), "download": False}
        if raw["data"].get("imbalance") is not None:
            # A step's cost does not depend on which images are labeled (B labeled, muB unlabeled per step), and
            # the generated data has too few images per class for a long-tailed draw: a balanced one stands in.
            local.update(imbalance=None, num_labels=classes, split_rule="balanced")
        return deep_merge(raw, {"data": local}), scale


# ------------------------------------------------------------------------------------------------ the plan
@dataclass
class _Row:
    """One printed row: a cell's folds (or one trial with --per-trial), a search study, or a cell's refits."""
    cell: str
    folds: list[int]
    kind: str
    iterations: str
    trials: int
    per_trial: Estimate


def _skipped(plan: SweepPlan, opts: SweepOptions, uri: str, exp_name: str) -> tuple[set[str], dict[str, Any]]:
    """What a launch would skip (FINISHED in this experiment) and reuse (grid key → a FINISHED run of its config
    elsewhere in the store)."""
    skipped: set[str] = set()
    db = Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None
    if opts.force or (db is not None and not db.exists()):  # never create a store just to look at it
        return skipped, {}
    try:
        client = tracking.MlflowClient(uri)
        exp = client.get_experiment_by_name(exp_name)
        store = Store(client, exp.experiment_id if exp is not None else "")  # no experiment: store-wide reuse only
        if exp is not None:
            grid, phases, done = select(plan, store, force=opts.force)
            skipped = {t.key for t in plan.grid if t.key not in grid}
            skipped |= {f"search:{s.key}" for s in plan.searches if s.phase not in phases}
            skipped |= {r.key for r in plan.refits if r.key in done}
        if not opts.no_reuse:
            return skipped, reusable(plan, store, [t.key for t in plan.grid if t.key not in skipped])
    except Exception as e:  # noqa: BLE001 - the plan is still worth printing
        print(f"[dry-run] could not read MLflow at {uri}: {e}")
    return skipped, {}


def _reused_lines(plan: SweepPlan, reused: dict[str, Any], est: "_Estimator") -> list[str]:
    """The trials a launch would reuse instead of training, and the hours that saves."""
    if not reused:
        return []
    seconds = [est.trial(t.config, t.iterations, t.evaluations).seconds for t in plan.grid if t.key in reused]
    saved = sum(s for s in seconds if s is not None)  # one process's time: the device-hours of any world size
    share = plan.spec.resources.gpu if plan.spec.resources.gpu > 0 else 1.0
    lines = [f"\nreused (a FINISHED run of the same config elsewhere in this store; not trained again, --no-reuse "
             f"trains them): {len(reused)} trial(s), saving ≈ {format_hours(saved * share / 3600)} {est.unit}-hours"]
    lines += [f"  {key} ← run {run.info.run_id}" for key, run in sorted(reused.items())]
    return lines


def missing_data_warning(plan: SweepPlan) -> str | None:
    """One line naming the datasets not found under their data roots here and the commands that fetch them."""
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.data.load import dataset_dir

    configs = [t.config for t in plan.grid] + [s.config for s in plan.searches] + [r.config for r in plan.refits]
    missing: dict[str, set[str]] = {}
    for raw in configs:
        name, root = raw["data"].get("dataset", "digits"), raw["data"]["root"]
        if name in DATASETS and DATASETS[name].needs_files and not dataset_dir(name, root).exists():
            missing.setdefault(name, set()).add(root)
    if not missing:
        return None
    fetch = [f"python -m mutexmatch.datasets download {n} --root {r}" for n in sorted(missing)
             if DATASETS[n].downloadable for r in sorted(missing[n])]
    manual = [n for n in sorted(missing) if not DATASETS[n].downloadable]
    return (f"warning: no data here for {', '.join(sorted(missing))} (the plan needs none, the sweep does): "
            + " && ".join(fetch) + ("; " if fetch and manual else "")
            + (f"{', '.join(manual)}: no downloader, see docs/datasets.md" if manual else ""))


def _rows(plan: SweepPlan, skipped: set[str], est: _Estimator, per_trial: bool) -> list[_Row]:
    def cost(raw: dict[str, Any], iterations: int, evaluations: int) -> Estimate:
        """A trial's wall time: one process's, over ``resources.workers`` data-parallel ranks (cost.trial_wall_s)."""
        one = est.trial(raw, iterations, evaluations)
        return one if one.seconds is None else Estimate(trial_wall_s(one.seconds, plan.spec.resources.workers))

    rows: dict[tuple[str, str, str], _Row] = {}
    for t in plan.grid:
        if t.key in skipped:
            continue
        group = (t.cell.id, t.kind, str(t.fold) if per_trial else "")
        if group not in rows:
            rows[group] = _Row(t.cell.id, [], t.kind, str(t.iterations), 0,
                               cost(t.config, t.iterations, t.evaluations))
        rows[group].folds.append(t.fold)
        rows[group].trials += 1
    out = list(rows.values())
    for s in plan.searches:
        if f"search:{s.key}" not in skipped:
            out.append(_Row(s.cell.id, [s.fold], f"search ×{s.n_trials}", f"{s.n_trials}×{s.iterations}",
                            s.n_trials, cost(s.config, s.iterations, s.evaluations)))
    refits: dict[str, _Row] = {}
    for r in plan.refits:
        if r.key in skipped:
            continue
        key = r.tuned_cell.id + (f"/{r.fold}" if per_trial else "")
        if key not in refits:
            # the parameters exist only once the search is done
            refits[key] = _Row(r.tuned_cell.id, [], "refit (parameters chosen by search)", str(r.iterations), 0,
                               cost(r.config, r.iterations, r.evaluations))
        refits[key].folds.append(r.fold)
        refits[key].trials += 1
    return out + list(refits.values())


def _folds(folds: list[int]) -> str:
    if len(folds) > 2 and folds == list(range(folds[0], folds[-1] + 1)):
        return f"{folds[0]}-{folds[-1]}"
    return ",".join(map(str, folds))


def _format_rows(rows: list[_Row]) -> str:
    table = [("cell", "folds", "kind", "iterations", "per trial", "total")]
    for r in rows:
        s = r.per_trial.seconds
        table.append((r.cell, _folds(r.folds), r.kind, r.iterations,
                      format_duration(s) if s is not None else f"unknown: {r.per_trial.reason}",
                      format_duration(s * r.trials) if s is not None else "unknown"))
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _param_bytes(raw: dict[str, Any], cache: dict[tuple, int]) -> int:
    """fp32 bytes of the trial's model (parameters and buffers), counted on PyTorch's meta device (no memory)."""
    import torch

    from mutexmatch.config import parse_config
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.models import build_model

    cfg = parse_config(raw)
    info = DATASETS[cfg.data.dataset].info if cfg.data.dataset in DATASETS else None
    key = (cfg.model.backbone, info.num_classes if info else 10, info.channels if info else 3,
           cfg.data.image_size or (info.image_size if info else 32))
    if key not in cache:
        with torch.device("meta"):
            model = build_model(key[0], num_classes=key[1], in_channels=key[2], image_size=key[3])
        cache[key] = 4 * sum(t.numel() for t in [*model.parameters(), *model.buffers()])
    return cache[key]


def _disk_line(plan: SweepPlan, skipped: set[str]) -> str:
    cache: dict[tuple, int] = {}
    try:
        total = sum(_param_bytes(t.config, cache) for t in plan.grid if t.key not in skipped)
        total += sum(_param_bytes(s.config, cache) * s.n_trials for s in plan.searches
                     if f"search:{s.key}" not in skipped)
        total += sum(_param_bytes(r.config, cache) for r in plan.refits)
    except Exception as e:  # noqa: BLE001 - the rest of the plan stands
        return f"disk: unknown ({type(e).__name__}: {e})"
    return (f"disk: ~{_fmt_bytes(total * _MLFLOW_COPIES)} of MLflow artifacts (best and final weights, final "
            f"checkpoint) and up to ~{_fmt_bytes(total * _TUNE_COPIES)} in the Tune storage (two checkpoints per "
            "trial), from the models' parameter counts; metrics and class counts are small")


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def _slots(plan: SweepPlan, opts: SweepOptions, device: str | None) -> tuple[int, str]:
    """Trials that run at once, and on what: ``--gpus N`` (default: the GPUs here, else 1) with the YAML's
    packing (``resources.gpu`` per trial), or this machine's CPUs for a CPU sweep."""
    import torch

    res = plan.spec.resources
    if res.gpu > 0:
        gpus = opts.gpus or torch.cuda.device_count() or 1
        slots, where = max(1, int(gpus / (res.gpu * res.workers))), f"{gpus} GPU(s) at gpu={res.gpu:g} per trial"
        where += f" × {res.workers} workers" if res.workers > 1 else ""
        if not opts.gpus and not torch.cuda.device_count():
            where += " (no GPU here; --gpus N for a cluster)"
    else:
        slots = max(1, int((os.cpu_count() or 1) // (res.cpu * res.workers)))
        where = f"this machine's {os.cpu_count()} CPU(s)"
    if opts.max_concurrent:
        slots = min(slots, opts.max_concurrent)
    return slots, f"{slots} concurrent trial(s) on {where}"


def plan_hours(plan: SweepPlan, rows: list[_Row]) -> float:
    """Accelerator-hours (CPU-hours for a CPU sweep) of the estimated rows: trial time × the share of a device a
    trial holds (the figure the dry run prints; experiments/paper_cost.py sums it over the paper's YAMLs)."""
    share = devices_per_trial(plan.spec.resources)
    return sum(r.per_trial.seconds * r.trials for r in rows if r.per_trial.seconds is not None) * share / 3600


def _totals(plan: SweepPlan, rows: list[_Row], est: _Estimator, opts: SweepOptions) -> list[str]:
    known = [r for r in rows if r.per_trial.seconds is not None]
    unknown = sum(r.trials for r in rows if r.per_trial.seconds is None)
    trial_s = sum(r.per_trial.seconds * r.trials for r in known)  # type: ignore[operator]
    res = plan.spec.resources
    share = res.gpu if res.gpu > 0 else 1.0
    n = sum(r.trials for r in rows)
    if not n:
        return ["nothing to run: every trial is already FINISHED (--force runs them again)"]
    if not known:
        return [f"estimated cost: unknown for all {n} trial(s) (see the rows above)"]
    slots, where = _slots(plan, opts, est.device)
    wall = max(trial_s / slots, max(r.per_trial.seconds for r in known))  # type: ignore[type-var]
    partial = f" for {n - unknown} of {n} trials ({unknown} unknown, see above)" if unknown else f" for {n} trials"
    return [f"estimated cost{partial}: {format_hours(plan_hours(plan, rows))} {est.unit}-hours"
            + (f" (a trial holds {share:g} of a GPU; shared GPUs assumed as fast as one trial alone)"
               if share != 1 else "")
            + (f" (a trial holds {res.workers} workers: its wall time is one process's / {res.workers}, ideal "
               "scaling; the replicated augmentation and the ranks' communication are not counted)"
               if res.workers > 1 else ""),
            f"wall clock: ≈ {format_duration(wall)} at {where}"
            + ("; search trials counted at full length (ASHA stops some early)" if plan.searches else ""),
            startup_line()]


def dry_run(plan: SweepPlan, opts: SweepOptions, uri: str, storage: str, exp_name: str) -> SweepOutcome:
    import torch

    skipped, reused = _skipped(plan, opts, uri, exp_name)
    res = plan.spec.resources
    device = "cpu" if res.gpu == 0 else "cuda" if torch.cuda.is_available() else None
    print(f"Sweep {plan.spec.name!r} (spec hash {plan.spec_hash}): {len(plan.grid)} grid trials, "
          f"{len(plan.searches)} search studies ({sum(s.n_trials for s in plan.searches)} trials), "
          f"{len(plan.refits)} refit trials" + (" [smoke]" if plan.smoke else ""))
    print(f"tracking URI: {uri}\nstorage: {storage}")
    warning = missing_data_warning(plan)
    if warning:
        print(warning)
    with tempfile.TemporaryDirectory(prefix="mm_dryrun_") as tmp:
        est = _Estimator(device, max(1, round(res.cpu)), Path(tmp))
        rows = _rows(plan, skipped | set(reused), est, opts.per_trial)
        print(f"cost figures: {est.label()}\n")
        print(_format_rows(rows))
        for line in _reused_lines(plan, reused, est):
            print(line)
    if skipped:
        print(f"\nskipped (already FINISHED with the same config): {len(skipped)}")
    print()
    for line in _totals(plan, rows, est, opts) + [_disk_line(plan, skipped | set(reused))]:
        print(line)
    crashed = [r for r in rows if r.per_trial.crashed]
    if crashed:  # a launch would start these, retry each and fail them all: the plan is refused (exit 2)
        raise SweepError(f"{len(crashed)} row(s) of the plan cannot train: their step failed on generated data, "
                         "as every launched trial would; fix their settings\n"
                         + "\n".join(f"cell {r.cell} ({r.kind}): {r.per_trial.reason}" for r in crashed))
    return SweepOutcome(status="dry-run", skipped=sorted(skipped | set(reused)))
