"""Trial models that stores made before issue 40 keep in MLflow's Default experiment, moved to their runs'.

MLflow 3 keeps a logged model in an experiment; ``runs:/<run>/model`` looks for it in the run's experiment. Before
issue 40 every trial's model was logged into the Default experiment (``Model.log`` takes the active one), so in those
stores ``runs:/<run>/model`` fails and the run page says "No models found". MLflow has no call that moves a logged
model, so for a SQLite store the model's rows (the model, its tags, params and metrics: each records the experiment)
are moved in the database; its files stay where they are (its recorded location). Only models whose source run is a
trial run of this project (tag ``mutexmatch.role``) in another experiment are moved."""

from __future__ import annotations

import sqlite3

from orchestration import contract as C

__all__ = ["adopt_trial_models"]

DEFAULT_ID = "0"           # MLflow's Default experiment, made with the store where its maker's cwd was
_MODEL_TABLES = ("logged_model_tags", "logged_model_params", "logged_model_metrics")


def adopt_trial_models(db: sqlite3.Connection) -> int:
    """Move every logged model of a project run from the Default experiment to its run's; the number moved."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "logged_models" not in tables:
        return 0
    moves = db.execute(
        "SELECT m.model_id, r.experiment_id FROM logged_models m JOIN runs r ON r.run_uuid = m.source_run_id "
        "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
        "WHERE m.experiment_id = ? AND r.experiment_id != ?", (C.ROLE, DEFAULT_ID, DEFAULT_ID)).fetchall()
    for model_id, experiment_id in moves:
        for table in ("logged_models", *(t for t in _MODEL_TABLES if t in tables)):
            db.execute(f"UPDATE {table} SET experiment_id = ? WHERE model_id = ?", (experiment_id, model_id))
    return len(moves)
