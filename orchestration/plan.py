"""Face of :mod:`orchestration.spec.plan` at its path before issue 29, kept for pickles of older launches.

The trial plan's objects reach Ray Tune pickled by module path (``orchestration.plan.GridTrial``, ``SearchStudy``,
``RefitSlot``, ``SweepPlan``, in the trainable's context): whatever of a launch started before the move and resumed
with this code still names them here resolves (see :mod:`orchestration.trainable`). The sweep-identity and
config-hash pins, written before the move and kept unedited, import ``build_plan`` from here. New code imports
:mod:`orchestration.spec.plan`.
"""

from orchestration.spec.plan import (REFIT_PHASE, GridTrial, RefitSlot, SearchStudy, SweepPlan,  # noqa: F401
                                     build_plan, expected_runs)
