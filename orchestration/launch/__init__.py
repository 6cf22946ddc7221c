"""The launch: one run of ``python -m orchestration.sweep``, from its options to the summary it prints.

- ``launch.py``: :class:`Launch` (the options, plan, store, storage, parent run and resources of one launch),
  ``SweepOptions``, ``SweepOutcome``, ``SweepError``; which trials it runs or reuses, the command that repeats it
  and the launch plan saved on its parent run for ``--resume``.
- ``phases.py``: its Tune phases one after another (the grid, one per search study, the refit), restored by
  ``--resume``, and every run's final status after each.
- ``search.py``: an Optuna study on Tune (the space, the searcher, ASHA) and the best parameters logged.
- ``best.py``: the best trial of each study and of each searched cell, read from the store.
- ``refit.py``: the search's best parameters trained on every refit fold.
- ``cluster.py``: the Ray cluster the launch runs on (connect or start one; can it run the trials at all).
- ``scaleup.py``: an autoscaling cluster grown to one trial's size before that check (what its autoscaler can add,
  the request and the wait with its printed limit).
- ``interrupts.py``, ``launchlock.py``, ``orphans.py``: Ctrl+C and SIGTERM, one launch of an experiment at a time,
  the Ray processes a killed driver left behind.
- ``trialsignals.py``: the driver's SIGUSR1 (a time limit ahead) passed on to every running trial, which checkpoints.
- ``notify.py``: ``--notify URL``, the webhook told how the sweep ended and of a trial with no retry left.
- ``progress.py``, ``summary.py``: the line per trial event while Tune runs, the tables at the end.
- ``oomkill.py``: a trial whose worker Ray's memory monitor killed, handed to Tune as a retried failure and said in
  one line (the node's memory use, what to do).
- ``dryrun.py``, ``cost.py``: ``--dry-run``, the plan and what it would cost (a few timed real steps).

The package keeps the names of the module it replaced (``orchestration/launch.py`` before issue 29 made it a
folder): ``from orchestration.launch import Launch, select`` keeps working. New code imports from the module that
defines a name.
"""

from orchestration.launch.launch import (Launch, SweepError, SweepOptions, SweepOutcome, check_options,
                                         command_line, link_reusable, load_launch_plan, record_expected_runs,
                                         record_without_launch, resolve_storage, reusable, save_launch_plan, select)

__all__ = ["SweepError", "SweepOptions", "Launch", "SweepOutcome", "check_options", "resolve_storage",
           "command_line", "select", "reusable", "link_reusable", "save_launch_plan", "load_launch_plan",
           "record_expected_runs", "record_without_launch"]
