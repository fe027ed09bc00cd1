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
CMD ["redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
