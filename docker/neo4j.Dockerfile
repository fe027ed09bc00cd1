# Neo4j 5.26 as kgqr runs it: the embedded kernel and Bolt connector from Maven Central
# (Neo4j's server distribution is not there) and a small launcher that registers kgqr's
# procedures (plugin/neo4j). `kgqr images build` resolves the jars and compiles the
# launcher with the same code as `kgqr services up` and puts them in this build's context
# as `neo4j/`. The embedded server has no authentication: keep it on a private network
# (docker/compose.yml publishes no port of it).
ARG BASE_IMAGE=localhost/kgqr-debian:bookworm
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 7474 --no-create-home neo4j && mkdir /data && chown neo4j /data
COPY neo4j/ /opt/neo4j/
ENV NEO4J_HEAP_MB=512 NEO4J_PAGECACHE_MB=256
USER neo4j
EXPOSE 7687
VOLUME /data
ENTRYPOINT ["sh", "-c", "exec java -Xms${NEO4J_HEAP_MB}m -Xmx${NEO4J_HEAP_MB}m -cp '/opt/neo4j/classes:/opt/neo4j/lib/*' KgqrNeo4jLauncher /data 0.0.0.0 7687 ${NEO4J_PAGECACHE_MB}"]
