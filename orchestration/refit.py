"""Face of :mod:`orchestration.launch.refit` at its path before issue 29, kept for code written before the move.

The migration test (``tests/orchestration/test_migration.py``, kept unedited to prove that stores written before
the move are read the same) takes the refit trials from ``orchestration.refit``. New code imports
:mod:`orchestration.launch.refit`.
"""

from orchestration.launch.refit import BestTrial, best_by_cell, pending_refits, refit_trials  # noqa: F401
