#!/usr/bin/env bash
# `make test-slurm`: the SLURM route for real on this machine (tests/docker/test_slurm_e2e.py; docker/slurm/README.md,
# "Run for real here").
#   1. a one-node Slurm cluster in a private folder (docker/slurm/local-cluster.sh: MUNGE if none answers,
#      slurmctld, slurmd);
#   2. the test: the quickstart-sized sweep through docker/slurm/sweep.sbatch hits its time limit, is requeued and
#      finishes; a second user's job runs beside it; a third job gets its time-limit signal as its driver starts
#      and is requeued and finishes (issue 40);
#   3. the daemons this run started stopped by their pid files (also after a failure).
# MM_TEST_HOG=N runs N busy loops beside it all (a loaded machine: timing-dependent paths must hold there too),
# stopped by their pids at the end; the load average is printed at the start and the end.
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
HOG_PIDS=()
stop_cluster() {
  local rc=$?
  for pid in "${HOG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  "$REPO/docker/slurm/local-cluster.sh" stop "$CLUSTER"
  if [ $rc = 0 ]; then rm -rf "$CLUSTER"; else echo "[test-slurm] failed: logs kept in $CLUSTER" >&2; fi
}
trap stop_cluster EXIT
for (( i = 0; i < ${MM_TEST_HOG:-0}; i++ )); do
  "$PYTHON" -c "while True: pass" &
  HOG_PIDS+=($!)
done
[ ${#HOG_PIDS[@]} = 0 ] || echo "[test-slurm] ${#HOG_PIDS[@]} busy loops beside the test (pids ${HOG_PIDS[*]})"
echo "[test-slurm] load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
# three 2-CPU jobs side by side (A, B and C of the test); the node's CPUs are declared, not the machine's
export MM_SLURM_CPUS=${MM_SLURM_CPUS:-6}
"$REPO/docker/slurm/local-cluster.sh" start "$CLUSTER"
export SLURM_CONF=$CLUSTER/slurm.conf MM_SLURM_TEST_DIR=$CLUSTER

cd "$REPO"
"$PYTHON" -m pytest -p no:cacheprovider -s -x -m slurm tests/docker/test_slurm_e2e.py
echo "[test-slurm] wall time $(( $(date +%s) - started )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
