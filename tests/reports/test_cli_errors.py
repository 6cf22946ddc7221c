"""Bad input to ``python -m reports.build`` (issue 16): exit code 2, one line naming the input and what is allowed,
no traceback, nothing written — neither the output folder nor anything in the store."""

from __future__ import annotations

import re
import socket
import sqlite3
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from reports.build import main
from reports.latex import TEX_INSTALL


def _runs_in(uri: str) -> int:
    with sqlite3.connect(uri[len("sqlite:///"):]) as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def _refused(capsys, argv: list[str], out: Path) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())
    return err


def _spec_variant(store, tmp_path: Path, edit) -> Path:
    spec = yaml.safe_load(store.spec_path.read_text())
    edit(spec)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return path


@pytest.mark.parametrize("text, expected", [
    ("name: rep\naxes: {m: {a: {}}\n", r"spec '.*bad\.yaml': not valid YAML at line 3, column 1: expected ',' or '}'"),
    ("name: rep\nname: again\n", r"spec '.*bad\.yaml': .*line 2, column 1: duplicate key 'name' \(first at line 1"),
    ("", r"spec '.*bad\.yaml': is empty, expected the experiment's mapping"),
    ("- name: rep\n", r"spec '.*bad\.yaml': top level is a list, expected the experiment's mapping"),
    ("\x00\x01\x02", r"spec '.*bad\.yaml': .*(binary|not allowed|UTF-8)"),
])
def test_broken_or_ambiguous_yaml(store, tmp_path, capsys, text, expected):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    err = _refused(capsys, [str(spec), "--tracking-uri", store.uri, "--out", str(tmp_path / "out")], tmp_path / "out")
    assert re.search(expected, err), err


def test_duplicate_key_inside_a_table_layout(store, tmp_path, capsys):
    text = store.spec_path.read_text().replace("  metric: test/acc\n", "  metric: test/acc\n  metric: val/acc\n", 1)
    assert text.count("metric: val/acc") == 1
    spec = tmp_path / "dup.yaml"
    spec.write_text(text)
    err = _refused(capsys, [str(spec), "--tracking-uri", store.uri, "--out", str(tmp_path / "out")], tmp_path / "out")
    assert "duplicate key 'metric'" in err and "line " in err


def test_spec_that_is_a_folder(store, tmp_path, capsys):
    err = _refused(capsys, [str(tmp_path), "--tracking-uri", store.uri, "--out", str(tmp_path / "out")],
                   tmp_path / "out")
    assert err == f"error: spec {str(tmp_path)!r}: is a directory, expected a YAML file\n"


def test_typo_in_a_table_metric(store, tmp_path, capsys):
    def typo(spec):
        spec["tables"][0]["metric"] = "test/accc"

    before = _runs_in(store.uri)
    err = _refused(capsys, [str(_spec_variant(store, tmp_path, typo)), "--tracking-uri", store.uri, "--out",
                            str(tmp_path / "out")], tmp_path / "out")
    assert err.startswith("error: tables[0](main).metric: 'test/accc' is not a metric the trainer logs; did you "
                          "mean 'test/acc'?")
    assert _runs_in(store.uri) == before


def test_a_metric_these_runs_never_logged(store, tmp_path, capsys):
    """A name the trainer logs, but not for these runs (no validation split): checked against the store."""
    def no_val(spec):
        spec["tables"][0]["metric"] = "val/acc"

    err = _refused(capsys, [str(_spec_variant(store, tmp_path, no_val)), "--tracking-uri", store.uri, "--out",
                            str(tmp_path / "out")], tmp_path / "out")
    assert err.startswith("error: tables[0](main).metric='val/acc': no finished run of experiment 'rep' logged it")
    assert "train/pl_acc" in err


def test_out_below_a_file(store, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("keep me\n")
    out = tmp_path / "notes.txt" / "report"
    err = _refused(capsys, [str(store.spec_path), "--tracking-uri", store.uri, "--out", str(out)], out)
    assert err == f"error: --out {str(out)!r}: {str(tmp_path / 'notes.txt')!r} is a file, not a folder; give a folder\n"
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"


def test_tracking_file_that_is_not_a_database(store, tmp_path, capsys):
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n")
    err = _refused(capsys, [str(store.spec_path), "--tracking-uri", str(notes), "--out", str(tmp_path / "out")],
                   tmp_path / "out")
    assert f"{notes} is not an SQLite database" in err
    assert notes.read_text() == "not a database\n"


def test_missing_experiment_names_the_store_and_what_is_there(store, tmp_path, capsys):
    err = _refused(capsys, [str(store.spec_path), "--tracking-uri", store.uri, "--out", str(tmp_path / "out"),
                            "--experiment-name", "nope"], tmp_path / "out")
    assert err.startswith(f"error: experiment 'nope': not found at {store.uri}; experiments there: Default, rep")


def test_pdf_without_pdflatex_says_how_to_install(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))          # no pdflatex on this PATH
    err = _refused(capsys, [str(store.spec_path), "--tracking-uri", store.uri, "--out", str(tmp_path / "out"),
                            "--format", "md,pdf"], tmp_path / "out")
    assert err == (f"error: --format pdf: pdflatex is not installed (it compiles report.tex); install it with "
                   f"{TEX_INSTALL}, or leave pdf out of --format\n")


def test_unreachable_tracking_server_fails_fast(store, tmp_path, capsys, monkeypatch):
    for var in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:          # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    err = _refused(capsys, [str(store.spec_path), "--tracking-uri", uri, "--out", str(tmp_path / "out")],
                   tmp_path / "out")
    assert time.monotonic() - t0 < 30
    assert err.startswith(f"error: --tracking-uri {uri!r}: the tracking server does not answer (Connection refused)")


def test_a_web_server_that_is_not_mlflow(store, tmp_path, capsys):
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):       # the request log would land in the captured stderr
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)      # answers 404 to MLflow's API
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        err = _refused(capsys, [str(store.spec_path), "--tracking-uri", uri, "--out", str(tmp_path / "out")],
                       tmp_path / "out")
    finally:
        server.shutdown()
        server.server_close()
    assert err == (f"error: --tracking-uri {uri!r}: answers MLflow's API with HTTP 404: not an MLflow tracking "
                   "server, or not its address\n")


@pytest.mark.slow    # three 5-second read timeouts
def test_tracking_server_that_never_answers_fails_within_30_s(store, tmp_path, capsys, monkeypatch):
    for var in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(var, raising=False)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)                   # connections are queued, never answered
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_hold():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_hold, daemon=True)
    thread.start()
    uri = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        err = _refused(capsys, [str(store.spec_path), "--tracking-uri", uri, "--out", str(tmp_path / "out")],
                       tmp_path / "out")
        assert time.monotonic() - t0 < 30
        assert err.startswith(f"error: --tracking-uri {uri!r}: the tracking server does not answer (")
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_missing_default_store_says_it_is_the_default(store, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    err = _refused(capsys, [str(store.spec_path), "--out", str(tmp_path / "out")], tmp_path / "out")
    assert err.startswith(f"error: the default store (no --tracking-uri, no $MLFLOW_TRACKING_URI) "
                          f"'sqlite:///{tmp_path / 'mlflow.db'}': no such file at ")
    assert not (tmp_path / "mlflow.db").exists()


def test_typo_in_a_figure_metric(store, tmp_path, capsys):
    def typo(spec):
        spec["figures"][0]["metrics"] = ["test/acc", "train/pl_ac"]

    err = _refused(capsys, [str(_spec_variant(store, tmp_path, typo)), "--tracking-uri", store.uri, "--out",
                            str(tmp_path / "out")], tmp_path / "out")
    # train/<name> may be a loss term of some algorithm (the report never imports the trainer's registry): checked
    # against what the experiment's runs logged
    assert err.startswith("error: figures(curves).metrics='train/pl_ac': no finished run of experiment 'rep' logged "
                          "it; did you mean 'train/pl_acc'?")
