"""The runtime around a sweep: the process environment and a ``ray job`` (no module imports Ray or MLflow).

- ``env.py``: the closed-network and Tune variables, set before ``ray`` or ``mlflow`` is imported, in this process
  and every process it starts.
- ``processes.py``: a process told apart from a later one with the same id (id plus start time).
- ``jobs.py``: a sweep run by ``ray job submit``: the packages its Python must have, store and storage paths that
  would be deleted with the job's temporary working directory.
- ``signals.py``: a stop signal (SIGUSR1 of a time limit, SIGTERM, Ctrl+C) honoured at any moment of the driver's
  start-up: while it imports (exit 130 at once) and while ``ray.init`` runs (held, then acted on).

Nothing is imported here: the commands import ``jobs.py`` and ``env.py`` before anything else.
"""
