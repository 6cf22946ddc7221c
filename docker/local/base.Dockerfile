# The local base of docker/Dockerfile on machines that reach no container registry (docker/local-base.sh builds it).
#
# FROM is the Debian bookworm root file system that local-base.sh made with debootstrap and imported; it already has
# python3 (3.11.2), python3-venv and ca-certificates. This stage gives it what python:3.11-slim gives the published
# image: `python` and `pip` first on PATH (a venv, so pip never meets Debian's externally-managed Python), and the
# TLS trust of the host (its CA bundle, which holds the package proxy's CA), so that apt and pip work in builds.
# The build context is docker/.build/ (ignored by git): the bundle is generated there, never committed.
ARG DEBIAN=mutexmatch-debian:bookworm
FROM ${DEBIAN}

ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/usr/local/share/mutexmatch/ca-bundle.crt \
    LANG=C.UTF-8

RUN python3 -m venv /opt/venv

# After every apt-get install of this stage: installing ca-certificates regenerates the system bundle and drops the
# proxy's CA. pip reads its own copy (PIP_CERT) so that a later apt-get in docker/Dockerfile cannot break it.
COPY ca-bundle.crt /etc/ssl/certs/ca-certificates.crt
COPY ca-bundle.crt /usr/local/share/mutexmatch/ca-bundle.crt
