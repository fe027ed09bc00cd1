# Redis from Debian's packages: kgqr's ingest queue and caches. docker/compose.yml gives it
# its password through a config file the container writes itself, never on a command line.
ARG BASE_IMAGE=localhost/kgqr-debian:bookworm
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis /data
WORKDIR /data
USER redis
EXPOSE 6379
# Run on its own it asks for REDIS_PASSWORD too: open, it took anyone's ingest tasks.
CMD ["sh", "-c", "test -n \"$REDIS_PASSWORD\" || { echo 'set REDIS_PASSWORD: this Redis holds the ingest queue' >&2; exit 1; }; umask 077 && printf 'requirepass \"%s\"\\n' \"$REDIS_PASSWORD\" > /tmp/kgqr-redis.conf && exec redis-server /tmp/kgqr-redis.conf --save '' --appendonly no"]
