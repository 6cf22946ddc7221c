"""A sweep pointed at a tracking server that does not answer fails within 30 s with one line naming the URI
(MLflow's own retries waited 4 min 14 s in silence, then printed a traceback), before Ray starts."""

from __future__ import annotations

import socket
import time

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
