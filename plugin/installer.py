"""Installs kgqr's definitions into the engines: index templates and the hybrid search
pipeline into OpenSearch, constraints and indexes into Neo4j. Idempotent: run it as
often as you like (ingest jobs run it before writing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugin import schema

if TYPE_CHECKING:
    from kgqr_core.settings import RewriteSettings


def install_opensearch(
    client: Any, dimension: int, rewrite: RewriteSettings, replace_pipelines: bool = True
) -> list[str]:
    """Put every index template and the hybrid pipelines; returns what was installed. The
    pipelines carry `rewrite`'s weights. Without `replace_pipelines` (an ingest, whose
    worker may not be configured as the proxy is) only missing pipelines are put: the
    proxy puts its own weights at start, which it fuses with where it fuses itself, and an
    ingest that put others back left it ranking its callers two ways until it restarted."""
    installed = []
    for name, body in schema.index_templates(dimension).items():
        client.indices.put_index_template(name=name, body=body)
        installed.append(f"index template {name}")
    pipelines = schema.hybrid_pipelines(rewrite.hybrid_weights, rewrite.hybrid_boost_weights)
    for name, body in pipelines.items():
        if not replace_pipelines and _pipeline_exists(client, name):
            continue
        client.transport.perform_request("PUT", f"/_search/pipeline/{name}", body=body)
        installed.append(f"search pipeline {name}")
    return installed


def _pipeline_exists(client: Any, name: str) -> bool:
    from opensearchpy.exceptions import NotFoundError

    try:
        client.transport.perform_request("GET", f"/_search/pipeline/{name}")
    except NotFoundError:
        return False
    return True


def replica_settings(replicas: str) -> dict[str, Any]:
    """`2` -> two replicas; `0-1` -> as many as the nodes allow, up to one."""
    if "-" in replicas:
        return {"auto_expand_replicas": replicas}
    return {"auto_expand_replicas": False, "number_of_replicas": int(replicas)}


def ensure_kb_index(
    client: Any, kb: str, role: str, dimension: int, shards: int = 1, replicas: str = "0-1"
) -> None:
    """Create a knowledge base's `role` index ("documents", "triples") as generation 1
    behind an alias of its name, unless the name exists. Behind an alias, a re-embed
    later moves the name to a new generation while searches still read this one
    (ingest/reembed.py); an index of a KB's own name could only be deleted at the swap."""
    name = schema.kb_index(kb, role)
    if client.indices.exists(index=name):  # an alias, or a concrete index of older kgqr
        return
    body = laid_out(schema.kb_index_body(role, dimension), shards, replicas)
    body["aliases"] = {name: {}}
    create_index(client, schema.generation_index(name, 1), body)


def create_index(client: Any, index: str, body: dict[str, Any]) -> None:
    """Create `index`, unless another worker racing to create it did first."""
    try:
        client.indices.create(index=index, body=body)
    except Exception as exc:
        if "resource_already_exists_exception" not in str(exc):
            raise


def ensure_triples_index(client: Any, kb: str, dimension: int) -> None:
    """The triples index, with the shards and replicas its documents index was given."""
    if client.indices.exists(index=schema.triples_index(kb)):
        return
    shards, replicas = index_layout(client, schema.documents_index(kb))
    ensure_kb_index(client, kb, "triples", dimension, shards, replicas)


def index_layout(client: Any, index: str) -> tuple[int, str]:
    """The shards and replicas (as replica_settings reads them) `index` was given; one
    shard and `0-1` where it does not exist."""
    found = client.indices.get_settings(index=index, ignore_unavailable=True)
    settings = next(iter(found.values()))["settings"]["index"] if found else {}
    replicas = settings.get("auto_expand_replicas", "0-1")
    if replicas == "false":
        replicas = settings["number_of_replicas"]
    return int(settings.get("number_of_shards", 1)), str(replicas)


def laid_out(body: dict[str, Any], shards: int, replicas: str) -> dict[str, Any]:
    """`body` (an index's) with these shards and replicas."""
    body["settings"]["index"].update({"number_of_shards": shards, **replica_settings(replicas)})
    return body


def add_new_fields(client: Any, kb: str, role: str) -> None:
    """Give a knowledge base's existing `role` index ("documents", "triples") the fields
    kgqr's template has gained since it was made (its mapping is strict, so a write with
    them would fail)."""
    index = schema.kb_index(kb, role)
    if not client.indices.exists(index=index):
        return  # made from the current template at the first write
    properties = schema.index_templates(1)[f"kgqr-{role}"]["template"]["mappings"]["properties"]
    fields = {name: mapping for name, mapping in properties.items() if name != "vector"}
    client.indices.put_mapping(index=index, body={"properties": fields})


def install_meta_index(client: Any) -> None:
    """kgqr-meta's template, and the fields it has gained since an existing kgqr-meta was
    made (an attached index's field map would else be mapped field by field). Needs no
    embedder: attaching an index loads none of kgqr's."""
    template = schema.opensearch_resource("kb-meta-template")
    client.indices.put_index_template(name="kgqr-kb-meta", body=template)
    if client.indices.exists(index=schema.META_INDEX):
        current = client.indices.get_mapping(index=schema.META_INDEX)
        client.indices.put_mapping(
            index=schema.META_INDEX, body=schema.meta_mapping_update(current)
        )


# Dynamic labels (`SET n:$(label)`, ingest/graph_writer.py) and `CALL (x) {...}`
# subqueries (5.23) are in no older Neo4j.
OLDEST_NEO4J = (5, 26)


def check_neo4j_version(driver: Any) -> None:
    """Refuse a Neo4j older than kgqr's statements need, before any job: on one, OpenSearch
    took a chunk's documents and every graph write of it failed for good."""
    from neo4j.exceptions import ClientError

    from kgqr_core.settings import ConfigurationError

    try:
        records, _, _ = driver.execute_query(
            "CALL dbms.components() YIELD name, versions WHERE name = 'Neo4j Kernel' "
            "RETURN versions[0] AS version"
        )
    except ClientError:  # a user not allowed to ask: the statements will tell
        return
    version = str(records[0]["version"]) if records else ""
    numbers = tuple(int(part) for part in version.split("-")[0].split(".")[:2] if part.isdigit())
    if len(numbers) == 2 and numbers < OLDEST_NEO4J:
        raise ConfigurationError(
            f"Neo4j {version} is older than kgqr needs (5.26 or later): upgrade it, or "
            "point KGQR_NEO4J_URI at one (`kgqr services up neo4j` runs 5.26)"
        )


def install_neo4j(driver: Any) -> list[str]:
    check_neo4j_version(driver)
    statements = schema.neo4j_statements()
    for statement in statements:
        driver.execute_query(statement)
    return [statement.split(" IF NOT EXISTS")[0] for statement in statements]
