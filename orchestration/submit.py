"""``ray job submit`` with the code's commit: the working-dir upload leaves ``.git`` out (``.rayignore``), so the
commit is read here, before the upload, and handed to the job as ``MUTEXMATCH_GIT_COMMIT`` (the runtime
environment's ``env_vars``; the driver and every trial read it: ``tracking.git_commit``).

    python -m orchestration.submit [ray job submit options ...] -- python -m orchestration.sweep experiments/X.yaml \\
        --tracking-uri sqlite:////abs/mlflow.db --storage /abs/ray_results

Everything before ``--`` goes to ``ray job submit`` unchanged (``--address``, ``--working-dir``, ``--no-wait`` …);
a ``--runtime-env-json`` given there keeps its content and gains the variable. The ``ray`` beside this Python is
used (the venv's), else the one on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["COMMIT_ENV", "submit_command", "main"]

COMMIT_ENV = "MUTEXMATCH_GIT_COMMIT"
REPO = Path(__file__).resolve().parent.parent


def _ray() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.is_file() else (shutil.which("ray") or "ray")


def submit_command(argv: Sequence[str], commit: str) -> list[str]:
    """The ``ray job submit`` command line for ``argv`` (options ``--`` entrypoint) with ``commit`` in the job's
    environment; ``ValueError`` without an entrypoint or with a ``--runtime-env-json`` that is not a JSON object."""
    argv = list(argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise ValueError("expected: python -m orchestration.submit [ray job submit options] -- python -m "
                         "orchestration.sweep experiments/X.yaml --tracking-uri URI --storage PATH")
    cut = argv.index("--")
    options, entrypoint = argv[:cut], argv[cut + 1:]
    runtime_env: object = {}
    if "--runtime-env-json" in options:
        i = options.index("--runtime-env-json")
        try:
            runtime_env = json.loads(options[i + 1])
        except (IndexError, ValueError):
            runtime_env = None
        if not isinstance(runtime_env, dict):
            raise ValueError("--runtime-env-json: expected a JSON object, e.g. '{\"env_vars\": {\"A\": \"1\"}}'")
        del options[i:i + 2]
    runtime_env.setdefault("env_vars", {})[COMMIT_ENV] = commit  # type: ignore[union-attr]
    return [_ray(), "job", "submit", *options, "--runtime-env-json", json.dumps(runtime_env), "--", *entrypoint]


def main(argv: Sequence[str] | None = None) -> int:
    from orchestration.trial.tracking import git_commit  # imports MLflow: not needed for the usage error

    argv = list(sys.argv[1:] if argv is None else argv)
    commit = os.environ.get(COMMIT_ENV) or git_commit(REPO)
    try:
        command = submit_command(argv, commit)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[submit] the job runs with {COMMIT_ENV}={commit}", flush=True)
    os.execvp(command[0], command)
    return 0  # not reached: the process is ray job submit now


if __name__ == "__main__":
    raise SystemExit(main())
