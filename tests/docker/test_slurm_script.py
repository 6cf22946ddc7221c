"""The SLURM route's static facts, in CI (`make test-slurm` runs it for real: tests/docker/test_slurm_e2e.py).

docker/slurm/sweep.sbatch is checked without Slurm: its bash parses; the #SBATCH lines the unattended path needs
are there (requeue, USR1 before the time limit with more lead than the script waits for the driver, the log
appended across requeues); every option it passes to `ray start`, `mlflow server`, `orchestration.sweep` and
`reports.build` is one those commands accept; every setting it reads is documented in its header. The port and
folder rules of docker/slurm/job-env.sh run in bash: two jobs get disjoint blocks, a taken port moves a job to the
next block.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "docker" / "slurm"
SCRIPT = SLURM / "sweep.sbatch"
JOB_ENV = SLURM / "job-env.sh"


def _bash(code: str) -> str:
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(JOB_ENV))} && {code}"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()


def _sbatch_options() -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH (--[a-z-]+)(?:=(\S*))?", SCRIPT.read_text(), flags=re.M))


def _logical_lines() -> list[str]:
    """The script's commands with backslash continuations joined."""
    return SCRIPT.read_text().replace("\\\n", " ").splitlines()


def _command(marker: str) -> str:
    """The words after ``marker`` in the one command of the script that has it."""
    found = [line for line in _logical_lines() if marker in line and not line.lstrip().startswith("#")]
    assert len(found) == 1, f"sweep.sbatch: expected one command with {marker!r}, found {found}"
    return found[0].split(marker, 1)[1]


def _flags(command: str) -> set[str]:
    return set(re.findall(r"(?<![\w$-])(--[a-z][a-z0-9-]*)", command))


def test_bash_parses_the_scripts():
    for path in (SCRIPT, JOB_ENV, SLURM / "local-cluster.sh", SLURM / "test-slurm.sh"):
        subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


def test_sbatch_lines_requeue_before_the_time_limit_with_room_for_the_driver():
    opts = _sbatch_options()
    assert "--requeue" in opts and opts.get("--open-mode") == "append", opts
    signal, _, lead = opts["--signal"].partition("@")
    assert signal == "B:USR1", "the batch shell (B:) traps USR1; the driver gets it from the trap"
    stop_wait = int(re.search(r"MM_STOP_WAIT:-(\d+)", SCRIPT.read_text()).group(1))
    assert int(lead) > stop_wait + 30, f"USR1 {lead} s before the limit leaves no room for the {stop_wait} s wait"
    assert re.fullmatch(r"\d+:\d\d:\d\d", opts["--time"]) and "%j" in opts["--output"], opts


def test_ray_start_options_exist():
    from ray.scripts.scripts import start

    known = {opt for param in start.params for opt in param.opts}
    port_args = _bash("mm_ray_port_args 20000").split()
    head = "--head " + _command('"$BIN/ray" start --head')
    workers = "--block " + _command('"$0" start --block').split("'")[0]  # the worker's bash -c '...' string
    for where, flags in (("head", _flags(head)), ("workers", _flags(workers)), ("ports", _flags(" ".join(port_args)))):
        assert flags and not flags - known, f"ray start ({where}) has no {sorted(flags - known)}"
    assert "--temp-dir" in _flags(head) and "--temp-dir" in _flags(workers)
    assert "--block" in _flags(head), "the head must stay a child of the script: it is stopped by its pid"


def test_mlflow_server_options_exist():
    from mlflow.cli import server

    known = {opt for param in server.params for opt in param.opts}
    flags = _flags(_command('"$BIN/mlflow" server'))
    assert {"--host", "--port", "--backend-store-uri", "--artifacts-destination"} <= flags
    assert not flags - known, f"mlflow server has no {sorted(flags - known)}"


def _sweep_argv(command: str) -> list[str]:
    """The sweep command's arguments as the driver gets them, the shell's variables replaced by sample values."""
    script = SCRIPT.read_text()
    optuna_set = shlex.split(re.search(r"^OPTUNA_SET=\((.*?)\)\s*(?:#.*)?$", script, flags=re.M).group(1))
    out = []
    for word in shlex.split(command.replace("&", "")):
        if word == "$SPEC":
            out.append("experiments/quickstart.yaml")
        elif word == "${OPTUNA_SET[@]}":
            out += optuna_set
        elif word != "$@":
            out.append(word)
    return [re.sub(r"\$\{?(\w+)\}?", "X", word) for word in out]


def test_the_sweep_is_launched_with_resume_auto_and_the_options_parse(monkeypatch):
    """The script's sweep arguments through the command's own `main`, up to the options it would run."""
    from orchestration import sweep

    argv = _sweep_argv(_command("-m orchestration.sweep"))
    seen = []
    monkeypatch.setattr(sweep, "handle_interrupts", lambda: None)  # pytest's own signal handlers stay
    monkeypatch.setattr(sweep, "run_sweep", lambda opts: seen.append(opts) or SimpleNamespace(status="dry-run"))
    assert sweep.main(argv) == 0 and len(seen) == 1, argv
    opts = seen[0]
    assert opts.resume == "auto", f"the sweep must continue a requeued job by itself: {argv}"
    assert opts.tracking_uri and opts.storage, argv
    assert any(item.startswith("search.storage=") for item in opts.overrides), \
        "Optuna's studies must not be a SQLite file on the shared filesystem"


def test_reports_build_options_exist():
    from reports import build

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build.main(["--help"])
    known = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.getvalue()))
    flags = _flags(_command("-m reports.build"))
    assert flags and not flags - known, f"reports.build has no {sorted(flags - known)}"


def test_every_setting_the_script_reads_is_documented_in_its_header():
    text = SCRIPT.read_text()
    header = text.split("set -euo pipefail", 1)[0]
    read = set(re.findall(r"\$\{?(MM_[A-Z_]+)", text)) | set(re.findall(r"\$\{?(MM_[A-Z_]+)", JOB_ENV.read_text()))
    read -= {"MM_PORT_FIRST", "MM_PORT_BLOCK", "MM_PORT_BLOCKS"}  # job-env.sh's constants, not settings
    undocumented = {v for v in read if not re.search(rf"^#\s+{v}\s", header, flags=re.M)}
    assert not undocumented, f"sweep.sbatch reads {sorted(undocumented)} without documenting them in its header"


def test_two_jobs_get_disjoint_port_blocks_and_folders():
    blocks = {job: int(_bash(f"mm_port_base {job}")) for job in (0, 1, 2, 399, 400, 123456)}
    assert all(20000 <= b and b + 99 < 60000 for b in blocks.values()), blocks
    assert len({blocks[1], blocks[2], blocks[399], blocks[123456]}) == 4 and abs(blocks[1] - blocks[2]) >= 100
    assert blocks[400] == blocks[0], "ids 400 apart share a block: the free-port check below moves the later one"
    assert _bash("mm_ray_tmp 0 7") != _bash("mm_ray_tmp 1000 7") != _bash("mm_ray_tmp 1000 8")
    assert len(_bash("mm_ray_tmp 1000 4294967295")) < 40, "Ray's Unix socket paths must stay under 107 bytes"
    assert int(_bash("mm_mlflow_port 20000")) - 20000 not in {0, *range(1, 8), *range(20, 100)}


def test_a_taken_port_moves_the_job_to_the_next_free_block():
    job = next(j for j in range(4242, 4642) if _bash(f"mm_free_port_base {j}") == _bash(f"mm_port_base {j}"))
    base = int(_bash(f"mm_port_base {job}"))  # a job whose own block is free on this machine now
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", base + 8))  # the MLflow port of the block
        s.listen()
        moved = int(_bash(f"mm_free_port_base {job}"))
    assert moved >= base + 100 and (moved - base) % 100 == 0, (base, moved)
    assert int(_bash(f"mm_free_port_base {job}")) == base  # released again: back to its own block

