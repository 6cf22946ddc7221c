"""Artifact paths of a sweep's parent run and of its trial runs. Standard library only."""

from __future__ import annotations

import re

__all__ = ["SPEC_ARTIFACT", "LAUNCH_PLAN_ARTIFACT", "CONFIG_ARTIFACT", "SPLIT_ARTIFACT", "WEIGHTS_DIR",
           "MODEL_ARTIFACT", "CHECKPOINTS_DIR", "CLASS_COUNTS_DIR", "CLASS_COUNTS_FILE", "STATUS_ARTIFACT",
           "class_counts_artifact"]


SPEC_ARTIFACT = "spec.yaml"               # parent run: the sweep YAML
LAUNCH_PLAN_ARTIFACT = "launch_plan.json"  # parent run: the trials of the launch (what --resume continues)
CONFIG_ARTIFACT = "config.yaml"           # trial run: the resolved run config
SPLIT_ARTIFACT = "split.json"             # trial run: the labeled split
WEIGHTS_DIR = "weights"                   # trial run: best_model.pt, final_model.pt
MODEL_ARTIFACT = "model"                  # trial run: the final (else best) EMA weights as an MLflow pytorch model
CHECKPOINTS_DIR = "checkpoints"           # trial run: the final checkpoint and its .sha256
CLASS_COUNTS_DIR = "class_counts"         # trial run: one class-count file per evaluation
CLASS_COUNTS_FILE = re.compile(r"^step_(\d+)\.json$")
STATUS_ARTIFACT = "status.md"             # parent run: the sweep's status (orchestration.status), refreshed


def class_counts_artifact(step: int) -> str:
    """``class_counts/step_<step:08d>.json``: the pseudo- and complementary-label count matrices at ``step``."""
    return f"{CLASS_COUNTS_DIR}/step_{step:08d}.json"
