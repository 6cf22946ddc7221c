"""Whose an Optuna study is: a search study belongs to the MLflow experiment whose runs are its trials (issue 33
item 5). Standard library only.

The studies live beside the store (:func:`orchestration.contract.optuna_storage_url`: by default ``optuna.db`` in the
SQLite store's folder), so a fresh store in the same folder found the other store's study under the same name
(:func:`orchestration.contract.study_name`), continued it (TPE warm-started by trials it never ran) and its report
listed trials with no run. Now a study carries its store's identity as a user attribute (:data:`STUDY_OWNER`: the
experiment's id and creation time, which a copied store keeps and a new store in the same folder does not share),
and a store whose name is taken by another store's study gets a study of its own,
``<name>@<identity>`` (:func:`choose_study`: the sweep claims it, the report reads the same choice). A study from
before the attribute belongs to the store that already ran it (its search runs exist there) and is claimed by it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["STUDY_OWNER", "ABSENT", "store_identity", "choose_study", "study_owner"]

STUDY_OWNER = "mutexmatch.store"  # the Optuna study user attribute: store_identity() of the store it belongs to
ABSENT = object()                  # what an owner lookup returns for a study that does not exist


def store_identity(experiment: Any) -> str:
    """The identity of an MLflow experiment (an ``mlflow.entities.Experiment``): ``<id>@<creation time, ms>``."""
    return f"{experiment.experiment_id}@{experiment.creation_time}"


def choose_study(name: str, owner: str, owner_of: Callable[[str], Any], ran_here: bool) -> tuple[str, bool]:
    """The study this store uses for the study name ``name``, and whether the sweep must claim it (create it if
    missing and set :data:`STUDY_OWNER` to ``owner``). ``owner_of(study)`` is the attribute of a study in the storage
    (None: a study from before it; :data:`ABSENT`: no such study); ``ran_here``: this store has search runs of it.

    - a study of its own (``<name>@<owner>``) already made for this store: that one;
    - ``name`` missing: ``name``, claimed; ``name`` this store's: ``name``;
    - ``name`` from before the attribute, and this store ran it: ``name``, claimed (a store launched by earlier code
      keeps its study);
    - otherwise (another store's, or an old one this store never ran): ``<name>@<owner>``, claimed."""
    own = f"{name}@{owner}"
    if owner_of(own) is not ABSENT:
        return own, False
    current = owner_of(name)
    if current is ABSENT:
        return name, True
    if current == owner:
        return name, False
    if current is None and ran_here:
        return name, True
    return own, True


def study_owner(storage: Any, name: str) -> Any:
    """The :data:`STUDY_OWNER` mark of the study ``name`` in an open Optuna storage (``RDBStorage`` or
    ``JournalStorage``; None: a study without it), or :data:`ABSENT` when there is no such study."""
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return ABSENT
    return storage.get_study_user_attrs(study_id).get(STUDY_OWNER)
