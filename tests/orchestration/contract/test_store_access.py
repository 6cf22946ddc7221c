"""What a writing command refuses of an SQLite store before any work (orchestration/contract/store_access.py):
adversarial findings #2 (a read-only store file: "the tracking server does not answer … start it (`mlflow server`)"
and two tracebacks) and #3 (a FIFO as the store: minutes of retries, then "disk I/O error")."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

from orchestration import contract as C

def _store(folder: Path) -> Path:
    """A file with an MLflow store's tables (what the check looks for), made in milliseconds."""
    path = folder / "mlflow.db"
    with sqlite3.connect(path) as db:
        db.executescript("CREATE TABLE experiments (x); CREATE TABLE runs (x);")
    return path


def test_a_fifo_as_the_store_is_refused_at_once(tmp_path):
    fifo = tmp_path / "mlflow.db"
    os.mkfifo(fifo)
    for create in (True, False):
        with pytest.raises(ValueError, match=rf"^--tracking-uri 'sqlite:///{fifo}': {fifo} is not a regular file "
                                             r"\(a FIFO\); give an SQLite file"):
            C.check_sqlite_store(f"sqlite:///{fifo}", fifo, "--tracking-uri", create=create)


def _check_as_user(uri: str, path: Path, create: bool, write: bool | None = None) -> str:
    """The check's error ('' if none) in a forked process that cannot write a read-only file: root writes through
    chmod, so there the child is nobody (no exec: this interpreter lies in root's home)."""
    read, written = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's exit handlers
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            C.check_sqlite_store(uri, path, "--tracking-uri", create=create, write=write)
            message = ""
        except BaseException as e:  # noqa: BLE001 - any error is the answer
            message = f"{type(e).__name__}: {e}"
        os.write(written, message.encode())
        os._exit(0)
    os.close(written)
    with os.fdopen(read, "rb") as f:
        answer = f.read().decode()
    os.waitpid(pid, 0)
    return answer


def test_a_read_only_store_file_is_refused_for_writing_and_read_for_reading():
    folder = Path(tempfile.mkdtemp(prefix="mm-ro-store-"))  # not under pytest's root-only tmp folder
    try:
        folder.chmod(0o777)
        path = _store(folder)
        path.chmod(0o444)
        uri = f"sqlite:///{path}"
        assert _check_as_user(uri, path, True) == (
            f"ValueError: --tracking-uri {uri!r}: the store file is read-only: {path}; a sweep writes to its store: "
            f"make it writable (chmod u+w {path}) or give another store "
            "(status and reports.build read a read-only one)")
        assert _check_as_user(uri, path, False) == ""
        assert _check_as_user(uri, path, True, write=False) == ""  # a sweep's dry run reads it
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


@pytest.mark.parametrize("error, said", [
    ("(sqlite3.OperationalError) attempt to write a readonly database\n[SQL: INSERT INTO experiments]",
     "the store file is read-only: /d/mlflow.db; make it writable (chmod u+w /d/mlflow.db) or give another store"),
    ("(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO metrics]",
     "the disk holding the store is full (/d/mlflow.db); what was written is intact: free space there, then resume "
     "the launch (--resume)"),
])
def test_a_store_file_that_refuses_a_write_is_said_as_a_file_not_a_server(error, said):
    # finding #2: "the tracking server does not answer (… attempt to write a readonly database); start it"
    from mlflow.exceptions import MlflowException

    uri = "sqlite:////d/mlflow.db"
    with pytest.raises(ValueError) as got:
        with C.bounded_http(uri, "--tracking-uri"):
            raise MlflowException(error)
    assert str(got.value) == f"--tracking-uri {uri!r}: {said}"


def test_a_full_disk_anywhere_in_a_launch_is_one_line_naming_the_disk_and_the_store():
    # finding #4: the store's disk filled during a sweep: six tracebacks
    uri = "sqlite:////d/mlflow.db"
    with pytest.raises(ValueError, match=r"^--tracking-uri 'sqlite:////d/mlflow\.db': the disk holding the store is "
                                         r"full \(/d/mlflow\.db\); what was written is intact: free space there, "
                                         r"then resume the launch \(--resume\)$"):
        with C.store_file_errors(uri, "--tracking-uri"):
            raise OSError(28, "No space left on device")
    with pytest.raises(KeyError):  # any other error is the caller's
        with C.store_file_errors(uri, "--tracking-uri"):
            raise KeyError("x")


def test_mlflows_own_log_of_a_full_or_read_only_store_is_left_to_the_one_line(caplog):
    import logging

    C.quiet_store_file_errors()
    logger = logging.getLogger(C.STORE_LOGGER)
    with caplog.at_level(logging.ERROR, logger=C.STORE_LOGGER):
        for error in ("database or disk is full", "attempt to write a readonly database", "no such table: runs"):
            logger.error("SQLAlchemy database error. The following exception is caught.\n%s", error)
    assert [r.getMessage().splitlines()[1] for r in caplog.records] == ["no such table: runs"]
