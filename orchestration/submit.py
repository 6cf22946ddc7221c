"""``ray job submit`` with the code's commit: the working-dir upload leaves ``.git`` out (``.rayignore``), so the
commit is read here, before the upload, and handed to the job as ``MUTEXMATCH_GIT_COMMIT`` (the runtime
environment's ``env_vars``; the driver and every trial read it: ``tracking.git_commit``).

    python -m orchestration.submit [ray job submit options ...] -- python -m orchestration.sweep experiments/X.yaml \\
        --tracking-uri sqlite:////abs/mlflow.db --storage /abs/ray_results

Everything before ``--`` goes to ``ray job submit`` unchanged (``--address``, ``--working-dir``, ``--no-wait`` …);
a ``--runtime-env-json`` (``--runtime-env-json=JSON`` too) or a ``--runtime-env`` YAML file given there keeps its
content and gains the variable, as the one ``--runtime-env-json`` Ray is handed (issue 33 item 9). The ``ray`` beside this Python is
used (the venv's), else the one on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from mutexmatch.cli import entry_point

__all__ = ["COMMIT_ENV", "submit_command", "main"]

COMMIT_ENV = "MUTEXMATCH_GIT_COMMIT"
REPO = Path(__file__).resolve().parent.parent


def _ray() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.is_file() else (shutil.which("ray") or "ray")


def _take_option(options: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` or ``name=VALUE`` from ``options`` and return VALUE (None when absent)."""
    for i, word in enumerate(options):
        if word == name:
            if i + 1 == len(options):
                raise ValueError(f"{name}: expected a value after it")
            value = options[i + 1]
            del options[i:i + 2]
            return value
        if word.startswith(name + "="):
            del options[i]
            return word[len(name) + 1:]
    return None


def _runtime_env(options: list[str]) -> dict:
    """The user's runtime environment, from ``--runtime-env-json`` or a ``--runtime-env`` YAML file (Ray takes only
    one of them, so both become the one ``--runtime-env-json`` that also carries the commit); removed from
    ``options``. ``ValueError`` for anything Ray would refuse after the upload, in one line."""
    text, path = _take_option(options, "--runtime-env-json"), _take_option(options, "--runtime-env")
    if text is not None and path is not None:
        raise ValueError("--runtime-env and --runtime-env-json: give one of them (Ray takes only one)")
    where = "--runtime-env-json" if path is None else f"--runtime-env {path}"
    try:
        if path is not None:
            import yaml

            with open(path, encoding="utf-8") as f:
                env = yaml.safe_load(f)
        else:
            env = json.loads(text) if text is not None else {}
    except OSError as e:
        raise ValueError(f"{where}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # json's and PyYAML's errors (yaml.YAMLError is not a ValueError: caught below)
        raise ValueError(f"{where}: not valid {'YAML' if path else 'JSON'} ({e})") from None
    except Exception as e:  # noqa: BLE001 - yaml.YAMLError, whose module is imported only for a file
        raise ValueError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    if env is None and path is not None:
        env = {}
    if not isinstance(env, dict):
        raise ValueError(f"{where}: expected a JSON object, e.g. '{{\"env_vars\": {{\"A\": \"1\"}}}}'")
    env_vars = env.setdefault("env_vars", {})
    if not isinstance(env_vars, dict) or not all(isinstance(v, str) for v in env_vars.values()):
        raise ValueError(f"{where}: env_vars must be an object of strings, e.g. {{\"A\": \"1\"}}; got "
                         f"{json.dumps(env_vars)[:200]}")
    return env


def submit_command(argv: Sequence[str], commit: str) -> list[str]:
    """The ``ray job submit`` command line for ``argv`` (options ``--`` entrypoint) with ``commit`` in the job's
    environment; ``ValueError`` without an entrypoint, with a runtime environment Ray would refuse (see
    :func:`_runtime_env`) or a ``--working-dir`` that is not a folder."""
    argv = list(argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise ValueError("expected: python -m orchestration.submit [ray job submit options] -- python -m "
                         "orchestration.sweep experiments/X.yaml --tracking-uri URI --storage PATH")
    cut = argv.index("--")
    options, entrypoint = argv[:cut], argv[cut + 1:]
    runtime_env = _runtime_env(options)
    runtime_env["env_vars"][COMMIT_ENV] = commit
    workdir = next((w.split("=", 1)[1] if "=" in w else (options[i + 1] if i + 1 < len(options) else "")
                    for i, w in enumerate(options) if w.split("=", 1)[0] == "--working-dir"), None)
    if workdir is not None and not Path(workdir).expanduser().is_dir() and "://" not in workdir:
        raise ValueError(f"--working-dir {workdir!r}: not an existing folder (the job's code is uploaded from it)")
    return [_ray(), "job", "submit", *options, "--runtime-env-json", json.dumps(runtime_env), "--", *entrypoint]


@entry_point("python -m orchestration.submit")
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
