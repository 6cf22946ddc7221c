"""Face of :mod:`orchestration.launch.progress` at its path before issue 29, kept for pickles of older launches.

Tune pickles each phase's ``RunConfig`` into the phase's ``tuner.pkl``, with the sweep's console callback by module
path: a launch started before the move names ``orchestration.progress.ProgressPrinter`` there, and ``--resume``
unpickles it with this code. New code imports :mod:`orchestration.launch.progress`.
"""

from orchestration.launch.progress import ProgressPrinter, trial_label  # noqa: F401
