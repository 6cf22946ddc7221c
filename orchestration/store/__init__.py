"""The store: one experiment of an MLflow store as the launcher reads it, and what its UI shows.

- ``store.py``: :class:`Store`, every MLflow query of the launcher (its filters from
  :mod:`orchestration.contract.filters`), ``as_store`` and ``end_run``.
- ``mlflow_ui.py``: the experiment's kind, description and shared runs view (the runs the report counts), the link a
  command prints, a trial's Dataset column.
- ``location.py``: a SQLite store's artifacts stay in its folder (a copied store gets its own, or is refused).
- ``default_models.py``: trial models an earlier version left in MLflow's Default experiment, moved to their
  runs' experiments.
- ``concurrent.py``: writes another process may make at the same moment (a dataset input, an experiment, a tag):
  the other's row is success, not a failure.

The package keeps the names of the module it replaced (``orchestration/store.py`` before issue 29 made it a
folder): ``from orchestration.store import Store`` keeps working. New code imports from the module that defines a
name. Writing runs (the parent run, a trial's run) is :mod:`orchestration.trial.tracking`.
"""

from orchestration.store.store import Store, as_store, end_run

__all__ = ["Store", "as_store", "end_run"]
