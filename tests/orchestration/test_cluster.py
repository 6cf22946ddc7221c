"""A local sweep's own Ray listens on 127.0.0.1 only (issue 33, adversarial "a sweep's own local Ray listens on all
interfaces": GCS, raylet, dashboard agent and runtime-env agent bound the host's external address or every
interface, and ``ray.init(_node_ip_address="127.0.0.1")`` is turned back into the external address by Ray), and
its start is retried on a loaded machine (issue 40 item 1)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from orchestration.launch import cluster


def test_a_local_ray_is_started_on_the_loopback_address_and_the_switch_is_restored(monkeypatch):
    import ray
    from ray._private import ray_constants, services

    seen = {}

    def fake_init(**kwargs):
        seen["node_ip"] = services.get_node_ip_address()  # what ray.init gives the node it starts
        seen["env"] = os.environ.get(cluster.SINGLE_MACHINE_ENV)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(cluster.SINGLE_MACHINE_ENV, raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    before = ray_constants.ENABLE_RAY_CLUSTER
    assert cluster.init_ray() is True
    assert seen == {"node_ip": "127.0.0.1", "env": "0"}
    assert ray_constants.ENABLE_RAY_CLUSTER == before and cluster.SINGLE_MACHINE_ENV not in os.environ


# Ray 2.60's start-up timeout (ray/_private/node.py), what a loaded machine got from `ray.init` (issue 40)
RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed to "
               "startup or the GCS has become overloaded.")


@pytest.fixture
def flaky_ray(monkeypatch):
    """``ray.init`` failing with Ray's start-up timeout the first ``fails[0]`` times; counts of inits and
    shutdowns."""
    import ray

    seen = {"init": 0, "shutdown": 0, "fails": [0]}

    def init(**kwargs):
        seen["init"] += 1
        if seen["init"] <= seen["fails"][0]:
            raise Exception(RAY_TIMEOUT)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: seen.__setitem__("shutdown", seen["shutdown"] + 1))
    return seen


def test_a_local_ray_start_that_times_out_is_retried_in_one_line_naming_the_load(flaky_ray, capsys):
    flaky_ray["fails"][0] = 2
    assert cluster.init_ray() is True
    lines = capsys.readouterr().out.splitlines()
    assert flaky_ray["init"] == 3 and flaky_ray["shutdown"] == 2 and len(lines) == 2, lines
    for n, line in zip((2, 3), lines):
        assert line.startswith("[sweep] Ray did not start at a load of ") and " cores (" in line, line
        assert line.endswith(f"starting it again (try {n} of 3)") and "timed out during startup" in line, line


def test_a_local_ray_that_never_starts_is_one_error_naming_the_load_not_a_bug_report(flaky_ray, capsys):
    from orchestration.launch.launch import SweepError

    flaky_ray["fails"][0] = 99
    with pytest.raises(SweepError) as err:
        cluster.init_ray()
    text = str(err.value)
    assert flaky_ray["init"] == cluster.START_ATTEMPTS and "\n" not in text
    assert text.startswith(f"Ray did not start here in {cluster.START_ATTEMPTS} tries at a load of ") and \
        "timed out during startup" in text and "RAY_ADDRESS" in text and "bug" not in text, text


def test_a_stop_signal_ends_the_retries(flaky_ray):
    flaky_ray["fails"][0] = 99
    assert cluster.init_ray(interrupted=lambda: True) is False
    assert flaky_ray["init"] == 1 and flaky_ray["shutdown"] == 1


def _listeners(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every listening TCP socket of ``pids``, from /proc (no ss needed)."""
    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            hexaddr, hexport = cols[1].split(":")
            raw = bytes.fromhex(hexaddr)
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word is host order
            found.append((socket.inet_ntop(family, words), int(hexport, 16), inodes[cols[9]]))
    return found


def _ray_pids(temp_dir: str) -> set[int]:
    """This process, the processes whose command line names ``temp_dir`` and their descendants (an agent renames
    itself ``ray::DashboardAgent``, which replaces its command line)."""
    parent, mine = {}, {os.getpid()}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if temp_dir.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                mine.add(int(d))
        except (OSError, IndexError, ValueError):
            continue
    grown = True
    while grown:
        grown = False
        for pid, ppid in parent.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grown = True
    return mine


@pytest.mark.heavy  # heavy: starts a real local Ray (about 15 s); the test above covers the switch in CI
@pytest.mark.slow
def test_every_process_of_a_local_ray_listens_on_loopback_only(monkeypatch):
    import time

    import ray

    temp_dir = tempfile.mkdtemp(prefix="mmray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    monkeypatch.setenv("RAY_TMPDIR", temp_dir)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster.init_ray() is True
    try:
        time.sleep(8)  # the agents start after ray.init returns
        found = _listeners(_ray_pids(temp_dir))
        assert len(found) >= 6, found  # GCS, raylet (2), the driver's core worker, the two agents
        assert all(addr in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for addr, _, _ in found), found
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
