"""The runtime around a sweep: the process environment and a ``ray job`` (no module imports Ray or MLflow).

- ``env.py``: the closed-network and Tune variables, set before ``ray`` or ``mlflow`` is imported, in this process
  and every process it starts.
- ``processes.py``: a process told apart from a later one with the same id (id plus start time).
- ``jobs.py``: a sweep run by ``ray job submit``: the packages its Python must have, store and storage paths that
  would be deleted with the job's temporary working directory.

Nothing is imported here: the commands import ``jobs.py`` and ``env.py`` before anything else.
"""
