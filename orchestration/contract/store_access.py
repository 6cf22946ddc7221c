"""How every command opens a store, with the same checks and the same one-line errors: what makes an SQLite file
an MLflow store, bounded HTTP retries for a tracking server, artifacts through the server's proxy, and what an
experiment in MLflow's trash means. Standard library only (MLflow's exceptions are told by their class name)."""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["SQLITE_HEADER", "deleted_experiment", "MLFLOW_TABLES", "check_sqlite_store", "FAST_FAIL_HTTP_ENV",
           "PROXY_ARTIFACTS_ENV", "prefer_artifact_proxy", "bounded_http", "unusable_store_file",
           "disk_full", "store_file_errors", "quiet_store_file_errors", "STORE_LOGGER"]


SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file
def deleted_experiment(name: str, experiment_id: str, tracking_uri: str, *, restored: bool = False) -> str:
    """The one rule for an experiment in MLflow's trash, said the same way by sweep, status and report: the sweep
    restores it (``restored``); the readers name it and both ways back."""
    what = f"experiment {name!r} (id {experiment_id}) at {tracking_uri} was deleted (in MLflow's trash, runs kept)"
    if restored:
        return f"{what}; this launch restored it"
    return (f"{what}; launch its sweep again, which restores it, or run `MLFLOW_TRACKING_URI={tracking_uri} mlflow "
            f"experiments restore --experiment-id {experiment_id}`")


MLFLOW_TABLES = frozenset({"experiments", "runs"})  # what makes an SQLite file an MLflow store


def check_sqlite_store(tracking_uri: str, path: Path, label: str, *, create: bool = False,
                       write: bool | None = None) -> None:
    """``ValueError`` (one line naming ``label`` and ``tracking_uri``) unless ``path`` is an SQLite file with
    MLflow's tables. With ``create`` (the sweep, which makes the store) a missing or empty file passes too; never
    another program's database, to which MLflow would add its 65 tables. Reading commands (status, report) pass
    ``create=False``: they never turn a file into a store. ``write`` (default: ``create``) refuses a file this
    process cannot write (a sweep's dry run may create the store, yet reads a read-only one)."""
    import sqlite3

    if path.is_dir():
        raise ValueError(f"{label} {tracking_uri!r}: {path} is a folder; give an SQLite file (e.g. mlflow.db)")
    if path.exists() and not path.is_file():  # a FIFO would block, a device fail after minutes (finding #3)
        raise ValueError(f"{label} {tracking_uri!r}: {path} is not a regular file ({_file_kind(path)}); give an "
                         "SQLite file (e.g. mlflow.db)")
    if (create if write is None else write) and path.is_file() and not os.access(path, os.W_OK):  # finding #2
        raise ValueError(f"{label} {tracking_uri!r}: the store file is read-only: {path}; a sweep writes to its "
                         f"store: make it writable (chmod u+w {path}) or give another store (status and "
                         "reports.build read a read-only one)")
    if not path.is_file() and not create:
        raise ValueError(f"{label} {tracking_uri!r}: no such file at {path}, no MLflow store there; give the SQLite "
                         "file the sweep wrote (run the sweep first) or the store's URI")
    if not path.is_file():
        return
    try:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise ValueError(f"{label} {tracking_uri!r}: cannot read {path} ({e.strerror})") from None
    if not header:
        if create:
            return
        raise ValueError(f"{label} {tracking_uri!r}: {path} is empty, not an MLflow store; give the store the "
                         "sweep wrote (mlflow.db)")
    if header != SQLITE_HEADER:
        raise ValueError(f"{label} {tracking_uri!r}: {path} is not an SQLite database; give the MLflow "
                         "store the sweep wrote (mlflow.db)" + (" or a new file name" if create else ""))
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as e:
        raise ValueError(f"{label} {tracking_uri!r}: {path} cannot be read as SQLite ({e})") from None
    if tables and not MLFLOW_TABLES <= tables or not tables and not create:
        raise ValueError(f"{label} {tracking_uri!r}: {path} is an SQLite database but not an MLflow store "
                         f"(no {'/'.join(sorted(MLFLOW_TABLES))} tables); give the store the sweep wrote"
                         + (" or a new file name" if create else ""))


def _file_kind(path: Path) -> str:
    import stat

    mode = path.stat().st_mode
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a file")


# The first requests to a tracking server: MLflow's defaults (7 retries with exponential back-off, 120 s per
# request) wait about four minutes in silence before a dead server's error. Three tries of 5 s with a 1 s back-off
# answer within ~20 s; a user's own MLFLOW_HTTP_REQUEST_* settings win.
FAST_FAIL_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                      "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


# Artifacts of an `mlflow server --artifacts-destination s3://...` come through the server's proxy, never through a
# presigned URL straight to the store: MLflow 3.17's client otherwise downloads every proxied artifact from such a
# server by presigned URLs that name the store as the *server* reaches it (http://minio:9000 in docker/compose.yaml),
# which a workstation cannot resolve — a report build then retries for minutes (found by tests/docker/
# test_local_cluster.py). Uploads already go through the proxy by default. A user's own setting wins.
PROXY_ARTIFACTS_ENV = {"MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false"}


def prefer_artifact_proxy() -> None:
    """Set :data:`PROXY_ARTIFACTS_ENV` in ``os.environ`` unless the user set it (before any artifact download)."""
    for key, value in PROXY_ARTIFACTS_ENV.items():
        os.environ.setdefault(key, value)


@contextmanager
def bounded_http(tracking_uri: str, label: str) -> Iterator[None]:
    """Within: MLflow's HTTP retries bounded by :data:`FAST_FAIL_HTTP_ENV` (unless the user set them), and a
    server that does not answer becomes one ``ValueError`` line naming ``tracking_uri`` (``label`` says where it came
    from). The sweep and the report both open a store through it."""
    saved = {k: os.environ.get(k) for k in FAST_FAIL_HTTP_ENV}
    os.environ.update({k: v for k, v in FAST_FAIL_HTTP_ENV.items() if saved[k] is None})
    try:
        yield
    except Exception as e:
        if not (isinstance(e, OSError) or _is_mlflow_error(e)):  # requests' connection errors are OSErrors
            raise
        if tracking_uri.startswith("sqlite:///"):  # a file: no server to start (finding #2)
            raise unusable_store_file(e, f"{label} {tracking_uri!r}",
                                      tracking_uri[len("sqlite:///"):].partition("?")[0]) from None
        raise _unusable_server(e, f"{label} {tracking_uri!r}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


FULL_DISK = ("database or disk is full", "No space left on device", "Disk quota exceeded")


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a write refused for want of space (SQLite's SQLITE_FULL, ENOSPC, EDQUOT), however
    wrapped (MLflow's exceptions keep the driver's text)."""
    import errno

    return (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) or any(
        f in str(err) for f in FULL_DISK)


def unusable_store_file(err: BaseException, where: str, path: str) -> ValueError:
    """The one line for an SQLite store that refused a write: read-only (adversarial finding #2), its disk full
    (finding #4: what was written is intact, the launch resumes once there is space), or SQLite's own reason."""
    text = str(err)
    if "readonly database" in text:
        return ValueError(f"{where}: the store file is read-only: {path}; make it writable (chmod u+w {path}) or "
                          "give another store")
    if disk_full(err):
        return ValueError(f"{where}: the disk holding the store is full ({path}); what was written is intact: free "
                          "space there, then resume the launch (--resume)")
    return ValueError(f"{where}: the SQLite store {path} cannot be written ({_short_reason(err)})")


STORE_LOGGER = "mlflow.store.db.utils"  # logs every SQLite error with its traceback at ERROR before raising it


class _SaidInOneLine(logging.Filter):
    """Drops MLflow's log of a full disk or read-only store: the command says those itself, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (any(f in text for f in FULL_DISK) or "readonly database" in text)


def quiet_store_file_errors() -> None:
    """Install :class:`_SaidInOneLine` on MLflow's SQL store logger (once per process)."""
    logger = logging.getLogger(STORE_LOGGER)
    if not any(isinstance(f, _SaidInOneLine) for f in logger.filters):
        logger.addFilter(_SaidInOneLine())


@contextmanager
def store_file_errors(tracking_uri: str, label: str) -> Iterator[None]:
    """Within: an SQLite store's full disk or read-only file (a sweep's whole launch: the disk may fill at any
    write) becomes one ``ValueError`` line naming the disk and the store (:func:`unusable_store_file`), not
    MLflow's traceback (finding #4); any other error passes."""
    quiet_store_file_errors()
    try:
        yield
    except Exception as e:
        if not tracking_uri.startswith("sqlite:///") or not (disk_full(e) or "readonly database" in str(e)):
            raise
        raise unusable_store_file(e, f"{label} {tracking_uri!r}",
                                  tracking_uri[len("sqlite:///"):].partition("?")[0]) from None


def _unusable_server(err: BaseException, where: str) -> ValueError:
    """The one line for a tracking server MLflow's client gave up on: one that answers 5xx is failing (its log
    says why), one that answers 4xx or a web page instead of MLflow's JSON is not an MLflow server (or not its
    address), one that does not answer is down. Before, all three read "does not answer; start it" (issue 33:
    http500-*, httphtml-*)."""
    text = str(err)
    code = re.search(r"error code (\d{3})|too many (\d{3}) error responses", text)
    status = code and (code.group(1) or code.group(2))
    if status and status.startswith("5"):
        return ValueError(f"{where}: answers HTTP {status}{_error_body(text, int(status))}: the tracking server is "
                          "failing; see its log")
    if status:
        return ValueError(f"{where}: answers MLflow's API with HTTP {status}: not an MLflow tracking server, or not "
                          "its address")
    if "not in a valid JSON format" in text:
        page = re.search(r"<title>([^<]{1,80})</title>", text, re.IGNORECASE)
        return ValueError(f"{where}: answers with a web page{f' ({page.group(1).strip()!r})' if page else ''}, not "
                          "MLflow's JSON: not an MLflow tracking server, or not its address (a proxy's page?)")
    return ValueError(f"{where}: the tracking server does not answer ({_short_reason(err)}); start it (`mlflow "
                      "server`) or pass the store's URI")


def _error_body(text: str, status: int) -> str:
    """`` (INTERNAL_ERROR: boom)`` from the failing request asked once more (MLflow's retry error keeps only the
    status), '' when it cannot be had within a few seconds or the server now answers otherwise."""
    import json
    import urllib.error
    import urllib.request

    url = re.search(r"API request to (\S+) failed", text)
    if url is None:
        return ""
    try:
        urllib.request.urlopen(url.group(1), timeout=3).close()
    except urllib.error.HTTPError as e:
        if e.code != status:
            return ""
        try:
            body = json.loads(e.read(4096))
            return f" ({body['error_code']}: {' '.join(str(body['message']).split())[:160]})"
        except Exception:  # noqa: BLE001 - the body is a courtesy: anything unexpected leaves it out
            return ""
    except Exception:  # noqa: BLE001 - as above
        return ""
    return ""


def _is_mlflow_error(err: BaseException) -> bool:
    """An :class:`mlflow.exceptions.MlflowException` (or a subclass), told by its class without importing MLflow:
    the contract imports no MLflow, and a command that raises one has imported it already."""
    return any(c.__name__ == "MlflowException" and c.__module__ == "mlflow.exceptions" for c in type(err).__mro__)


def _short_reason(err: BaseException) -> str:
    """The cause in a few words ("Connection refused", "Read timed out") from MLflow's long retry message."""
    text = str(err)
    for pattern in (r"\[Errno -?\d+\] ([^'\")\]]+)", r"(Read timed out|Connection refused|Name or service not known)"):
        found = re.search(pattern, text)
        if found:
            return found.group(1).strip().rstrip(".")
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return first[:160]
