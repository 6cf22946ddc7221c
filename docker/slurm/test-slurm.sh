#!/usr/bin/env bash
# `make test-slurm`: the SLURM route for real on this machine (tests/docker/test_slurm_e2e.py; docker/slurm/README.md,
# "Run for real here").
#   1. a one-node Slurm cluster in a private folder (docker/slurm/local-cluster.sh: MUNGE if none answers,
#      slurmctld, slurmd);
#   2. the test: the quickstart-sized sweep through docker/slurm/sweep.sbatch hits its time limit, is requeued and
#      finishes; a second user's job runs beside it;
#   3. the daemons this run started stopped by their pid files (also after a failure).
# Needs root and `apt-get install slurm-wlm munge`.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
export RAY_USAGE_STATS_ENABLED=0 RAY_USAGE_STATS_REPORT_URL=http://127.0.0.1:9/ MLFLOW_DISABLE_TELEMETRY=true \
  DO_NOT_TRACK=true
started=$(date +%s)
[ "$(id -u)" = 0 ] || { echo "error: make test-slurm needs root (slurmd runs each job as its user)" >&2; exit 1; }
command -v slurmctld >/dev/null && command -v munged >/dev/null \
  || { echo "error: Slurm or MUNGE missing: apt-get install slurm-wlm munge" >&2; exit 1; }

CLUSTER=$(mktemp -d /tmp/mm-slurm-test.XXXXXX)
chmod 755 "$CLUSTER"
stop_cluster() {
  local rc=$?
  "$REPO/docker/slurm/local-cluster.sh" stop "$CLUSTER"
  if [ $rc = 0 ]; then rm -rf "$CLUSTER"; else echo "[test-slurm] failed: logs kept in $CLUSTER" >&2; fi
}
trap stop_cluster EXIT
"$REPO/docker/slurm/local-cluster.sh" start "$CLUSTER"
export SLURM_CONF=$CLUSTER/slurm.conf MM_SLURM_TEST_DIR=$CLUSTER

cd "$REPO"
"$PYTHON" -m pytest -p no:cacheprovider -s -x -m slurm tests/docker/test_slurm_e2e.py
echo "[test-slurm] wall time $(( $(date +%s) - started )) s"
