"""End-to-end on the embedded `digits` dataset: semi-supervised training beats supervised-only on one fold.

Deterministic (CPU, one thread, fixed seeds); about a minute per method on 2 cores. The five-fold figures for the
closing note come from benchmarks/digits_folds.py with the full-length config.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mutexmatch.config import load_config
from mutexmatch.training import Trainer

STEPS = 500
CONFIG = Path(__file__).resolve().parents[3] / "experiments" / "runs" / "digits.yaml"


def _final_acc(tmp_path, name: str, *sets: str) -> float:
    cfg = load_config(CONFIG, [
        f"train.iterations={STEPS}", "train.eval_interval=250", "train.progress=false", "train.num_threads=1",
        "data.fold=0", f"data.root={tmp_path / 'data'}", f"output_dir={tmp_path / name}", *sets])
    return Trainer(cfg).fit().metrics["test/acc"]


@pytest.mark.slow
def test_ssl_beats_supervised_on_digits_20_labels(tmp_path):
    sup = _final_acc(tmp_path, "sup", "algorithm.name=supervised")
    fix = _final_acc(tmp_path, "fix", "algorithm.name=fixmatch")
    mutex = _final_acc(tmp_path, "mutex", "algorithm.name=mutexmatch")
    print(f"supervised {sup:.4f} fixmatch {fix:.4f} mutexmatch {mutex:.4f}")
    assert fix > sup + 0.03
    assert mutex > sup + 0.03
