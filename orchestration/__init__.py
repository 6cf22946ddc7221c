"""Sweeps of mutexmatch runs on Ray Tune with Optuna search and MLflow tracking.

``python -m orchestration.sweep experiments/<name>.yaml`` — see ``orchestration/README.md``. The command lines
(``sweep``, ``status``, ``submit``, ``train``) sit here; each part of the architecture has its folder, whose
``__init__`` says what each of its modules holds:

- ``spec/``: the sweep YAML, its ``--set`` overrides and the plan of trials (no Ray, no MLflow);
- ``launch/``: one launch (the ``Launch`` object, its Tune phases, search, refit, the cluster, interrupts, the
  dry run and what it prints);
- ``trial/``: the Tune trainable a Ray worker runs and the MLflow runs it writes;
- ``store/``: the ``Store``, every MLflow query of the launcher, and what the MLflow UI shows;
- ``runtime/``: the closed-network environment and ``ray job`` checks;
- ``contract/``: the MLflow layout both the sweep and the reports read.

The top-level ``trainable.py``, ``plan.py``, ``progress.py``, ``overrides.py`` and ``refit.py`` are faces at paths
from before the folders (Ray Tune's pickles of older launches, pinned tests). Nothing is imported here, so ``import
orchestration.spec`` stays light.
"""
