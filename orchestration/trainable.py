"""Face of :mod:`orchestration.trial.trainable` at its path before issue 29, kept for pickles of older launches.

Ray Tune pickles the trainable and its context by module path (``orchestration.trainable.run_trial``,
``TrialContext``): whatever of a launch started before the move and resumed with this code still names them here
resolves. (Tune 2.60's saved state of a launch holds only the console callback, :mod:`orchestration.progress`;
these names are kept too so that a Tune that saves more finds them.) New code imports
:mod:`orchestration.trial.trainable`.
"""

from orchestration.trial.trainable import (META_FILE, RUN_DIRNAME, SCRATCH_DIRNAME, TrialCallback,  # noqa: F401
                                           TrialContext, run_trial)
