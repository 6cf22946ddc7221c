"""The seam between the trainer and whatever watches it (Ray Tune, MLflow, a progress bar, a test).

``mutexmatch`` imports neither ray nor mlflow: orchestration plugs them in by implementing :class:`Callback`.
Every hook receives a typed event (:class:`StartEvent`, :class:`EvalEvent`, :class:`RunSummary`), never the trainer:
what a watcher may rely on is exactly what the events carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mutexmatch.training.runfolder import RunFolder

__all__ = ["Callback", "StartEvent", "EvalEvent", "RunSummary", "TEST_CONFUSION"]

TEST_CONFUSION = "test_confusion"   # EvalEvent.class_counts: the EMA model's test confusion matrix


@dataclass(frozen=True)
class StartEvent:
    """The run about to train: the step it starts at (0, or the resumed checkpoint's), its folder and identity."""

    step: int
    iterations: int
    run: RunFolder
    config_hash: str
    split_digest: str
    resumed_from: Path | None = None


@dataclass
class EvalEvent:
    """One evaluation: scalar metrics, the checkpoint written for this step (if any) and the class-count matrices."""

    step: int
    metrics: dict[str, float]
    checkpoint: Path | None = None
    # "pseudo_label_counts"[true, predicted] of the TPC pseudo-labels and "comp_label_counts"[true, predicted] of
    # the TNC complementary labels over the unlabeled samples seen since the previous evaluation (paper, Fig. dis);
    # TEST_CONFUSION[true, predicted] of the EMA model's test predictions (docs/longtail.md, "Metrics").
    class_counts: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class RunSummary:
    step: int
    metrics: dict[str, float]
    output_dir: Path
    final_checkpoint: Path | None
    best_weights: Path | None
    final_weights: Path | None
    extra: dict[str, Any] = field(default_factory=dict)


class Callback:
    """Override what you need. ``on_eval`` may return True to stop the run after this step (the checkpoint of
    this step has then already been written)."""

    def on_start(self, event: StartEvent) -> None:  # noqa: D401 - hook
        pass

    def on_eval(self, event: EvalEvent) -> bool | None:
        return None

    def on_end(self, summary: RunSummary) -> None:
        pass
