# PostgreSQL from Debian's package on the local Debian base (docker/local-base.sh builds it): the backend store of
# the MLflow server in the local cluster test (docker/local/cluster.py). The published docker/compose.yaml uses the
# postgres:17 image instead. The cluster initialises its database through the environment, like that image:
# POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB.
ARG DEBIAN=mutexmatch-debian:bookworm
FROM ${DEBIAN}

# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o postgres -g postgres -m 700 /var/lib/postgresql/data

COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
ENV PGDATA=/var/lib/postgresql/data
EXPOSE 5432
CMD ["/usr/local/bin/postgres-entrypoint.sh"]
