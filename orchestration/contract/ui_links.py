"""Where the MLflow UI shows a settings' counted runs: the shared view's key, its address and the command that
serves a SQLite store, printed by the sweep, the status and ``mlflow ui`` users alike and written into the report's
``index.md``. Standard library only."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

__all__ = ["RUNS_VIEW_KEY", "UI_HOST", "UI_PORT", "view_key", "runs_view_url", "mlflow_executable", "ui_command",
           "ui_hint"]

# MLflow 3.17 opens an experiment on its GenAI overview unless the sidebar's "Model training" switch (kept per
# browser) or the URL says otherwise, so every printed link names the runs view with ``workflowType=machine_learning``
# and the shared view (``mlflow.sharedViewState.<key>``, what MLflow's "Share" button writes) by its key.
RUNS_VIEW_KEY = "mutexmatch-trials"
UI_HOST, UI_PORT = "127.0.0.1", 5000


def view_key(digest: str = "") -> str:
    """The shared view's key: one per settings digest (a ``--set`` try-out has its own), :data:`RUNS_VIEW_KEY` (the
    latest launch's settings) without one."""
    return f"mutexmatch-{digest}" if digest else RUNS_VIEW_KEY


def _is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def runs_view_url(base: str, experiment_id: str, digest: str = "") -> str:
    """The runs view of experiment ``experiment_id`` at ``base`` (a server's address), opened on the shared view;
    ``base`` a store that is not a server: the address of :func:`ui_command`'s server."""
    base = base if _is_server(base) else f"http://{UI_HOST}:{UI_PORT}"
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={view_key(digest)}")


def mlflow_executable() -> str:
    """The ``mlflow`` of this Python's environment (the venv's: its MLflow wrote the store, and outside an activated
    venv a bare ``mlflow`` is not found, or is another MLflow that may not read the store): ``.venv/bin/mlflow``
    when the environment is a folder of the working directory, else its full path; plain ``mlflow`` when that is the
    one on PATH or there is none."""
    exe = Path(sys.executable).parent / "mlflow"
    if not exe.is_file() or shutil.which("mlflow") == str(exe):
        return "mlflow"
    venv = exe.parent.parent
    return str(exe.relative_to(venv.parent)) if venv.parent == Path.cwd() else str(exe)


def ui_command(tracking_uri: str) -> str:
    """The command that serves a SQLite store's UI on this machine only, with this environment's ``mlflow``."""
    return f"{mlflow_executable()} ui --backend-store-uri {tracking_uri} --host {UI_HOST} --port {UI_PORT}"


def ui_hint(tracking_uri: str, experiment_id: str, digest: str = "") -> str:
    """Where to look at the runs: the runs view of an ``mlflow server`` (not its GenAI overview), or for a SQLite
    store the command that serves it on this machine only, and the same view's address once it runs."""
    url = runs_view_url(tracking_uri, experiment_id, digest)
    return url if _is_server(tracking_uri) else f"{ui_command(tracking_uri)}, then open {url}"
