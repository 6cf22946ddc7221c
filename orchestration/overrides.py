"""Face of :mod:`orchestration.spec.overrides` at its path before issue 29, kept for code written before the move.

The sweep-identity pins (``tests/experiments/test_sweep_identity.py``, written from the tree before issue 29 and
kept unedited to prove nothing changed) load and plan every YAML through ``orchestration.overrides``. New code
imports :mod:`orchestration.spec.overrides`.
"""

from orchestration.spec.overrides import (LoadedSweep, apply_overrides, load_sweep, parse_override,  # noqa: F401
                                          plan_sweep)
