"""A sweep run by ``ray job submit``: what must hold before it starts, so that its runs cannot be lost.

Standard library only: :func:`require_packages` runs before the sweep imports anything else, so a head started from
a Python without the project's packages fails in one line, not a ``ModuleNotFoundError`` traceback.

- Inside a job the driver runs in Ray's temporary copy of the working directory
  (``…/runtime_resources/working_dir_files/_ray_pkg_*``), deleted with the job: a default or relative SQLite store
  or Tune storage there would take the runs with it, so :func:`check_job_paths` refuses them up front.
- ``.rayignore`` keeps ``.git`` out of the upload, so the commit is captured before it: ``python -m
  orchestration.submit`` (:mod:`orchestration.submit`) sets ``MUTEXMATCH_GIT_COMMIT`` in the job's environment.
- ``ray job stop`` sends SIGTERM and SIGKILLs the driver 3 s later (``RAY_JOB_STOP_WAIT_TIME_S``): the sweep's
  SIGTERM handler runs :func:`on_stop_signal`'s hooks at once (the runs are marked KILLED, the resume command
  printed) before Tune's slower graceful stop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

__all__ = ["JOB_CONFIG_ENV", "in_ray_job", "job_working_dir", "require_packages", "check_job_paths"]

JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"   # set by Ray's job supervisor for every job's entrypoint
REQUIRED = ("mlflow", "ray", "optuna", "torch")


def in_ray_job() -> bool:
    """Whether this process is the entrypoint of a ``ray job submit`` job."""
    return JOB_CONFIG_ENV in os.environ


def job_working_dir() -> Path | None:
    """The job's temporary copy of ``--working-dir`` (the current directory), or None outside a job or for a
    job submitted without one."""
    if not in_ray_job():
        return None
    try:
        runtime_env = json.loads(os.environ[JOB_CONFIG_ENV]).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return None
    return Path.cwd().resolve() if runtime_env.get("working_dir") else None


def require_packages(names: tuple[str, ...] = REQUIRED) -> None:
    """Exit with one line naming this Python and the fix when a package the sweep needs is not importable (a Ray
    head started with the venv's ``ray`` but without the venv on ``PATH`` runs the job with another ``python``)."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if not missing:
        return
    where = "the Ray head's Python" if in_ray_job() else "this Python"
    print(f"error: {', '.join(missing)} not importable by {where} ({sys.executable}); fix: start Ray from the "
          "project's environment (`source .venv/bin/activate && ray start --head …`), or name its Python in the "
          "command (`-- /abs/path/.venv/bin/python -m orchestration.sweep …`)", file=sys.stderr)
    raise SystemExit(2)


def check_job_paths(tracking_uri: str, storage: str) -> None:
    """``ValueError`` when, inside a job, the MLflow store or Tune's storage lies in the job's temporary working
    directory (the default ``mlflow.db`` and ``ray_results``, or a relative path): the runs would be deleted with
    it."""
    tmp = job_working_dir()
    if tmp is None:
        return
    store = Path(tracking_uri[len("sqlite:///"):].partition("?")[0]) if tracking_uri.startswith("sqlite:///") else None
    for flag, path, fix in (
            ("--tracking-uri", store, "sqlite:////abs/path/mlflow.db on a disk every node shares, or "
                                      "http://host:5000 (an mlflow server)"),
            ("--storage", None if "://" in storage else Path(storage), "an absolute path every node shares, or "
                                                                        "s3://bucket/path")):
        if path is not None and path.resolve().is_relative_to(tmp):
            raise ValueError(f"{flag}: {path} is inside this job's temporary copy of the working directory ({tmp}), "
                             f"which Ray deletes with the job, so the runs would be lost; pass {flag} {fix}")
