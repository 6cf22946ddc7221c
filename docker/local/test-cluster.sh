#!/usr/bin/env bash
# `make test-cluster`: the container cluster for real (tests/docker/test_local_cluster.py), from a machine with
# Docker Engine and Debian's package servers but no container registry (docker/README.md, "Run for real here").
#   1. start dockerd if no daemon answers (and stop it again at the end: only the one started here);
#   2. build the images with docker/local-base.sh (base, wheels and dependencies cached; the project layer rebuilt,
#      so the image runs this checkout's code);
#   3. run the test, which brings the stack up, runs the sweep and the faults, and removes the containers, the
#      network and the volume.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
started=$(date +%s)
dockerd_pid=

stop_dockerd() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 1; done
    echo "[test-cluster] stopped the dockerd this run started (pid $dockerd_pid)"
  fi
}
trap stop_dockerd EXIT

if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { echo "error: no Docker daemon and no dockerd: apt-get install docker.io" >&2; exit 1; }
  mkdir -p "$REPO/docker/.build"
  dockerd > "$REPO/docker/.build/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 "$REPO/docker/.build/dockerd.log" >&2; exit 1; }
  echo "[test-cluster] started dockerd (pid $dockerd_pid)"
fi

PYTHON="$PYTHON" "$REPO/docker/local-base.sh" --rebuild
cd "$REPO"
"$PYTHON" -m pytest -p no:cacheprovider -s -x -m cluster tests/docker/test_local_cluster.py
echo "[test-cluster] wall time $(( $(date +%s) - started )) s"
