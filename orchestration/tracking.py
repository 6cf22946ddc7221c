"""The MLflow layout of a sweep (fixed; the reports read it — see the README's MLflow section).

- one MLflow experiment per sweep YAML, named by its ``name``;
- one *parent* run per sweep launch (``mutexmatch.role=sweep``, spec hash and path, git commit, the YAML as the
  artifact ``spec.yaml``), open (RUNNING) while the launch runs;
- one *child* run per trial (``mlflow.parentRunId``, ``mutexmatch.role=trial``, ``mutexmatch.kind``, the cell and
  its axes, fold, variant, config hash, split digest, git commit, trial id), named ``<cell id>/fold<k>``;
  params = the resolved RunConfig flattened with dots; metrics at ``step=`` the training step; artifacts
  ``config.yaml``, ``split.json``, ``weights/{best,final}_model.pt``, ``class_counts/step_<step>.json``, and the
  final checkpoint under ``checkpoints/``.

Only :class:`mlflow.MlflowClient` is used (no fluent ``mlflow.start_run`` state), so the driver and every trial
process address runs by id and a restarted trial continues *its* run. Terminal statuses: FINISHED (trained to the
end, or stopped early by ASHA — tagged ``mutexmatch.early_stopped=true``), FAILED (raised), KILLED (interrupted).
No run is left RUNNING: the trial ends its own run, the driver reconciles what a dead process could not end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from orchestration.env import apply_closed_network_env

apply_closed_network_env()

from mlflow import MlflowClient  # noqa: E402  (telemetry must be off before mlflow is imported)
from mlflow.entities import Metric, Param, Run, RunTag, ViewType  # noqa: E402

__all__ = [
    "TAG", "ROLE_SWEEP", "ROLE_TRIAL",
    "resolve_tracking_uri", "artifact_location", "ensure_experiment", "git_commit", "flatten_params",
    "create_parent_run", "find_resumable_parent", "trial_tags", "find_trial_run", "iter_runs",
    "finished_grid_hashes", "finished_search_runs", "end_run", "kill_dead_launches", "end_open_children",
    "log_metrics", "log_params_and_tags", "ParentInfo",
]

TAG = "mutexmatch."
ROLE_SWEEP = "sweep"
ROLE_TRIAL = "trial"
_PAGE = 1000


def resolve_tracking_uri(uri: str | None, project_dir: Path) -> str:
    """The tracking URI trials can use from any working directory.

    Default ``sqlite:///<project>/mlflow.db``. A relative SQLite path and a bare ``*.db`` path are made absolute
    against ``project_dir`` (trials run inside Ray's temporary folder). ``http(s)://`` (an ``mlflow server``) and
    other schemes are passed through. MLflow 3's plain file store (``./mlruns``, ``file:``) is refused: it raises
    in every process unless ``MLFLOW_ALLOW_FILE_STORE`` is set.
    """
    project_dir = Path(project_dir).resolve()
    if uri is None:
        return f"sqlite:///{project_dir / 'mlflow.db'}"
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        return f"sqlite:///{path if path.is_absolute() else (project_dir / path).resolve()}"
    if uri.startswith("file:") or "://" not in uri and not uri.endswith(".db"):
        raise ValueError(f"--tracking-uri={uri!r}: use sqlite:////abs/path/mlflow.db (one machine) or "
                         "http://host:port (an mlflow server); MLflow 3 refuses the plain file store")
    if "://" not in uri:
        path = Path(uri)
        return f"sqlite:///{path if path.is_absolute() else (project_dir / path).resolve()}"
    return uri


def artifact_location(tracking_uri: str) -> str | None:
    """For a SQLite store: ``<db folder>/mlruns`` as an absolute file URI, so artifacts land beside the database
    whatever the working directory of the process that creates the experiment. Servers choose their own."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri[len("sqlite:///"):]).parent / "mlruns").as_uri()
    return None


def ensure_experiment(client: MlflowClient, name: str, tracking_uri: str) -> str:
    """The id of experiment ``name``, created (or restored from the trash) if needed. Called in the driver before
    any trial starts, so trials never race on creating the SQLite schema or the experiment."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return client.create_experiment(name, artifact_location=artifact_location(tracking_uri))
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def git_commit(project_dir: Path) -> str:
    """``$MUTEXMATCH_GIT_COMMIT`` if set (a job's working dir has no .git), else ``git rev-parse HEAD`` with a
    ``-dirty`` suffix when tracked files differ from it, else ``unknown``."""
    if os.environ.get("MUTEXMATCH_GIT_COMMIT"):
        return os.environ["MUTEXMATCH_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project_dir, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=project_dir,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The resolved RunConfig as MLflow params: ``algorithm.tau`` → ``"0.95"`` (``str`` of each leaf value)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(flatten_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


def iter_runs(client: MlflowClient, experiment_id: str, filter_string: str = "",
              order_by: list[str] | None = None) -> Iterator[Run]:
    """Every active run matching ``filter_string``, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string, ViewType.ACTIVE_ONLY, max_results=_PAGE,
                                  order_by=order_by, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass(frozen=True)
class ParentInfo:
    run_id: str
    launch_id: str
    storage: str


def create_parent_run(client: MlflowClient, experiment_id: str, *, launch_id: str, spec_path: Path,
                      spec_text: str, spec_hash: str, commit: str, storage: str, smoke: bool,
                      command: str) -> ParentInfo:
    """The parent run of one sweep launch, RUNNING until :func:`end_run`. ``mutexmatch.driver_*`` tags let a later
    launch on the same host tell whether this driver is still alive."""
    tags = {f"{TAG}role": ROLE_SWEEP, f"{TAG}spec_hash": spec_hash, f"{TAG}spec_path": str(spec_path),
            f"{TAG}git_commit": commit, f"{TAG}launch_id": launch_id, f"{TAG}storage": storage,
            f"{TAG}smoke": str(smoke).lower(), f"{TAG}driver_host": socket.gethostname(),
            f"{TAG}driver_pid": str(os.getpid()), f"{TAG}command": command[:5000]}
    run = client.create_run(experiment_id, tags=tags, run_name=f"sweep {launch_id}" + (" (smoke)" if smoke else ""))
    client.log_text(run.info.run_id, spec_text, "spec.yaml")
    return ParentInfo(run.info.run_id, launch_id, storage)


def find_resumable_parent(client: MlflowClient, experiment_id: str, *, spec_hash: str, storage: str,
                          smoke: bool) -> Run | None:
    """The newest launch of this spec (same hash, storage and smoke flag) — what ``--resume`` continues."""
    flt = (f"tags.`{TAG}role` = '{ROLE_SWEEP}' AND tags.`{TAG}spec_hash` = '{spec_hash}' AND "
           f"tags.`{TAG}smoke` = '{str(smoke).lower()}'")
    for run in iter_runs(client, experiment_id, flt, order_by=["attributes.start_time DESC"]):
        if run.data.tags.get(f"{TAG}storage") == storage:
            return run
    return None


def trial_tags(*, parent_run_id: str, kind: str, cell_levels: Iterable[tuple[str, str]], cell_id: str, fold: int,
               variant: str, config_hash: str, commit: str, trial_id: str, launch_id: str) -> dict[str, str]:
    tags = {"mlflow.parentRunId": parent_run_id, f"{TAG}role": ROLE_TRIAL, f"{TAG}kind": kind,
            f"{TAG}cell": cell_id, f"{TAG}fold": str(fold), f"{TAG}variant": variant,
            f"{TAG}config_hash": config_hash, f"{TAG}git_commit": commit, f"{TAG}trial_id": trial_id,
            f"{TAG}launch_id": launch_id}
    tags.update({f"{TAG}axis.{a}": lv for a, lv in cell_levels})
    return tags


def find_trial_run(client: MlflowClient, experiment_id: str, trial_id: str, launch_id: str) -> Run | None:
    """The run of Tune trial ``trial_id`` of launch ``launch_id`` (Tune keeps trial ids across restarts and
    ``Tuner.restore``; the launch id guards against the rare id reused by another launch)."""
    flt = f"tags.`{TAG}trial_id` = '{trial_id}' AND tags.`{TAG}launch_id` = '{launch_id}'"
    runs = list(iter_runs(client, experiment_id, flt, order_by=["attributes.start_time ASC"]))
    return runs[0] if runs else None


def finished_grid_hashes(client: MlflowClient, experiment_id: str, kind: str = "grid") -> dict[str, set[str]]:
    """``<cell id>/fold<k>`` → config hashes of FINISHED trial runs of ``kind`` (what a relaunch may skip)."""
    flt = (f"tags.`{TAG}role` = '{ROLE_TRIAL}' AND tags.`{TAG}kind` = '{kind}' AND "
           "attributes.status = 'FINISHED'")
    done: dict[str, set[str]] = {}
    for run in iter_runs(client, experiment_id, flt):
        t = run.data.tags
        done.setdefault(f"{t.get(TAG + 'cell')}/fold{t.get(TAG + 'fold')}", set()).add(t.get(TAG + "config_hash", ""))
    return done


def finished_search_runs(client: MlflowClient, experiment_id: str, search_hash: str) -> list[Run]:
    flt = (f"tags.`{TAG}role` = '{ROLE_TRIAL}' AND tags.`{TAG}kind` = 'search' AND "
           f"tags.`{TAG}search_hash` = '{search_hash}' AND attributes.status = 'FINISHED'")
    return list(iter_runs(client, experiment_id, flt))


def end_run(client: MlflowClient, run_id: str, status: str) -> None:
    client.set_terminated(run_id, status, end_time=int(time.time() * 1000))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_open_children(client: MlflowClient, experiment_id: str, parent_run_id: str, status: str,
                      keep: set[str] = frozenset()) -> list[Run]:
    """End every RUNNING child of ``parent_run_id`` (except run ids in ``keep``) with ``status``; return them."""
    flt = f"tags.`mlflow.parentRunId` = '{parent_run_id}' AND attributes.status = 'RUNNING'"
    ended = [r for r in iter_runs(client, experiment_id, flt) if r.info.run_id not in keep]
    for run in ended:
        client.set_tag(run.info.run_id, f"{TAG}ended_by", "driver")
        end_run(client, run.info.run_id, status)
    return ended


def kill_dead_launches(client: MlflowClient, experiment_id: str) -> list[Run]:
    """Parent runs left RUNNING by a driver on this host that no longer exists (SIGKILL, power loss): end them and
    their RUNNING children as KILLED, so the store never shows work as running that is not. Returns the parents."""
    host = socket.gethostname()
    flt = f"tags.`{TAG}role` = '{ROLE_SWEEP}' AND attributes.status = 'RUNNING'"
    dead = []
    for run in iter_runs(client, experiment_id, flt):
        t = run.data.tags
        pid = t.get(f"{TAG}driver_pid", "")
        if t.get(f"{TAG}driver_host") != host or not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(
                int(pid)):
            continue
        end_open_children(client, experiment_id, run.info.run_id, "KILLED")
        client.set_tag(run.info.run_id, f"{TAG}ended_by", "next launch (driver process was gone)")
        end_run(client, run.info.run_id, "KILLED")
        dead.append(run)
    return dead


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    ts = int(time.time() * 1000)
    batch = [Metric(k, float(v), ts, step) for k, v in metrics.items()]
    for i in range(0, len(batch), 1000):  # MLflow's per-request limit
        client.log_batch(run_id, metrics=batch[i:i + 1000])


def log_params_and_tags(client: MlflowClient, run_id: str, params: Mapping[str, str],
                        tags: Mapping[str, str] = {}) -> None:
    ps = [Param(k, v) for k, v in params.items()]
    ts = [RunTag(k, v) for k, v in tags.items()]
    for i in range(0, max(len(ps), len(ts), 1), 100):  # MLflow accepts at most 100 params per request
        client.log_batch(run_id, params=ps[i:i + 100], tags=ts[i:i + 100])
