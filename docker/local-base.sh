#!/usr/bin/env bash
# Build the project image (docker/Dockerfile) on a machine that reaches no container registry, only Debian's and
# PyPI's package servers (possibly through a TLS-intercepting proxy). Run from anywhere, as a user who may run
# docker and (for the first step) debootstrap:
#
#   docker/local-base.sh            # each step is skipped when its result already exists
#   docker/local-base.sh --rebuild  # rebuild the project image (the sources changed), keep base and wheels
#
# Steps, each cached:
#   1. docker/.build/ca/ca-bundle.crt: the host's CA bundle (it holds the proxy's CA), so apt and pip work in builds.
#   2. mutexmatch-debian:bookworm: `debootstrap --variant=minbase bookworm` (python3 3.11.2, python3-venv,
#      ca-certificates) imported with `docker import`, then docker/local/base.Dockerfile: a venv first on PATH
#      (`python`, `pip`, as python:3.11-slim has them) and the CA bundle.
#   3. docker/.build/wheels/: every wheel the image needs, downloaded on the host with the host's pip (whose local
#      index holds the pinned torch wheel), at the versions of the project's venv.
#   4. mutexmatch-deps:bookworm: step 2's image with those wheels installed from a read-only bind mount (no network,
#      and the wheels never become an image layer), committed.
#   5. $MUTEXMATCH_IMAGE (default mutexmatch:0.1.0-local): docker/Dockerfile with --build-arg BASE=mutexmatch-deps:
#      bookworm; its `pip install` lines then find every pinned requirement installed and only install the project.
#   6. mutexmatch-postgres:15: Debian's PostgreSQL 15 on mutexmatch-debian:bookworm (docker/local/postgres.Dockerfile).
#
# Torch: the pinned torch==2.14.1 wheel is the CUDA 13.0 build with its nvidia-* wheels (PyPI has no other build of
# it and the CPU index is not reachable here); it runs on CPU in these containers. The published image
# (`docker build -f docker/Dockerfile .` on python:3.11.14-slim-bookworm) installs the same wheels from PyPI.
# Everything generated lives in docker/.build/, which git ignores. The classic builder is used (DOCKER_BUILDKIT=0):
# Debian's docker.io has no buildx, and BuildKit would try to pull the `# syntax=` frontend image.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$REPO/docker/.build"
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
IMAGE=${MUTEXMATCH_IMAGE:-mutexmatch:0.1.0-local}
DEBIAN_IMAGE=mutexmatch-debian:bookworm
DEPS_IMAGE=mutexmatch-deps:bookworm
POSTGRES_IMAGE=mutexmatch-postgres:15
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export DOCKER_BUILDKIT=0

log() { printf '[local-base %(%H:%M:%S)T] %s\n' -1 "$*"; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

[ -x "$PYTHON" ] || { echo "error: PYTHON=$PYTHON: no such interpreter; run 'make install' or set PYTHON" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "error: no Docker daemon answers 'docker info'; start dockerd first" >&2; exit 1; }
mkdir -p "$BUILD"

ca_bundle() {
  mkdir -p "$BUILD/ca"  # the build context of base.Dockerfile: the bundle alone, not the rootfs or the wheels
  install -m 644 "${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$BUILD/ca/ca-bundle.crt"
}

debian_image() {
  have_image "$DEBIAN_IMAGE" && return
  local rootfs="$BUILD/rootfs"
  if [ ! -x "$rootfs/usr/bin/python3" ]; then
    command -v debootstrap >/dev/null || { echo "error: debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
    log "debootstrap bookworm into $rootfs (about a minute)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR" \
      > "$BUILD/debootstrap.log" 2>&1 || { tail -20 "$BUILD/debootstrap.log" >&2; exit 1; }
  fi
  # debootstrap can leave /proc and /sys of the chroot mounted; they must not end up in the image
  for m in proc sys dev/pts; do mountpoint -q "$rootfs/$m" && umount "$rootfs/$m"; done
  log "docker import $rootfs as mutexmatch-debian:rootfs"
  tar -C "$rootfs" -c . | docker import - mutexmatch-debian:rootfs >/dev/null
  docker build -q -f "$REPO/docker/local/base.Dockerfile" --build-arg DEBIAN=mutexmatch-debian:rootfs \
    -t "$DEBIAN_IMAGE" "$BUILD/ca" >/dev/null
}

requirements() {
  # The pins of docker/Dockerfile (torch, the server drivers) and the project's dependencies, as the Dockerfile reads
  # them, plus moto[server]: the S3 stand-in of the cluster test (MinIO has no Debian package).
  grep -o 'torch==[^ ]*\|torchvision==[^ ]*\|boto3==[^ ]*\|psycopg2-binary==[^ ]*' "$REPO/docker/Dockerfile" | sort -u
  "$PYTHON" -c "import tomllib; print('\n'.join(tomllib.load(open('$REPO/pyproject.toml', 'rb'))['project']['dependencies']))"
  echo "moto[server]==5.2.5"
}

wheels() {
  local want="$BUILD/requirements.txt" wheels="$BUILD/wheels"
  requirements > "$want.new"
  if [ -f "$wheels/.complete" ] && cmp -s "$want.new" "$want"; then rm "$want.new"; return; fi
  mv "$want.new" "$want"
  # the versions of the project's venv, so that the cluster runs exactly what `ray job submit` runs on the host
  "$PYTHON" -m pip freeze --exclude-editable | grep -v ' @ ' > "$BUILD/constraints.txt"
  log "pip download into $wheels"
  rm -rf "$wheels" && mkdir -p "$wheels"
  "$PYTHON" -m pip download --only-binary=:all: -d "$wheels" -r "$want" -c "$BUILD/constraints.txt" \
    > "$BUILD/pip-download.log" 2>&1 || { tail -20 "$BUILD/pip-download.log" >&2; exit 1; }
  touch "$wheels/.complete"
}

deps_image() {
  if have_image "$DEPS_IMAGE" && [ "$(docker image inspect -f '{{index .Config.Labels "requirements"}}' "$DEPS_IMAGE")" \
       = "$(sha256sum < "$BUILD/requirements.txt" | cut -c1-16)" ]; then return; fi
  log "installing the wheels into $DEPS_IMAGE (several minutes: torch and its CUDA libraries unpack to ~5 GB)"
  local name="mutexmatch-deps-build-$$"
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run --name "$name" --network none -v "$BUILD/wheels:/wheels:ro" -v "$BUILD/requirements.txt:/requirements.txt:ro" \
    "$DEBIAN_IMAGE" pip install -q --no-cache-dir --no-index --find-links /wheels -r /requirements.txt
  docker commit --change "LABEL requirements=$(sha256sum < "$BUILD/requirements.txt" | cut -c1-16)" \
    --change 'CMD ["python3"]' "$name" "$DEPS_IMAGE" >/dev/null
  docker rm "$name" >/dev/null
}

project_image() {
  if have_image "$IMAGE" && [ "${1:-}" != --rebuild ]; then return; fi
  log "docker build -f docker/Dockerfile --build-arg BASE=$DEPS_IMAGE -t $IMAGE ."
  docker build -q -f "$REPO/docker/Dockerfile" --build-arg "BASE=$DEPS_IMAGE" -t "$IMAGE" "$REPO" >/dev/null
}

postgres_image() {
  have_image "$POSTGRES_IMAGE" && return
  log "docker build $POSTGRES_IMAGE (Debian's postgresql-15)"
  docker build -q -f "$REPO/docker/local/postgres.Dockerfile" --build-arg "DEBIAN=$DEBIAN_IMAGE" \
    -t "$POSTGRES_IMAGE" "$REPO/docker/local" >/dev/null
}

ca_bundle
debian_image
wheels
deps_image
project_image "${1:-}"
postgres_image
log "images: $IMAGE $DEPS_IMAGE $POSTGRES_IMAGE $DEBIAN_IMAGE"
