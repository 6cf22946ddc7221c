"""Test-wide settings: closed network, no telemetry, deterministic CPU threads."""
import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_REPORT_URL", "http://127.0.0.1:9/")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# Every command honours $MLFLOW_TRACKING_URI when no --tracking-uri is given (orchestration.contract): a developer's
# server must never receive the tests' runs, and the tests must find the stores they create.
os.environ.pop("MLFLOW_TRACKING_URI", None)
