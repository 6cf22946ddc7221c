"""``ray job submit`` with the code's commit: the working-dir upload leaves ``.git`` out (``.rayignore``), so the
commit is read here, before the upload, and handed to the job as ``MUTEXMATCH_GIT_COMMIT`` (the runtime
environment's ``env_vars``; the driver and every trial read it: ``tracking.git_commit``).

    python -m orchestration.submit [ray job submit options ...] -- python -m orchestration.sweep experiments/X.yaml \\
        --tracking-uri sqlite:////abs/mlflow.db --storage /abs/ray_results

Everything before ``--`` goes to ``ray job submit`` unchanged (``--address``, ``--working-dir``, ``--no-wait`` …);
a ``--runtime-env-json`` (``--runtime-env-json=JSON`` too) or a ``--runtime-env`` YAML file given there keeps its
content and gains the variable, as the one ``--runtime-env-json`` Ray is handed (issue 33 item 9). The ``ray``
beside this Python is used (the venv's), else the one on ``PATH``. A ``--working-dir`` that is not a folder and an
address where nothing answers are refused in one line before Ray is started (its CLI ends both in a traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit
from typing import Sequence

from mutexmatch.cli import entry_point, version_line

__all__ = ["COMMIT_ENV", "submit_command", "check_address", "main"]

COMMIT_ENV = "MUTEXMATCH_GIT_COMMIT"
USAGE = ("python -m orchestration.submit [ray job submit options] -- python -m orchestration.sweep experiments/X.yaml "
         "--tracking-uri URI --storage PATH")
DEFAULT_ADDRESS = "http://127.0.0.1:8265"   # where `ray job submit` looks without --address or $RAY_ADDRESS
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
    if path is not None:  # the project's one YAML reader: its one-line errors name the file (a ValueError)
        from mutexmatch.yamlfile import read_yaml

        env = read_yaml(path, "--runtime-env")
    else:
        try:
            env = json.loads(text) if text is not None else {}
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from None
    if env is None and path is not None:
        env = {}
    if not isinstance(env, dict):
        raise ValueError(f"{where}: expected a JSON object, e.g. '{{\"env_vars\": {{\"A\": \"1\"}}}}'")
    env_vars = env.setdefault("env_vars", {})
    if not isinstance(env_vars, dict) or not all(isinstance(v, str) for v in env_vars.values()):
        raise ValueError(f"{where}: env_vars must be an object of strings, e.g. {{\"A\": \"1\"}}; got "
                         f"{json.dumps(env_vars)[:200]}")
    return env


def _option_value(options: Sequence[str], name: str) -> str | None:
    """The value of ``name VALUE`` or ``name=VALUE`` in ``options`` (left in place), None when absent."""
    return next((w.split("=", 1)[1] if "=" in w else (options[i + 1] if i + 1 < len(options) else "")
                 for i, w in enumerate(options) if w.split("=", 1)[0] == name), None)


def check_address(argv: Sequence[str], timeout: float = 5.0) -> None:
    """``ValueError`` in one line when nothing answers at the job server's address (``--address``, else
    ``$RAY_ADDRESS``, else Ray's default): ``ray job submit`` would end in a 107-line ``ConnectionError`` traceback
    after retrying. Only an HTTP(S) address is tried (``auto`` and ``ray://`` are Ray's to resolve)."""
    options = list(argv)[:list(argv).index("--")] if "--" in argv else list(argv)
    given = _option_value(options, "--address")
    address = given or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS
    where = "--address" if given else "$RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else "the default address"
    url = urlsplit(address if "://" in address else f"http://{address}")
    if address == "auto" or url.scheme not in ("http", "https"):
        return
    try:
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"{where} {address!r}: not an address with a port, e.g. http://127.0.0.1:8265") from None
    try:
        socket.create_connection((host or "127.0.0.1", port), timeout=timeout).close()
    except OSError as e:
        raise ValueError(f"{where} {address}: nothing answers there ({e.strerror or e}); start the Ray head (`ray "
                         "start --head --dashboard-host=127.0.0.1`, whose dashboard takes jobs on port 8265) or pass "
                         "--address with its dashboard's URL") from None


def submit_command(argv: Sequence[str], commit: str) -> list[str]:
    """The ``ray job submit`` command line for ``argv`` (options ``--`` entrypoint) with ``commit`` in the job's
    environment; ``ValueError`` without an entrypoint, with a runtime environment Ray would refuse (see
    :func:`_runtime_env`) or a ``--working-dir`` that is not a folder."""
    argv = list(argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise ValueError(f"expected: {USAGE}")
    cut = argv.index("--")
    options, entrypoint = argv[:cut], argv[cut + 1:]
    runtime_env = _runtime_env(options)
    runtime_env["env_vars"][COMMIT_ENV] = commit
    workdir = _option_value(options, "--working-dir")
    if workdir is not None and not Path(workdir).expanduser().is_dir() and "://" not in workdir:
        raise ValueError(f"--working-dir {workdir!r}: not an existing folder (the job's code is uploaded from it)")
    return [_ray(), "job", "submit", *options, "--runtime-env-json", json.dumps(runtime_env), "--", *entrypoint]


@entry_point("python -m orchestration.submit")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own = argv[:argv.index("--")] if "--" in argv else argv  # after `--`: the job's own command line
    if {"-h", "--help"} & set(own):
        print(f"usage: {USAGE}\n\n{__doc__}")
        return 0
    if "--version" in own:
        print(version_line("python -m orchestration.submit"))
        return 0
    try:
        submit_command(argv, "")  # the input first, then the address, before the commit's slower MLflow import
        check_address(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from orchestration.trial.tracking import git_commit  # imports MLflow: not needed for the usage error

    commit = os.environ.get(COMMIT_ENV) or git_commit(REPO)
    command = submit_command(argv, commit)
    print(f"[submit] the job runs with {COMMIT_ENV}={commit}", flush=True)
    os.execvp(command[0], command)
    return 0  # not reached: the process is ray job submit now


if __name__ == "__main__":
    raise SystemExit(main())
