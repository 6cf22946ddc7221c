"""Fixtures for the orchestration tests: the real CLI in a subprocess, a real MLflow SQLite store, and cleanup of
every process a test leaves behind — by process id, never by name (other Ray instances may share the machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    returncode: int
    output: str


def _sweep_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # every test starts its own Ray
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
                "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
    return env


def _ppid(pid: int) -> int | None:
    try:
        # /proc/<pid>/stat is "pid (comm) state ppid ..."; comm may contain spaces, so split after the last ")"
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _ppid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # zombies are dead
    except (ProcessLookupError, OSError):
        return False


def _kill_pids(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is left (Ray agents orphaned by a SIGKILLed driver ignore SIGTERM)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)


def _wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """One digits cache shared by every test project (decoded once)."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def sweep_env() -> dict[str, str]:
    return _sweep_env()


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., CliResult]:
    """``run_cli(project_dir, *args, timeout=...)``: ``python -m orchestration.sweep *args`` run in project_dir."""
    def run(project: Path, *args: str, timeout: float = 420) -> CliResult:
        proc = subprocess.run([sys.executable, "-m", "orchestration.sweep", *args], cwd=project, env=_sweep_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return CliResult(proc.returncode, proc.stdout)
    return run


@pytest.fixture(scope="session")
def procs() -> dict[str, Callable]:
    """``descendants(pid)``, ``kill(pids)``, ``alive(pid)``, ``wait_for(pred, timeout, what)``."""
    return {"descendants": _descendants, "kill": _kill_pids, "alive": _alive, "wait_for": _wait_for}
