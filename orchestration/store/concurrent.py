"""Writes that another process may make at the same moment (issue 40 item 2). MLflow's SQL store checks whether a
row exists, then inserts it: two trials (or two drivers of one tracking server) writing the same dataset input,
experiment or tag for the first time both see none, and the second insert fails on the table's unique constraint
(``UNIQUE constraint failed: datasets.experiment_id, datasets.name, datasets.digest`` was a trial's 147-line
traceback, and its silent retry). The row the other writer made is what this one wanted: the write is repeated,
and its check now finds the row."""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from orchestration.runtime.env import apply_closed_network_env

apply_closed_network_env()

from mlflow import MlflowClient  # noqa: E402  (telemetry must be off before mlflow is imported)
from mlflow.exceptions import MlflowException  # noqa: E402

__all__ = ["collided", "idempotent", "create_or_get_experiment"]

T = TypeVar("T")

TRIES = 5
# what the store says when another writer inserted the same row first (SQLite, PostgreSQL, MySQL wording; MLflow's
# own code for the experiments it refuses to create twice)
_COLLISIONS = ("UNIQUE constraint failed", "duplicate key value violates unique constraint", "Duplicate entry",
               "IntegrityError")


def collided(error: BaseException) -> bool:
    """Whether ``error`` is a write that lost a check-then-insert race to another writer."""
    if isinstance(error, MlflowException) and error.error_code == "RESOURCE_ALREADY_EXISTS":
        return True
    text = str(error)
    return any(c in text for c in _COLLISIONS) or type(error).__name__ == "IntegrityError"


def idempotent(write: Callable[[], T], tries: int = TRIES) -> T:
    """``write()``, repeated (after a short random pause) while it collides with another writer's identical
    insert: the repeat finds the other's row and uses it. Any other error, or the last collision, is raised."""
    for attempt in range(tries):
        try:
            return write()
        except Exception as e:
            if attempt == tries - 1 or not collided(e):
                raise
            time.sleep(random.uniform(0.01, 0.05) * 2 ** attempt)
    raise AssertionError("unreachable")


def create_or_get_experiment(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    """The id of experiment ``name``, created unless it exists; one that another process creates at the same
    moment is the one wanted, not an error."""
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException as e:
        if not collided(e):
            raise
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise MlflowException(f"experiment {name!r} was reported created by another process but cannot be found")
    return exp.experiment_id
