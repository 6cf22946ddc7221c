"""A sweep pointed at a tracking server that does not answer fails within 30 s with one line naming the URI
(MLflow's own retries waited 4 min 14 s in silence, then printed a traceback), before Ray starts; one that answers
HTTP 500 or a web page is said to be failing, or not MLflow, instead."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestration import sweep

SPEC = """name: dead
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  train: {{iterations: 4, eval_interval: 2, batch_size: 4, mu: 2}}
folds: [0]
axes:
  method:
    fixmatch: {{algorithm: {{name: fixmatch}}}}
"""


def test_unreachable_tracking_server_fails_fast_naming_it(tmp_path, data_root, capsys, monkeypatch):
    for var in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dead.yaml").write_text(SPEC.format(root=data_root))
    with socket.socket() as s:          # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    code = sweep.main(["dead.yaml", "--tracking-uri", uri])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - t0 < 30
    assert err.startswith(f"error: --tracking-uri {uri!r}: the tracking server does not answer"), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ray_results").exists()


class _Failing(BaseHTTPRequestHandler):
    """HTTP 500 with MLflow's JSON error (``/500``) or 200 with a proxy's HTML page (``/html``), to every request."""

    def _answer(self) -> None:
        if self.server.mode == "500":
            code, body = 500, json.dumps({"error_code": "INTERNAL_ERROR", "message": "boom"}).encode()
        else:
            code, body = 200, b"<html><head><title>Welcome to nginx!</title></head><body>nginx</body></html>"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("mode, expect", [
    ("500", "answers HTTP 500 (INTERNAL_ERROR: boom): the tracking server is failing; see its log"),
    ("html", "answers with a web page ('Welcome to nginx!'), not MLflow's JSON: not an MLflow tracking server, or "
             "not its address")])
def test_a_failing_server_or_a_web_page_is_said_as_such_not_as_a_dead_server(mode, expect, tmp_path, data_root,
                                                                              capsys, monkeypatch):
    """Issue 33 (http500-*, httphtml-*): both read 'the tracking server does not answer; start it', though it is up."""
    from orchestration import status

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")   # the user's setting wins: no 3 s of back-off
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dead.yaml").write_text(SPEC.format(root=data_root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    server.mode = mode
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for main in (sweep.main, status.main):
            assert main(["dead.yaml", "--tracking-uri", uri]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"error: --tracking-uri {uri!r}: {expect}") and len(err.splitlines()) == 1, err
    finally:
        server.shutdown()
        server.server_close()
    assert not (tmp_path / "ray_results").exists()
