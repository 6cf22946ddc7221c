"""MLflow → pandas against the real SQLite store of conftest.py, and the protocols on hand-made histories."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from reports.class_counts import load_class_counts, sum_class_counts
from reports.runs import ApiRunSource, SqliteRunSource, open_run_source, resolve_tracking_uri, summarise
from reports.selection import select_trials

AXES = ["method", "setting", "k"]


def test_summarise_protocols():
    # run a: 25 evaluations 0..24 (in order of step), so best = 24, final = 24, median20 of 5..24 = 14.5;
    # run b: logged out of step order with a NaN evaluation that must be ignored.
    h = pd.DataFrame({"run_id": ["a"] * 25 + ["b"] * 4, "step": list(range(25)) + [30, 10, 20, 40],
                      "value": [float(v) for v in range(25)] + [0.7, 0.9, 0.8, np.nan]})
    assert summarise(h, "best").to_dict() == {"a": 24.0, "b": 0.9}
    assert summarise(h, "final").to_dict() == {"a": 24.0, "b": 0.7}           # step 30: step 40 is NaN
    assert summarise(h, "median20").to_dict() == {"a": 14.5, "b": 0.8}
    assert summarise(h[h["run_id"] == "a"].iloc[::-1], "median20").to_dict() == {"a": 14.5}
    with pytest.raises(ValueError, match=r"protocol='max': must be one of best, final, median20"):
        summarise(h, "max")


@pytest.fixture(params=["sqlite-bulk", "api"])
def source(request, store):
    src = open_run_source(store.uri, bulk_sqlite=request.param == "sqlite-bulk")
    assert isinstance(src, SqliteRunSource if request.param == "sqlite-bulk" else ApiRunSource)
    return src


def test_load_trials_and_select(source, store):
    trials = source.trials(source.experiment_id("rep"), AXES)
    grid_ids = set(store.run_ids.values()) | {store.ignored[k] for k in ("duplicate", "failed", "fold7")}
    assert set(trials["run_id"]) == grid_ids                 # no parent, smoke or search run
    row = trials.set_index("run_id").loc[store.run_ids[("fixmatch", "d40", "k5", 2)]]
    assert (row["cell"], row["fold"], row["status"]) == ("method=fixmatch,setting=d40,k=k5", 2, "FINISHED")
    assert (row["axis.method"], row["axis.k"], row["param.data.split_rule"]) == ("fixmatch", "k5", "official")
    assert row["split_digest"] == "split-d40-2"
    used, dupes, unfinished = select_trials(trials, [0, 1, 2, 3, 4])
    assert set(used["run_id"]) == set(store.run_ids.values())
    assert list(dupes["run_id"]) == [store.ignored["duplicate"]]
    assert list(unfinished["run_id"]) == [store.ignored["failed"]]
    assert not used.duplicated(["cell", "fold"]).any()


def test_load_histories_reads_every_step(source, store):
    ids = [store.run_ids[("mutexmatch", "d20", "k5", 0)], store.run_ids[("supervised", "d20", "k5", 4)]]
    h = source.histories(ids, "test/acc")
    assert list(h.columns) == ["run_id", "step", "value"]
    assert h.groupby("run_id")["step"].apply(list).to_dict() == {i: [10, 20, 30, 40] for i in ids}
    v = h[h["run_id"] == ids[1]]["value"].to_numpy()
    assert v == pytest.approx([0.81, 0.84, 0.82, 0.83])     # 84 + (−3, 0, −2, −1), in [0, 1]
    assert source.histories(ids, "never/logged").empty
    assert source.histories([], "test/acc").empty


def test_class_counts_last_step_and_sum(source, store):
    trials = source.trials(source.experiment_id("rep"), AXES).set_index("run_id")
    uris = [trials.loc[store.run_ids[("mutexmatch", "d20", "k5", f)], "artifact_uri"] for f in range(5)]
    assert all(u.endswith(f"/{store.run_ids[('mutexmatch', 'd20', 'k5', f)]}/artifacts") for f, u in enumerate(uris))
    last = load_class_counts(uris[2])
    assert last["step"] == 40 and last["pseudo_label_counts"][0] == [12, 1, 0]
    assert load_class_counts(uris[2], read_local=False) == last      # the same file through mlflow.artifacts
    with pytest.raises(ValueError, match=r"has no class_counts/step_\*\.json artifact"):
        load_class_counts(trials.loc[store.run_ids[("supervised", "d20", "k5", 1)], "artifact_uri"],
                          read_local=False)
    assert load_class_counts(uris[2], step=10)["pseudo_label_counts"] == [[1, 1, 1]] * 3
    with pytest.raises(ValueError, match=r"step=20: .* has class counts at steps \[10, 40\]"):
        load_class_counts(uris[2], step=20)
    with pytest.raises(ValueError, match=r"has no class_counts/step_\*\.json artifact"):
        load_class_counts(trials.loc[store.run_ids[("supervised", "d20", "k5", 1)], "artifact_uri"])
    pseudo, comp, steps = sum_class_counts(uris)
    assert steps == [40] * 5
    assert pseudo[0].tolist() == [10 + 11 + 12 + 13 + 14, 5, 0]   # row 0 is [10 + fold, 1, 0] per fold
    assert comp.tolist() == [[0, 20, 30], [25, 0, 25], [35, 15, 0]]
    fixmatch = [trials.loc[store.run_ids[("fixmatch", "d20", "k5", f)], "artifact_uri"] for f in range(2)]
    pseudo, comp, steps = sum_class_counts(fixmatch)                # no TNC: no complementary-label matrix
    assert comp is None and pseudo[0].tolist() == [10 + 11, 2, 0]
    with pytest.raises(ValueError, match=r"has no comp_label_counts, unlike"):
        sum_class_counts(uris[:1] + fixmatch)


def test_bulk_sqlite_reader_equals_public_api(store):
    """The fast reader must return exactly what MLflow's public API returns, NaN evaluations included."""
    bulk, api = open_run_source(store.uri), open_run_source(store.uri, bulk_sqlite=False)
    exp = api.experiment_id("rep")
    for kind in ("grid", "smoke"):
        pd.testing.assert_frame_equal(bulk.trials(exp, AXES, kind), api.trials(exp, AXES, kind))
    ids = list(api.trials(exp, AXES)["run_id"])
    for key in ("test/acc", "train/pl_acc", "train/nan_metric"):
        pd.testing.assert_frame_equal(bulk.histories(ids, key), api.histories(ids, key))
    assert bulk.histories(ids, "train/nan_metric")["value"].isna().sum() == len(ids)


def test_open_run_source_errors(store, tmp_path):
    with pytest.raises(ValueError, match=r"--tracking-uri 'sqlite:///.*nothing\.db': no such file at"):
        open_run_source(f"sqlite:///{tmp_path / 'nothing.db'}")
    assert not (tmp_path / "nothing.db").exists()
    with pytest.raises(ValueError, match=r"experiment 'other': not found at .*; experiments there: .*rep"):
        open_run_source(store.uri).experiment_id("other")
    with sqlite3.connect(tmp_path / "other.db") as db:       # MLflow's tables, other columns: the API reader
        db.execute("CREATE TABLE experiments (experiment_id INTEGER)")
        db.execute("CREATE TABLE runs (run_uuid TEXT)")
    assert not SqliteRunSource.compatible(tmp_path / "other.db")
    assert isinstance(open_run_source(f"sqlite:///{tmp_path / 'other.db'}"), ApiRunSource)


@pytest.mark.parametrize("name, content, message", [
    ("notes.db", b"some notes, not a database\n", r"notes\.db is not an SQLite database"),
    ("empty.db", b"", r"empty\.db is empty, not an MLflow store"),
    ("plain.db", None, r"plain\.db is an SQLite database but not an MLflow store"),
    ("notes.txt", b"some notes\n", r"notes\.txt is not an SQLite database"),
])
def test_a_file_that_is_not_an_mlflow_store_is_refused(tmp_path, name, content, message):
    path = tmp_path / name
    if content is None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE t (x INTEGER)")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    uri = str(path) if name.endswith(".txt") else f"sqlite:///{path}"
    with pytest.raises(ValueError, match=message):
        open_run_source(resolve_tracking_uri(uri))
    assert path.read_bytes() == before                     # nothing created or migrated in it
    with pytest.raises(ValueError, match=r"not a file, an sqlite:/// URI or a server URL"):
        open_run_source(str(tmp_path / "absent.txt"))


def test_resolve_tracking_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(None) == f"sqlite:///{tmp_path / 'mlflow.db'}"        # the sweep's default
    assert resolve_tracking_uri("runs/m.db") == f"sqlite:///{tmp_path / 'runs' / 'm.db'}"
    assert resolve_tracking_uri("sqlite:///m.db") == f"sqlite:///{tmp_path / 'm.db'}"
    assert resolve_tracking_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert resolve_tracking_uri(None) == "http://mlflow:5000"


def test_bulk_reader_does_not_block_a_writing_sweep(store):
    """Reading (TEMP-table writes included) must leave no open transaction holding a lock on the store."""
    from mlflow import MlflowClient

    src = open_run_source(store.uri)
    ids = list(src.trials(src.experiment_id("rep"), AXES)["run_id"])
    assert len(src.histories(ids, "test/acc")) == 4 * len(ids)
    writer = MlflowClient(tracking_uri=store.uri)
    run = writer.create_run(writer.get_experiment_by_name("rep").experiment_id, tags={"mutexmatch.role": "other"})
    writer.log_metric(run.info.run_id, "x", 1.0, step=1)      # raised "database is locked" before the fix
    writer.delete_run(run.info.run_id)
    src.close()
