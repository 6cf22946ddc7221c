"""One launch at a time per store, whatever its YAML: two drivers of the same sweep would train every trial twice,
and two sweeps sharing a configuration would each train it (reuse links only to FINISHED runs).

A launch holds an exclusive ``flock`` on a lock file beside its SQLite store (``.<db>.launch.lock``; one per store,
so two experiments' names can never share or split a lock, issue 33 item 3) from before it first touches the store
until it ends; the kernel drops the lock when the driver dies, however it
dies, so a stale lock never blocks anyone. A second launch that finds it held is refused in one line naming the
launch that holds it (written into the file). Taking the lock before the store is opened also keeps two launches
from creating a fresh store's schema at once (MLflow's migrations would fail with a traceback). A store whose
folder cannot hold the lock file (read-only, not a folder) is refused in one line: a sweep writes to its store.

A tracking server has no file both drivers see; there :meth:`orchestration.store.store.Store.live_launches` (a RUNNING
parent run whose driver is alive) is the check.
"""

from __future__ import annotations

import fcntl
import os
import socket
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Callable, Iterator

__all__ = ["launch_lock", "lock_path", "LaunchRunning", "StoreNotWritable"]


class LaunchRunning(ValueError):
    """Another launch on the same store holds the lock (one line: who, and what to do)."""


class StoreNotWritable(ValueError):
    """The store's folder cannot hold the lock file, so the store cannot be written either (one line)."""


def lock_path(tracking_uri: str, experiment: str | None = None) -> Path | None:
    """The launch lock of a SQLite store, or None (a tracking server, an in-memory store). One per store, keyed by
    the store's resolved path (links followed): the experiment no longer names it (``experiment`` is accepted for
    the callers that pass it)."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = tracking_uri[len("sqlite:///"):].partition("?")[0]
    if db in ("", ":memory:"):
        return None
    db_path = Path(db).resolve()  # a store reached through a link locks beside its file (adversarial finding #18)
    return db_path.parent / f".{db_path.name}.launch.lock"


def _open_lock(path: Path, tracking_uri: str) -> IO[str]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a new store in a new folder, as MLflow would make it
        return path.open("a+", encoding="utf-8")
    except OSError as e:
        raise StoreNotWritable(f"--tracking-uri {tracking_uri}: cannot write in its folder {path.parent} "
                               f"({e.strerror or e}); a sweep writes to its store: give a store in a folder you "
                               "can write (status and reports.build read a read-only store)") from None


def _describe(f: IO[str], text: str) -> None:
    f.seek(0)
    f.truncate()
    f.write(text)
    f.flush()


@contextmanager
def launch_lock(tracking_uri: str, experiment: str, command: str) -> Iterator[Callable[[str], None]]:
    """Hold the launch lock of ``experiment`` for the block, or raise :class:`LaunchRunning` at once.

    Yields ``name(launch)``: records the launch id once it exists, so a refused launch can name it."""
    path = lock_path(tracking_uri, experiment)
    f = _open_lock(path, tracking_uri) if path is not None else None
    if f is None:
        yield lambda launch: None
        return
    who = f"driver pid {os.getpid()} on {socket.gethostname()} since {datetime.now():%Y-%m-%d %H:%M:%S}: {command}"
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = " ".join(f.read().split()) or "a launch that has not said which yet"
            raise LaunchRunning(f"experiment {experiment!r} in {tracking_uri}: another launch is running ({holder}); "
                                "one launch at a time per store, whatever its YAML: wait for it to end, or stop it "
                                "(Ctrl+C in its terminal) and continue it with --resume; two launches at once would "
                                "train the configurations they share twice") from None
        _describe(f, who)
        try:
            yield lambda launch: _describe(f, f"launch {launch}, {who}")
        finally:
            _describe(f, "")
            fcntl.flock(f, fcntl.LOCK_UN)
