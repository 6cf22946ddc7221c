"""Environment for a closed network: no usage reports, no telemetry, in this process and every child it starts.

Ray sends a usage report from ``ray.init``/``ray start`` unless told not to (and even with
``RAY_USAGE_STATS_ENABLED=0`` one report goes to ``RAY_USAGE_STATS_REPORT_URL`` — pointed here at a closed local
port), and MLflow 3 sends telemetry by default. Setting the variables in ``os.environ`` before ``ray``/``mlflow``
are imported covers the driver and the local Ray processes it spawns (they inherit the environment);
:data:`CLOSED_NETWORK_ENV` is also passed as the ``runtime_env`` of a local Ray and applied again by the trainable
itself, which covers trials scheduled on a cluster started elsewhere.
"""

from __future__ import annotations

import os

__all__ = ["CLOSED_NETWORK_ENV", "TUNE_ENV", "apply_closed_network_env"]

CLOSED_NETWORK_ENV: dict[str, str] = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}


# Tune settings read from the environment (by the driver and, for the first one, by every trial worker):
# - a reused actor waits this long for the previous trial's thread to end; the default 2 s is shorter than a trial
#   needs to finish its MLflow bookkeeping, and a failed reset errors the *next* trial;
# - CheckpointConfig(num_to_keep) forces an experiment snapshot after checkpoints; that is wanted (it makes
#   --resume lose less work), so Tune's warning about frequent snapshots is silenced;
# - Tune calls an operation of its loop (processing a trial's result: our searcher's Optuna write, a checkpoint
#   snapshot) "a performance bottleneck" above 0.5 s, which a shared 2-core machine passes at every report and
#   which no setting of ours can change: the quickstart's last screen filled with it (issue 34). 30 s still names a
#   real stall. Read when ray.tune is imported, so set before that.
TUNE_ENV: dict[str, str] = {
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "60",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "TUNE_WARN_THRESHOLD_S": "30",
}


def apply_closed_network_env() -> None:
    """Set the closed-network and Tune variables in ``os.environ`` (values already set by the user are kept), and
    MLflow artifact downloads through the server's proxy (:func:`orchestration.contract.prefer_artifact_proxy`)."""
    from orchestration.contract import prefer_artifact_proxy

    for key, value in {**CLOSED_NETWORK_ENV, **TUNE_ENV}.items():
        os.environ.setdefault(key, value)
    prefer_artifact_proxy()
