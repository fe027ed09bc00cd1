# OpenSearch 2.19 as kgqr runs it: the integ-test distribution from Maven Central with the
# standard modules, k-NN (lucene engine only: no native libraries), neural-search, the
# security plugin and kgqr's engine guard. `kgqr images build` assembles that install with
# the same code as `kgqr services up` and puts it in this build's context as `opensearch/`.
#
# The security plugin starts unconfigured: docker/compose.yml runs
# plugin/opensearch/security/configure.sh on the config volume first (TLS made with openssl,
# users from the environment). DISABLE_SECURITY_PLUGIN=true runs the node without it (the
# test suite's testcontainers path). Settings with a dot in their name, given in the
# environment (`discovery.type=single-node`), become `-E` options, as in the official image.
ARG BASE_IMAGE=localhost/kgqr-debian:bookworm
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless openssl curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --home-dir /usr/share/opensearch --no-create-home opensearch
ENV OPENSEARCH_HOME=/usr/share/opensearch \
    OPENSEARCH_JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    OPENSEARCH_JAVA_OPTS="-Xms1g -Xmx1g"
COPY --chown=1000:1000 opensearch/ /usr/share/opensearch/
COPY --chown=1000:1000 security/ /kgqr-security/
COPY opensearch-entrypoint.sh /usr/local/bin/opensearch-entrypoint.sh
# Reachable from the container network; a nearly full disk must not turn indices read-only.
RUN printf 'network.host: 0.0.0.0\ncluster.routing.allocation.disk.threshold_enabled: false\n' \
      >> /usr/share/opensearch/config/opensearch.yml \
    && mkdir -p /usr/share/opensearch/data /usr/share/opensearch/logs \
    && mkdir -p /opensearch-ca /opensearch-keys \
    && chown -R 1000:1000 /usr/share/opensearch/data /usr/share/opensearch/logs /opensearch-ca \
                          /opensearch-keys /usr/share/opensearch/config \
    && chmod 700 /opensearch-keys
WORKDIR /usr/share/opensearch
USER 1000:1000
EXPOSE 9200
ENTRYPOINT ["bash", "/usr/local/bin/opensearch-entrypoint.sh"]
