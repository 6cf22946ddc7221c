"""A real MLflow SQLite store in the documented layout, with known metric values, shared by the reports tests.

Sweep ``rep`` (YAML below): method {supervised, fixmatch, mutexmatch} × setting {d20, d40} × k {k1, k5}, five folds.
Each trial's ``test/acc`` history over steps 10, 20, 30, 40 is ``[v−3, v, v−2, v−1]`` (in %), so the protocols
differ: best = v, final = v − 1, median20 = v − 1.5. The k5 values v (in %) per fold:

=========== =================== ==============================================================
cell        folds 0..4          notes
=========== =================== ==============================================================
supervised  d20: 80 81 82 83 84 d40: no run (excluded in the YAML)
fixmatch    d20: 88 90 92 94 96 fold 4 has a different split digest (no pair);
                                fold 0 also has an older FINISHED run at 50 (ignored)
fixmatch    d40: 94 95 99 — —   fold 3 FAILED, fold 4 missing
mutexmatch  d20: 91 92 93 94 95 class_counts at steps 10 and 40 (fixmatch d20: step 40, no TNC matrix)
mutexmatch  d40: 97.5 — — — —
=========== =================== ==============================================================

k1: mutexmatch d20 folds 0, 1 at 85, 87; fixmatch d20 folds 0, 1 at 86, 86. Plus runs that must be ignored: a
``smoke`` trial, a ``search`` trial, a grid run of fold 7 (not in ``folds``) and the sweep's parent run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
import yaml

from orchestration import contract as C

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

SPEC = {
    "name": "rep",
    "description": "reports test sweep",
    "base": {"data": {"dataset": "digits", "split_rule": "official"}},
    "folds": [0, 1, 2, 3, 4],
    "axes": {
        "method": {"supervised": {"algorithm": {"name": "supervised"}},
                   "fixmatch": {"algorithm": {"name": "fixmatch"}},
                   "mutexmatch": {"algorithm": {"name": "mutexmatch"}}},
        "setting": {"d20": {"data": {"num_labels": 20}}, "d40": {"data": {"num_labels": 40}}},
        "k": {"k1": {"algorithm": {"k": 1}}, "k5": {"algorithm": {"k": 5}}},
    },
    "exclude": [{"method": "supervised", "setting": "d40"}],
    "tables": [{
        "id": "main",
        "caption": "Accuracy (%) on digits",
        "rows": "method",
        "columns": "setting",
        "where": {"k": "k5"},
        "row_labels": {"supervised": "Supervised", "fixmatch": "FixMatch", "mutexmatch": "MutexMatch"},
        "column_labels": {"d20": "20 labels", "d40": "40 labels"},
        "metric": "test/acc",
        "protocol": "best",
        "published": {"mutexmatch": {"d20": "93.22±2.52"}, "fixmatch": {"d40": 89.18}},
        "paired": {"a": "mutexmatch", "b": "fixmatch"},
    }],
    "figures": [
        {"type": "curves", "id": "curves", "cells": [{"k": "k5"}]},
        {"type": "heatmap", "id": "dis", "cell": {"method": "mutexmatch", "setting": "d20", "k": "k5"}},
        {"type": "sensitivity", "id": "k-sens", "axis": "k", "param": "algorithm.k", "series": "method",
         "where": {"setting": "d20"}},
    ],
}

K5 = {
    ("supervised", "d20"): {0: 80, 1: 81, 2: 82, 3: 83, 4: 84},
    ("fixmatch", "d20"): {0: 88, 1: 90, 2: 92, 3: 94, 4: 96},
    ("fixmatch", "d40"): {0: 94, 1: 95, 2: 99},
    ("mutexmatch", "d20"): {0: 91, 1: 92, 2: 93, 3: 94, 4: 95},
    ("mutexmatch", "d40"): {0: 97.5},
}
K1 = {("mutexmatch", "d20"): {0: 85, 1: 87}, ("fixmatch", "d20"): {0: 86, 1: 86}}
STEPS = [10, 20, 30, 40]
OFFSETS = [-3.0, 0.0, -2.0, -1.0]      # test/acc history = v + offset (in %): best v, final v-1, median20 v-1.5
NUM_CLASSES = 3


def counts(step: int, fold: int) -> dict:
    """Deterministic class-count matrices for the mutexmatch/d20/k5 runs (rows = true class)."""
    pseudo = [[10 + fold, 1, 0], [2, 8, 1], [0, 3, 9]] if step == 40 else [[1, 1, 1]] * 3
    comp = [[0, 4, 6], [5, 0, 5], [7, 3, 0]] if step == 40 else [[1, 1, 1]] * 3
    return {"step": step, "pseudo_label_counts": pseudo, "comp_label_counts": comp}


def cell_id(cell: dict[str, str]) -> str:
    return C.cell_id((a, cell[a]) for a in SPEC["axes"])


@dataclass(frozen=True)
class Store:
    uri: str
    spec_path: Path
    run_ids: dict[tuple[str, str, str, int], str]   # (method, setting, k, fold) → run id of the run that counts
    ignored: dict[str, str]                          # what → run id of a run the report must ignore
    steps: tuple[int, ...] = tuple(STEPS)            # the evaluation steps every trial logged


def _log_trial(client, exp_id: str, parent: str, method: str, setting: str, k: str, fold: int, value: float,
               *, status: str = "FINISHED", kind: str = "grid", digest: str | None = None,
               start: int | None = None) -> str:
    from mlflow.entities import Metric, Param

    cell = {"method": method, "setting": setting, "k": k}
    cid = cell_id(cell)
    tags = C.trial_tags(parent_run_id=parent, kind=kind, cell_levels=cell.items(), cell_id=cid, fold=fold,
                        variant=method, config_hash=f"h{method}{setting}{k}{fold}", commit="abc123",
                        trial_id=f"t-{cid}-{fold}", launch_id="l1")
    tags[C.SPLIT_DIGEST] = digest or f"split-{setting}-{fold}"
    run = client.create_run(exp_id, start_time=start or int(time.time() * 1000), tags=tags,
                            run_name=C.trial_key(cid, fold))
    rid = run.info.run_id
    ts = int(time.time() * 1000)
    metrics = [Metric(C.TEST_ACC, (value + off) / 100.0, ts + i, s) for i, (s, off) in enumerate(zip(STEPS, OFFSETS))]
    metrics += [Metric(C.PL_ACC, min(1.0, 0.5 + 0.1 * i + 0.01 * fold), ts + i, s) for i, s in enumerate(STEPS)]
    # pseudo-label accuracy is NaN at an evaluation with no confident sample: MLflow stores is_nan = 1
    metrics += [Metric("train/nan_metric", float("nan") if s == 20 else 0.5, ts + i, s) for i, s in enumerate(STEPS)]
    params = [Param("data.split_rule", "official"), Param("data.fold", str(fold)),
              Param("data.num_labels", setting[1:]), Param("algorithm.name", method),
              Param("algorithm.k", k[1:])]
    client.log_batch(rid, metrics=metrics, params=params)
    if (method, setting, k) == ("mutexmatch", "d20", "k5") and kind == "grid":
        for step in (10, 40):
            client.log_dict(rid, counts(step, fold), C.class_counts_artifact(step))
    if (method, setting, k) == ("fixmatch", "d20", "k5") and kind == "grid":
        # FixMatch has no TNC: its files hold pseudo-label counts only
        client.log_dict(rid, {"step": 40, "pseudo_label_counts": counts(40, fold)["pseudo_label_counts"]},
                        C.class_counts_artifact(40))
    client.set_terminated(rid, status=status)
    return rid


@pytest.fixture(scope="session")
def scratch_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """``make(prefix)``: a new folder for an MLflow store, on tmpfs where there is one; all removed at the end.

    MLflow creates a fresh SQLite schema through ~60 Alembic migrations, each committed with an fsync: on tmpfs
    (/dev/shm) that takes 3 s instead of 7 s here. Any folder works; tmpfs only makes the session faster."""
    shm = Path("/dev/shm")
    made: list[Path] = []

    def make(prefix: str) -> Path:
        fast = shm.is_dir() and os.access(shm, os.W_OK)
        made.append(Path(tempfile.mkdtemp(prefix=prefix, dir=shm)) if fast else tmp_path_factory.mktemp(prefix))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def store(scratch_dirs: Callable[[str], Path]) -> Iterator[Store]:
    from mlflow import MlflowClient

    root = scratch_dirs("reports-test-")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("rep", artifact_location=(root / "artifacts").as_uri())
    parent = client.create_run(exp_id, tags={C.ROLE: C.ROLE_SWEEP, C.SPEC_HASH: "s",
                                             C.SPEC_PATH: "experiments/rep.yaml", C.GIT_COMMIT: "abc123"},
                               run_name="sweep").info.run_id
    spec_path = root / "rep.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC, sort_keys=False, allow_unicode=True))
    client.log_artifact(parent, str(spec_path))
    ids: dict[tuple[str, str, str, int], str] = {}
    ignored: dict[str, str] = {}
    t0 = int(time.time() * 1000)
    # The older duplicate first (earlier start time): the newer fixmatch/d20/k5 fold-0 run must win.
    ignored["duplicate"] = _log_trial(client, exp_id, parent, "fixmatch", "d20", "k5", 0, 50.0, start=t0 - 60_000)
    for table, k in ((K5, "k5"), (K1, "k1")):
        for (method, setting), folds in table.items():
            for fold, value in folds.items():
                digest = "changed-split" if (method, setting, k, fold) == ("fixmatch", "d20", "k5", 4) else None
                ids[(method, setting, k, fold)] = _log_trial(client, exp_id, parent, method, setting, k, fold,
                                                             value, digest=digest, start=t0)
    ignored["failed"] = _log_trial(client, exp_id, parent, "fixmatch", "d40", "k5", 3, 10.0, status="FAILED")
    ignored["smoke"] = _log_trial(client, exp_id, parent, "supervised", "d40", "k5", 0, 1.0, kind="smoke")
    ignored["search"] = _log_trial(client, exp_id, parent, "mutexmatch", "d40", "k5", 1, 2.0, kind="search")
    ignored["fold7"] = _log_trial(client, exp_id, parent, "supervised", "d40", "k5", 7, 3.0)
    client.set_terminated(parent)
    yield Store(uri=uri, spec_path=spec_path, run_ids=ids, ignored=ignored)
    shutil.rmtree(root, ignore_errors=True)


QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"
# Test accuracy (%) per method at the first and last of ten evaluations: panels whose own y-ranges would differ
QUICKSTART_RANGES = {"supervised": (10.0, 80.0), "fixmatch": (30.0, 100.0), "mutexmatch": (20.0, 99.0)}


@dataclass(frozen=True)
class QuickstartStore:
    uri: str
    spec_path: Path
    steps: tuple[int, ...]


@pytest.fixture(scope="session")
def quickstart_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickstartStore]:
    """experiments/quickstart.yaml as the sweep would leave it: every grid cell × fold FINISHED, ten evaluations."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    spec = yaml.safe_load(QUICKSTART.read_text())
    root = Path(tempfile.mkdtemp(prefix="reports-quickstart-"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment(spec["name"], artifact_location=(root / "artifacts").as_uri())
    parent = client.create_run(exp_id, tags={C.ROLE: C.ROLE_SWEEP}, run_name="sweep").info.run_id
    every = spec["base"]["train"]["eval_interval"]
    steps = tuple(range(every, spec["base"]["train"]["iterations"] + 1, every))
    ts = int(time.time() * 1000)
    searched = {c.get("method") for c in spec["search"]["cells"]}   # their refit runs fill the tuned rows
    cells = [(C.KIND_GRID, {"method": m, "setting": s}) for m in spec["axes"]["method"]
             for s in spec["axes"]["setting"]]
    cells += [(C.KIND_REFIT, dict(C.tuned_levels(c.items()))) for _, c in cells if c["method"] in searched]
    for kind, levels in cells:
        method = levels["method"]
        cid = C.cell_id(levels.items())
        for fold in spec["folds"]:
            tags = C.trial_tags(parent_run_id=parent, kind=kind, cell_levels=levels.items(), cell_id=cid,
                                fold=fold, variant=method, config_hash=f"h{cid}{fold}", commit="abc",
                                trial_id=f"t{cid}{fold}", launch_id="l")
            rid = client.create_run(exp_id, tags={**tags, C.SPLIT_DIGEST: f"s{fold}"},
                                    run_name=C.trial_key(cid, fold)).info.run_id
            low, high = QUICKSTART_RANGES[method]
            acc = np.linspace(low, high, len(steps)) - fold
            client.log_batch(rid, metrics=[Metric(m, float(v) / 100.0, ts + i, s)
                                           for i, (s, a) in enumerate(zip(steps, acc))
                                           for m, v in ((C.TEST_ACC, a), (C.PL_ACC, min(100.0, a + 5)))])
            client.set_terminated(rid)
    client.set_terminated(parent)
    spec_path = root / "quickstart.yaml"
    shutil.copy(QUICKSTART, spec_path)
    yield QuickstartStore(uri=uri, spec_path=spec_path, steps=steps)
    shutil.rmtree(root, ignore_errors=True)
