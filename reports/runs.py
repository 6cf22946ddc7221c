"""MLflow → pandas: the trial runs of one experiment, their metric histories and class-count artifacts.

Reads the layout orchestration writes (orchestration/README.md, MLflow layout): child runs tagged
``mutexmatch.role=trial``, ``mutexmatch.kind=grid``, ``mutexmatch.axis.<axis>=<level>``, ``mutexmatch.fold``,
``mutexmatch.split_digest``; params = the flattened RunConfig; metrics logged at ``step=`` the training step;
``class_counts/step_<step:08d>.json`` artifacts.

Two readers return the same frames:

- :class:`ApiRunSource` — MLflow's public client API (``search_runs``, ``get_metric_history``); works for every
  tracking URI (an ``mlflow server``, a database).
- :class:`SqliteRunSource` — for ``sqlite:`` URIs, runs, tags, params and metric histories are read in bulk with a
  read-only SQL connection to the same file. Measured on this machine with 1,000 runs × 100 evaluations × 8 metrics:
  ``search_runs`` takes 3.7–4.5 s (it builds ~73k ORM objects for every param, tag and latest metric), and
  ``get_metric_history`` 20 ms *per run*, because SQLite answers MLflow's query through the ``(key, …)`` primary
  key and scans every row of the metric for each run — 20 s for one metric of 1,000 runs. The bulk reads take
  about 0.2 s (runs, tags, params) and 0.2 s per 100k metric rows. Only MLflow's long-stable core tables are read
  (``experiments``, ``runs``, ``tags``, ``params``, ``metrics``); if the file lacks one of the expected columns the
  API reader is used instead. Class-count artifacts are read from each run's artifact URI: as plain files when it
  is a local ``file:`` folder, else with ``mlflow.artifacts``.

Protocols (how one run's metric history becomes one number, as in FixMatch/MutexMatch reporting):
``best`` = maximum over all evaluations, ``final`` = the value at the last step, ``median20`` = median of the last 20
evaluations.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from mlflow import MlflowClient

import numpy as np
import pandas as pd

from orchestration import contract as C  # the layout's names only: standard library, no Ray, no MLflow

__all__ = [
    "MEDIAN_WINDOW",
    "RunSource",
    "ApiRunSource",
    "SqliteRunSource",
    "resolve_tracking_uri",
    "open_run_source",
    "summarise",
    "MetricCache",
    "empty_trials",
]

MEDIAN_WINDOW = 20
PAGE = 10_000  # search_runs page size (reports.selection reads launches with it too)
_CHUNK = 900                      # run ids per SQL `IN (…)`: below SQLite's historic 999-parameter limit
# get_metric_history is one query per (run, key); threads overlap the round trips to a tracking server.
_HISTORY_WORKERS = 8
_BASE_COLUMNS = ["run_id", "run_name", "status", "start_time", "artifact_uri", "cell", "fold", "split_digest",
                 "variant", "config_hash", "parent_run_id", "lost_source"]


def resolve_tracking_uri(uri: str | None) -> str:
    """The store to read: the sweep's own rule (:func:`orchestration.contract.resolve_tracking_uri`), so both find
    the same store — ``uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<cwd>/mlflow.db``; relative SQLite
    paths against the current directory; anything else (``http://`` for an ``mlflow server``) unchanged."""
    return C.resolve_tracking_uri(uri)


def _sqlite_path(tracking_uri: str) -> Path | None:
    """sqlite:////abs/file.db → /abs/file.db; sqlite:///rel.db → rel.db (relative to the cwd, as SQLAlchemy
    reads it); None for other URIs."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0])


def _trial_record(run_id: str, run_name: str | None, status: str, start_time: int | None, artifact_uri: str | None,
                  tags: dict[str, str], params: dict[str, str], axes: Sequence[str]) -> dict:
    fold = tags.get(C.FOLD, "")
    rec = {
        "run_id": C.results_run_id(run_id, tags),  # a reused trial's results: the run its link names (issue 24)
        "run_name": run_name or "",
        "status": status,
        "start_time": int(start_time or 0),
        "artifact_uri": tags.get(C.REUSED_ARTIFACT_URI) or artifact_uri or "",
        "cell": tags.get(C.CELL, ""),
        "fold": int(fold) if fold.lstrip("-").isdigit() else -1,
        "split_digest": tags.get(C.SPLIT_DIGEST, ""),
        "variant": tags.get(C.VARIANT, ""),
        "config_hash": tags.get(C.CONFIG_HASH, ""),
        "parent_run_id": tags.get(C.PARENT_RUN_ID, ""),
        "lost_source": None if tags.get(C.REUSED_FROM) else "",  # a link: reports.lost_sources tells if it is lost
    }
    for axis in axes:
        rec[f"axis.{axis}"] = tags.get(C.axis_tag(axis))
    for key, value in params.items():
        rec[f"param.{key}"] = value
    return rec


def _trial_frame(records: list[dict], axes: Sequence[str]) -> pd.DataFrame:
    columns = _BASE_COLUMNS + [f"axis.{a}" for a in axes]
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=columns)
    params = sorted(c for c in frame.columns if c.startswith("param."))
    frame = frame.reindex(columns=columns + params)
    frame["fold"] = frame["fold"].astype("int64")
    frame["start_time"] = frame["start_time"].astype("int64")
    return frame.sort_values("run_id", kind="stable").reset_index(drop=True)


def empty_trials(axes: Sequence[str]) -> pd.DataFrame:
    """A trials frame with no run (:meth:`RunSource.trials`' columns): a preview's tables read it."""
    return _trial_frame([], axes)


def _history_frame(names: Sequence[str], codes: np.ndarray, steps: np.ndarray, timestamps: np.ndarray,
                   values: np.ndarray) -> pd.DataFrame:
    """Columns ``run_id`` (``names[codes[i]]``), ``step``, ``value``, sorted by run and step; a step logged twice (a
    trial resumed from an older checkpoint re-evaluates) keeps its latest value by timestamp.

    ``names`` must be sorted, so that sorting by code sorts by run id. Integer codes and numpy sorting instead of a
    string column sorted by pandas: a paper-scale report reads ~1M rows per metric.
    """
    codes, steps = np.asarray(codes, dtype=np.int64), np.asarray(steps, dtype=np.int64)
    timestamps, values = np.asarray(timestamps, dtype=np.int64), np.asarray(values, dtype=float)
    order = np.lexsort((timestamps, steps, codes))          # stable: ties keep the order they were read in
    codes, steps, values = codes[order], steps[order], values[order]
    last = np.ones(len(codes), dtype=bool)
    last[:-1] = (codes[1:] != codes[:-1]) | (steps[1:] != steps[:-1])
    return pd.DataFrame({"run_id": pd.Series(np.asarray(names, dtype=object)[codes[last]], dtype=object),
                         "step": steps[last], "value": values[last]})


def _empty_history() -> pd.DataFrame:
    none = np.zeros(0)
    return _history_frame([], none, none, none, none)


class RunSource:
    """Where trial runs come from: an experiment's trials and their metric histories as frames."""

    label = "--tracking-uri"      # how errors name where the URI came from (see open_run_source)

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri
        self._client: MlflowClient | None = None

    @property
    def client(self) -> MlflowClient:
        """MLflow's client, created on first use: building it imports the SQL store (seconds), which the bulk
        SQLite reader never needs."""
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def experiment_id(self, name: str) -> str:
        """The id of the experiment ``name``; ``ValueError`` naming the experiments there when it is missing, or
        naming the URI when the tracking server does not answer (within ~20 s, see :func:`orchestration.contract.bounded_http`)."""
        with C.bounded_http(self.tracking_uri, self.label):
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise ValueError(f"experiment {name!r}: not found at {self.tracking_uri}; experiments there: "
                                 f"{', '.join(self.experiment_names()) or 'none'}")
        if exp.lifecycle_stage == "deleted":
            raise ValueError(C.deleted_experiment(name, exp.experiment_id, self.tracking_uri))
        return exp.experiment_id

    def experiment_names(self, limit: int = 50) -> list[str]:
        """Names of (up to ``limit``) active experiments in the store, for error messages."""
        return [e.name for e in self.client.search_experiments(max_results=limit)]

    def metric_keys(self, run_ids: Iterable[str]) -> set[str]:
        """Every metric key any of ``run_ids`` logged."""
        raise NotImplementedError

    def trials(self, experiment_id: str, axes: Sequence[str], kind: str = "grid") -> pd.DataFrame:
        """One row per active trial run of ``kind``, every status.

        Columns: ``run_id``, ``run_name``, ``status``, ``start_time`` (ms), ``cell``, ``fold`` (int, -1 if
        untagged), ``split_digest``, ``variant``, ``config_hash``, ``parent_run_id``, ``axis.<axis>`` per axis, and
        ``param.<key>`` per logged param (strings, as MLflow stores them). Sorted by run id.
        """
        raise NotImplementedError

    def histories(self, run_ids: Iterable[str], key: str) -> pd.DataFrame:
        """Every logged value of ``key`` for each run: columns ``run_id``, ``step``, ``value`` (sorted by run,
        step; NaN where NaN was logged)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections (the bulk reader's SQLite handle)."""

    def __enter__(self) -> "RunSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ApiRunSource(RunSource):
    """MLflow's public client API: ``search_runs`` and one ``get_metric_history`` per run (threaded)."""

    def __init__(self, tracking_uri: str):
        super().__init__(tracking_uri)
        self._keys: dict[str, set[str]] = {}     # run id → its metric keys, as search_runs returned them

    def metric_keys(self, run_ids: Iterable[str]) -> set[str]:
        ids = set(run_ids)
        for rid in ids - self._keys.keys():  # a reused trial's source run, in another experiment
            self._keys[rid] = set(self.client.get_run(rid).data.metrics)
        return set().union(*(self._keys.get(r, set()) for r in ids))

    def trials(self, experiment_id: str, axes: Sequence[str], kind: str = "grid") -> pd.DataFrame:
        from mlflow.entities import ViewType

        records = []
        token = None
        while True:
            page = self.client.search_runs([experiment_id], C.trials_filter(kind), ViewType.ACTIVE_ONLY,
                                           max_results=PAGE, page_token=token)
            self._keys.update({r.info.run_id: set(r.data.metrics) for r in page})
            records += [_trial_record(r.info.run_id, r.info.run_name, r.info.status, r.info.start_time,
                                      r.info.artifact_uri, r.data.tags, r.data.params, axes) for r in page]
            token = page.token
            if not token:
                break
        return _trial_frame(records, axes)

    def histories(self, run_ids: Iterable[str], key: str) -> pd.DataFrame:
        names = sorted(set(run_ids))
        if not names:
            return _empty_history()
        with ThreadPoolExecutor(max_workers=min(_HISTORY_WORKERS, len(names))) as pool:
            histories = list(pool.map(lambda rid: self.client.get_metric_history(rid, key), names))
        return _history_frame(names, np.repeat(np.arange(len(names)), [len(h) for h in histories]),
                              np.array([m.step for h in histories for m in h], dtype=np.int64),
                              np.array([m.timestamp for h in histories for m in h], dtype=np.int64),
                              np.array([m.value for h in histories for m in h], dtype=float))


_SCHEMA = {
    "experiments": {"experiment_id", "name", "lifecycle_stage"},
    "runs": {"run_uuid", "name", "status", "start_time", "artifact_uri", "lifecycle_stage", "experiment_id"},
    "tags": {"key", "value", "run_uuid"},
    "params": {"key", "value", "run_uuid"},
    "metrics": {"key", "value", "timestamp", "run_uuid", "step", "is_nan"},
}


class SqliteRunSource(RunSource):
    """Bulk read-only SQL on an MLflow SQLite file (see the module docstring for why and what is read)."""

    def __init__(self, tracking_uri: str, path: Path):
        super().__init__(tracking_uri)
        # mode=ro: a report never writes to the store, even by accident. isolation_level=None (autocommit): the
        # TEMP-table writes below must not open a transaction that would keep a shared lock on the store and block
        # a sweep writing to it while the report builds.
        self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30, isolation_level=None)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def compatible(path: Path) -> bool:
        """Whether the file has the tables and columns this reader expects."""
        try:
            with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
                for table, columns in _SCHEMA.items():
                    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    if not columns <= have:
                        return False
        except sqlite3.Error:
            return False
        return True

    def _chunks(self, sql: str, ids: Sequence[str], *params: object) -> list[tuple]:
        rows: list[tuple] = []
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i:i + _CHUNK]
            rows += self._db.execute(sql.format(ids=",".join("?" * len(chunk))), (*params, *chunk)).fetchall()
        return rows

    def trials(self, experiment_id: str, axes: Sequence[str], kind: str = "grid") -> pd.DataFrame:
        runs = self._db.execute(
            "SELECT r.run_uuid, r.name, r.status, r.start_time, r.artifact_uri FROM runs r "
            "JOIN tags role ON role.run_uuid = r.run_uuid AND role.key = ? AND role.value = ? "
            "JOIN tags kind ON kind.run_uuid = r.run_uuid AND kind.key = ? AND kind.value = ? "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'",
            (C.ROLE, C.ROLE_TRIAL, C.KIND, kind, int(experiment_id))).fetchall()
        ids = [r[0] for r in runs]
        tags: dict[str, dict[str, str]] = {i: {} for i in ids}
        params: dict[str, dict[str, str]] = {i: {} for i in ids}
        for rid, key, value in self._chunks("SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({ids})", ids):
            tags[rid][key] = value
        for rid, key, value in self._chunks("SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({ids})",
                                            ids):
            params[rid][key] = value
        return _trial_frame([_trial_record(rid, name, status, start, uri, tags[rid], params[rid], axes)
                             for rid, name, status, start, uri in runs], axes)

    def experiment_names(self, limit: int = 50) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM experiments WHERE lifecycle_stage = 'active' "
                                               "ORDER BY experiment_id LIMIT ?", (limit,))]

    def metric_keys(self, run_ids: Iterable[str]) -> set[str]:
        # latest_metrics holds one row per (run, key): no pass over every logged value
        table = "latest_metrics" if self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'latest_metrics'").fetchone() else "metrics"
        return {row[0] for row in self._chunks(f"SELECT DISTINCT key FROM {table} WHERE run_uuid IN ({{ids}})",
                                                sorted(set(run_ids)))}

    def experiment_id(self, name: str) -> str:
        row = self._db.execute("SELECT experiment_id, lifecycle_stage FROM experiments WHERE name = ?",
                               (name,)).fetchone()
        if row is not None and row[1] == "deleted":
            raise ValueError(C.deleted_experiment(name, str(row[0]), self.tracking_uri))
        if row is None:
            raise ValueError(f"experiment {name!r}: not found at {self.tracking_uri}; experiments there: "
                             f"{', '.join(self.experiment_names()) or 'none'}")
        return str(row[0])

    def histories(self, run_ids: Iterable[str], key: str) -> pd.DataFrame:
        names = sorted(set(run_ids))
        if not names:
            return _empty_history()
        # The wanted runs go to a TEMP table (allowed on a read-only connection) with an integer code each: one pass
        # over the metric's rows serves any number of runs (`IN (?, …)` chunks would each repeat the pass), and
        # rows stream into numpy as numbers — no 32-character run id string per row.
        self._db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_runs (code INTEGER PRIMARY KEY, run_uuid TEXT UNIQUE)")
        self._db.execute("DELETE FROM temp.wanted_runs")
        self._db.executemany("INSERT INTO temp.wanted_runs VALUES (?, ?)", enumerate(names))
        # MLflow stores a logged NaN as value 0 with is_nan = 1: NULL here, NaN in numpy.
        cursor = self._db.execute(
            "SELECT w.code, m.step, m.timestamp, CASE WHEN m.is_nan THEN NULL ELSE m.value END FROM metrics m "
            "JOIN temp.wanted_runs w ON w.run_uuid = m.run_uuid WHERE m.key = ?", (key,))
        rows = np.fromiter(cursor, dtype=[("code", "i8"), ("step", "i8"), ("ts", "i8"), ("value", "f8")])
        return _history_frame(names, rows["code"], rows["step"], rows["ts"], rows["value"])


def open_run_source(tracking_uri: str, bulk_sqlite: bool = True, label: str = "--tracking-uri") -> RunSource:
    """The reader for ``tracking_uri``: bulk SQL for a compatible SQLite file (unless ``bulk_sqlite`` is False),
    else the public API. An SQLite path that is missing, not a database or not an MLflow store raises
    ``ValueError`` (MLflow would silently create an empty store, or fail with a traceback). ``label`` says in
    errors where the URI came from."""
    path = _sqlite_path(tracking_uri)
    if path is None and "://" not in tracking_uri and not tracking_uri.startswith("file:"):
        # a bare path without .db (those became sqlite: URIs): an SQLite store by another name, or a mistake
        if not Path(tracking_uri).is_file():
            raise ValueError(f"{label} {tracking_uri!r}: not a file, an sqlite:/// URI or a server URL; "
                             "give the store the sweep wrote (mlflow.db) or http://host:port")
        path, tracking_uri = Path(tracking_uri), f"sqlite:///{Path(tracking_uri).resolve()}"
    if path is not None and str(path) != ":memory:":
        C.check_sqlite_store(tracking_uri, path, label)
        if bulk_sqlite and SqliteRunSource.compatible(path):
            source: RunSource = SqliteRunSource(tracking_uri, path)
            source.label = label
            return source
    source = ApiRunSource(tracking_uri)
    source.label = label
    return source


def summarise(histories: pd.DataFrame, protocol: str, window: int = MEDIAN_WINDOW) -> pd.Series:
    """One value per run under ``protocol``: ``best`` (max over steps), ``final`` (last step) or ``median20``
    (median of the last ``window`` evaluations). NaN evaluations are ignored; a run with none gives NaN."""
    if protocol not in ("best", "final", "median20"):
        raise ValueError(f"protocol={protocol!r}: must be one of best, final, median20")
    h = histories.dropna(subset=["value"]).sort_values(["run_id", "step"], kind="stable")
    grouped = h.groupby("run_id", sort=True)["value"]
    if protocol == "best":
        out = grouped.max()
    elif protocol == "final":
        out = grouped.last()
    else:
        out = grouped.apply(lambda v: float(np.median(v.to_numpy()[-window:])))
    return out.reindex(pd.unique(histories["run_id"])).astype(float)


class MetricCache:
    """Metric histories of the used runs, read once per (metric, run) and shared by tables and figures."""

    def __init__(self, source: "RunSource"):
        self.source = source
        # metric → frames, one per read, with the run ids each holds; run id → its frame's index (-1: never logged)
        self._chunks: dict[str, list[tuple[pd.DataFrame, set[str]]]] = {}
        self._chunk_of: dict[str, dict[str, int]] = {}

    def histories(self, metric: str, run_ids: Sequence[str]) -> pd.DataFrame:
        """Histories (``run_id``, ``step``, ``value``) of ``metric`` for ``run_ids``, reading only uncached runs."""
        chunks = self._chunks.setdefault(metric, [])
        chunk_of = self._chunk_of.setdefault(metric, {})
        wanted = set(run_ids)
        missing = sorted(wanted - chunk_of.keys())
        if missing:
            new = self.source.histories(missing, metric)
            logged = set(new["run_id"])
            chunks.append((new, logged))
            chunk_of.update({r: len(chunks) - 1 if r in logged else -1 for r in missing})
        needed = sorted({chunk_of[r] for r in wanted} - {-1})
        if len(needed) == 1 and chunks[needed[0]][1] <= wanted:
            return chunks[needed[0]][0]       # exactly one read's runs (a table's): no pass over ~1M rows
        if not needed:
            return self.source.histories([], metric)
        frame = pd.concat([chunks[i][0] for i in needed], ignore_index=True)
        return frame[frame["run_id"].isin(wanted)].reset_index(drop=True)

    def values(self, metric: str, protocol: str, runs: pd.DataFrame) -> pd.DataFrame:
        """``runs`` plus a ``value`` column: the metric under ``protocol`` ×100 (NaN when never logged)."""
        hist = self.histories(metric, list(runs["run_id"]))
        per_run = C.percent(summarise(hist, protocol))
        out = runs.copy()
        out["value"] = out["run_id"].map(per_run).astype(float)
        return out
