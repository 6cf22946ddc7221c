"""The one rule that turns a ``--tracking-uri`` (or its absence) into a store, and where the Optuna studies live
beside it: the sweep, status, report and benchmarks resolve the same store. Standard library only."""

from __future__ import annotations

import importlib.util
import os
import urllib.parse
from pathlib import Path

__all__ = ["TRACKING_URI_ENV", "DEFAULT_DB", "OPTUNA_DB", "JOURNAL_PREFIX", "optuna_storage_url", "journal_file",
           "resolve_tracking_uri"]


TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
DEFAULT_DB = "mlflow.db"


OPTUNA_DB = "optuna.db"  # the search studies, beside a SQLite MLflow store


JOURNAL_PREFIX = "journal:"   # search.storage: journal:///abs/path/studies.journal (or a path relative to the project)


def journal_file(url: str) -> str | None:
    """The file of an Optuna journal storage URL (``journal:///shared/optuna.journal``: Optuna's
    ``JournalStorage(JournalFileBackend(path))``, one append-only file with its own lock, safe on a shared
    filesystem where SQLite's locking is not, Optuna #815), or None for a database URL."""
    if not url.startswith(JOURNAL_PREFIX):
        return None
    path = url[len(JOURNAL_PREFIX):]
    return path[2:] if path.startswith("//") else path


def optuna_storage_url(storage: str | None, tracking_uri: str, project_dir: str | Path) -> str:
    """Where the Optuna studies live: ``search.storage`` when set (a journal file's relative path made absolute
    against the project folder), else ``optuna.db`` beside the MLflow SQLite file, else (a tracking server) in the
    project folder. Only the sweep driver opens it (the searcher runs there)."""
    if storage and journal_file(storage) is not None:
        return f"{JOURNAL_PREFIX}//{(Path(project_dir) / journal_file(storage)).resolve()}"
    if storage:
        return storage
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:///:memory:"):
        return f"sqlite:///{Path(tracking_uri[len('sqlite:///'):].partition('?')[0]).parent / OPTUNA_DB}"
    return f"sqlite:///{Path(project_dir).resolve() / OPTUNA_DB}"


# The schemes MLflow's tracking store reads (mlflow.tracking._tracking_service.utils), and for a database the
# module SQLAlchemy imports for it unless the URI names its driver (dialect+driver://).
STORE_SCHEMES = ("sqlite", "http", "https", "file", "databricks", "postgresql", "mysql", "mssql")
_DB_DRIVERS = {"postgresql": "psycopg2", "mysql": "MySQLdb", "mssql": "pyodbc"}


def _check_scheme(uri: str, source: str) -> None:
    """One line for a URI no store can be opened from (issue 33's fuzz: an unknown scheme, an in-memory
    ``sqlite://``, a database whose driver is not installed), instead of MLflow's exception when it is first used."""
    if "://" not in uri:
        return
    dialect, _, driver = uri.partition("://")[0].lower().partition("+")
    if dialect not in STORE_SCHEMES:
        raise ValueError(f"{source}={uri!r}: {dialect}:// is not a store MLflow reads; give a *.db file, "
                         "sqlite:////abs/path/mlflow.db or http(s)://host:port (an mlflow server)")
    if dialect == "sqlite":
        raise ValueError(f"{source}={uri!r}: an in-memory store is gone when the command ends and no other "
                         "process sees it; give a file, e.g. sqlite:////abs/path/mlflow.db")
    module = {"mysqlconnector": "mysql.connector"}.get(driver, driver) or _DB_DRIVERS.get(dialect)
    if module and not _importable(module):
        raise ValueError(f"{source}={uri!r}: the {dialect} driver {module!r} is not installed here; install the "
                         "package that provides it, or use a sqlite:/// file or an mlflow server")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package of a dotted name
        return False


def resolve_tracking_uri(uri: str | None, project_dir: str | Path | None = None, *, writable: bool = False) -> str:
    """The store a command uses (sweep, report, benchmarks), as a URI any process can use from any folder.

    ``uri`` is ``--tracking-uri``; without it ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<project>/mlflow.db`` —
    the same rule in every command, so a report reads the store its sweep wrote. ``project_dir`` (default: the
    current directory) anchors relative paths: a relative ``sqlite:///`` path or a bare ``*.db`` path becomes an
    absolute ``sqlite:///`` URI (Ray trials run inside a temporary folder); an absolute one is kept as written.
    ``http(s)://`` (an ``mlflow server``) and other URIs pass through unchanged, except that ``writable`` (the
    sweep) refuses MLflow 3's plain file store (``./mlruns``, ``file:``), which raises in every process unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set.
    """
    source = "--tracking-uri"
    if uri is None:
        uri, source = os.environ.get(TRACKING_URI_ENV) or None, f"${TRACKING_URI_ENV}"
    base = Path(project_dir if project_dir is not None else Path.cwd()).resolve()
    if uri is None:
        return f"sqlite:///{base / DEFAULT_DB}"
    if uri.startswith("sqlite:///") or ("://" not in uri and uri.endswith(".db")):
        raw = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri
        path, sep, query = raw.partition("?")
        if path in ("", ":memory:"):  # each process (trial, report) would see its own empty store
            raise ValueError(f"{source}={uri!r}: an in-memory store is gone when the command ends and no other "
                             "process sees it; give a file, e.g. sqlite:////abs/path/mlflow.db")
        if path != ":memory:" and not Path(path).is_absolute():
            path = str((base / path).resolve())
        return f"sqlite:///{path}{sep}{query}"
    _check_scheme(uri, source)
    if writable and (uri.startswith("file:") or "://" not in uri):
        raise ValueError(f"{source}={uri!r}: use sqlite:////abs/path/mlflow.db (one machine) or "
                         "http://host:port (an mlflow server); MLflow 3 refuses the plain file store")
    return credentials_to_env(uri)


def credentials_to_env(uri: str) -> str:
    """``uri`` without its ``user:password@``, which go to ``$MLFLOW_TRACKING_USERNAME`` and
    ``$MLFLOW_TRACKING_PASSWORD`` of this process (MLflow's HTTP client sends them; the processes it starts inherit
    them) so that no tag, link, launch line or resume command holds a password (issue 33 item 7: the parent run's
    ``mutexmatch.command`` kept it for every reader of the experiment)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return uri
    if parts.username:
        os.environ["MLFLOW_TRACKING_USERNAME"] = urllib.parse.unquote(parts.username)
    if parts.password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = urllib.parse.unquote(parts.password)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
