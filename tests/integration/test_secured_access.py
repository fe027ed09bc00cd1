"""kgqr never widens anyone's access, proved on a real OpenSearch with its security plugin
(`kgqr services up opensearch-secured`): TLS, users, roles, document-level security.

Users: `reader` reads the whole knowledge base; `restricted` reads it through a DLS role
that hides Al Pacino (p2), the middle of the shortest path from Heat to The Insider;
`outsider` has no access to it. kgqr's own service user
(`kgqr`) may not read knowledge-base documents at all, so any request kgqr sent as itself
instead of as the caller would show up as a 403 for `reader`.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import secrets
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from pydantic import SecretStr

from ingest import graph_projection, job_runner
from ingest.chunk_ingest import ingest_chunk
from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.records import CorpusTriple, Document
from ingest.sources import open_source
from ingest.worker_resources import WorkerResources
from kgqr_core import connections
from kgqr_core.connections import basic_authorization
from kgqr_core.embedder import get_embedder
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.cli import main
from kgqr_ops.nginx_front import running_front
from kgqr_ops.services.secured_opensearch import (
    BROWSER_APP_ORIGIN,
    IMPERSONATED,
    IMPERSONATOR,
    SecuredCredentials,
    SecuredOpenSearchNode,
)
from plugin import kb_meta, schema
from plugin.kb_meta import DocumentStructure
from plugin.security_roles import kgqr_roles
from query_rewriter import metrics
from query_rewriter.engine.caller import IMPERSONATION_HEADER
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.engine.node_plugins import NEURAL_SEARCH, nodes_plugins
from query_rewriter.graph.store import Neo4jGraph
from query_rewriter.search.kb_indices import MISS_TTL_S
from query_rewriter.search.state import knowledge_base_names
from query_rewriter.strategies.agent.executor import execute
from query_rewriter.strategies.agent.plan import Plan
from query_rewriter.strategies.agent.plan_book import PlanBook, PlanEntry
from query_rewriter.strategies.context import StrategyContext
from tests.container_services import secured_container
from tests.integration.ingest_helpers import TINY_KB
from tests.integration.recording_llm import recording_llm
from tests.integration.search_helpers import metric_sample
from tests.service_discovery import wants_containers

KB = "sec-movies"
INDEX = schema.documents_index(KB)
HIDDEN = "Al Pacino"  # p2, hidden from `restricted` by DLS
QUERY = {"query": {"match": {"text": "Heat, the 1995 film about bank robbers"}}, "size": 8}
# A corpus graph for KG-CQR: passage p2 is hidden by the same DLS rule, while its triples
# stay readable in the triples index: kgqr itself must keep them from the restricted user.
CHAIN_KB = "sec-chain"
CHAIN_HIDDEN = "Delta Labs"
# A corpus graph whose hidden passage (p2, a leaked memo) is the only source of one edge
# between two entities; the report d9 is reached from Acme only along that edge.
OWNERS_KB = "sec-owners"
OWNERS_RECORDS = [
    record.model_dump(mode="json")
    for record in [
        Document(id="p1", type="passage", title="Acme history", text="Acme is based in Oslo."),
        Document(id="p2", type="passage", title="A leaked memo",
                 text="Acme is secretly owned by Evilcorp."),
        Document(id="d9", type="passage", title="Annual report",
                 text="Evilcorp reported record profits."),
        CorpusTriple(head="Acme", relation="is based in", tail="Oslo",
                     ttr="Acme is based in Oslo.", ttr_source="given", passage_id="p1"),
        CorpusTriple(head="Acme", relation="is secretly owned by", tail="Evilcorp",
                     ttr="Acme is secretly owned by Evilcorp.", ttr_source="given",
                     passage_id="p2"),
        CorpusTriple(head="Evilcorp", relation="reported", tail="record profits",
                     ttr="Evilcorp reported record profits.", ttr_source="given",
                     passage_id="d9"),
    ]
]  # fmt: skip
# A team's own index attached as a knowledge base (`kgqr kb attach`), under the same
# roles: `restricted` reads it with p2 hidden, `kgqr` may not read it at all.
TEAM_KB = "sec-team"
TEAM_INDEX = "team-secured-movies"
# A team's shop index whose graph comes from its `brand` field (`kgqr kb graph
# --from-fields`): `brandless` reads every product but not its brand, `masked` sees it hashed.
SHOP_KB = "sec-shop"
SHOP_INDEX = "team-secured-shop"
# Of the corpus graphs' knowledge bases, callers may read the documents only, as operators
# should grant them: their triples are kgqr's to search and to check for each caller.
PATTERNS = [f"kgqr-{KB}-*", f"kgqr-{CHAIN_KB}-documents*", f"kgqr-{OWNERS_KB}-documents*",
            TEAM_INDEX, SHOP_INDEX]  # fmt: skip
# The agent's stored plan for the movie KB: the film a question names, then its cast.
CAST_PLAN = {
    "steps": [
        {"id": "film", "op": "search", "text": "{query}", "type": "movie", "k": 1},
        {"id": "cast", "op": "follow", "from": "film", "relation": "starring", "type": "person"},
        {"id": "ranked", "op": "rank", "from": "cast", "text": "{query}"},
    ]
}
RENDER = "indices:data/read/search/template/render"
ROLES: dict[str, dict[str, Any]] = {
    "kgqr_test_reader": {
        # Rendering a search template (`_render/template`) is a cluster permission.
        "cluster_permissions": ["cluster_composite_ops_ro", RENDER],
        "index_permissions": [{"index_patterns": PATTERNS, "allowed_actions": ["read"]}],
    },
    "kgqr_test_restricted": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {
                "index_patterns": PATTERNS,
                "allowed_actions": ["read"],
                # By _id: the team's index has no `id` field of kgqr's.
                "dls": json.dumps({"bool": {"must_not": {"ids": {"values": ["p2"]}}}}),
            }
        ],
    },
    "kgqr_test_outsider": {"cluster_permissions": ["cluster_composite_ops_ro"]},
    # Reads every document, but not its title (field-level security).
    "kgqr_test_untitled": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~title"]}
        ],
    },
    # Reads every document, but not kgqr's `id` field, which its lookups read ids from.
    "kgqr_test_idless": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~id"]}
        ],
    },
    # Reads every document, with kgqr's `id` field masked (hashes in its doc values).
    "kgqr_test_idmasked": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "masked_fields": ["id"]}
        ],
    },
    "kgqr_test_brandless": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~brand"]}
        ],
    },
    # Reads every document by id, but not the text the graph's facts were read from.
    "kgqr_test_textless": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~body", "~text"]}
        ],
    },
    "kgqr_test_textmasked": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {
                "index_patterns": PATTERNS,
                "allowed_actions": ["read"],
                "masked_fields": ["body", "text"],
            }
        ],
    },
    # Reads every field until a test narrows its field-level security mid-run.
    "kgqr_test_shifting": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [{"index_patterns": PATTERNS, "allowed_actions": ["read"]}],
    },
    "kgqr_test_masked": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"], "masked_fields": ["brand"]}
        ],
    },
    # Searches the KB and keeps the tuning page's judgments and rankings.
    "kgqr_test_tuner": {
        "cluster_permissions": ["cluster_composite_ops_ro"],
        "index_permissions": [
            {"index_patterns": PATTERNS, "allowed_actions": ["read"]},
            {
                "index_patterns": [f"{schema.JUDGMENTS_INDEX}*", f"{schema.TUNE_RUNS_INDEX}*"],
                "allowed_actions": ["crud", "create_index"],
            },
        ],
    },
}


def _script(prompt: str) -> str:
    """The stand-in LLM's answers: an entity list for KAR's parse, KG-CQR's filter (keep
    every triple shown) and context (the facts it was given), documents otherwise."""
    if '"entities"' in prompt:
        return json.dumps(
            {"entities": [{"type": "movie", "name": "Heat", "document": "Heat: a crime film"}]}
        )
    if '{"keep"' in prompt:
        return json.dumps({"keep": list(range(1, 21))})
    if '{"context"' in prompt:
        return json.dumps({"context": prompt.rsplit("Facts:", 1)[-1][:600]})
    return json.dumps({"documents": ["A crime film about bank robbers and a detective."]})


@pytest.fixture(scope="module")
def secured(settings: Settings) -> Iterator[SecuredCredentials]:
    """The local secured node, or one in a container from kgqr's image when the suite runs
    on containers (KGQR_TEST_SERVICES=containers)."""
    if wants_containers():
        with secured_container(settings) as credentials:
            yield credentials
        return
    node = SecuredOpenSearchNode(settings)
    if not node.is_healthy():
        pytest.fail(
            "no secured OpenSearch answers on port "
            f"{settings.opensearch.secured_port}: run `kgqr services up opensearch-secured`"
        )
    yield node.credentials()


def _trusting(secured: SecuredCredentials) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(secured.ca_file))


def _as(settings: Settings, credentials: SecuredCredentials, user: str, password: str) -> Settings:
    return settings.replaced(
        {
            "opensearch_url": credentials.url,
            "opensearch_user": user,
            "opensearch_password": SecretStr(password),
            "opensearch_ca_certs": credentials.ca_file,
        }
    )


@pytest.fixture(scope="module")
def users(secured: SecuredCredentials) -> dict[str, str]:
    """The test users (name -> Basic header), made afresh through the security REST API."""
    headers: dict[str, str] = {}
    with httpx.Client(
        base_url=secured.url,
        verify=_trusting(secured),
        headers={"authorization": secured.admin_authorization},
    ) as admin:
        for role, definition in ROLES.items():
            user = role.removeprefix("kgqr_test_")
            password = secrets.token_urlsafe(12) + "Aa1!"
            for path, body in (
                (f"roles/{role}", definition),
                (f"internalusers/{user}", {"password": password}),
                (f"rolesmapping/{role}", {"users": [user]}),
            ):
                answer = admin.put(f"/_plugins/_security/api/{path}", json=body)
                assert answer.status_code in (200, 201), answer.text
            headers[user] = basic_authorization(user, password)
    headers["kgqr"] = basic_authorization("kgqr", secured.kgqr_password)
    return headers


@contextmanager
def _ingested(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any,
    kb: str, write: Callable[[Settings, Any, WorkerResources, int], None],
) -> Iterator[str]:  # fmt: skip
    """A knowledge base written into the secured node as kgqr-ingest (role kgqr_ingest)
    by the real ingest code run in-process (a Celery worker would write to the plain
    node), dropped afterwards."""
    ingester = _as(settings, secured, "kgqr-ingest", secured.ingest_password)
    opensearch = connections.opensearch_client(ingester)
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
    resources = WorkerResources(ingester)
    dimension = job_runner.prepare_stores(ingester, opensearch, neo4j_driver)
    write(ingester, opensearch, resources, dimension)
    opensearch.indices.refresh(index=f"kgqr-{kb}-*")
    try:
        yield schema.documents_index(kb)
    finally:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
        opensearch.close()
        resources.neo4j.close()


@pytest.fixture(scope="module")
def secured_kb(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any
) -> Iterator[str]:
    """The movie KB, through the ingest job runner."""

    def write(
        ingester: Settings, opensearch: Any, resources: WorkerResources, dimension: int
    ) -> None:
        def send(job_id: str, chunk: int, records: list[Any], extract: bool) -> None:
            ingest_chunk(resources, job_id, KB, chunk, records, extract)

        job_runner.enqueue(
            open_source(TINY_KB), TINY_KB, KB, settings=ingester, opensearch=opensearch,
            jobs=JobStore(redis_client), send=send, dimension=dimension, restart=True,
        )  # fmt: skip
        meta = kb_meta.load(opensearch, KB)
        assert meta is not None
        plans = PlanBook(entries=[PlanEntry(category="cast", template=CAST_PLAN)])
        kb_meta.record(opensearch, meta.kb, {"agent_plans": plans.model_dump_json()})

    with _ingested(settings, secured, neo4j_driver, redis_client, KB, write) as index:
        yield index


def _corpus_kb(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any,
    kb: str, records: list[dict[str, Any]], documents: int,
) -> Iterator[str]:  # fmt: skip
    """A corpus graph (passages and their triples) written in one chunk."""

    def write(ingester: Settings, opensearch: Any, resources: WorkerResources, _: int) -> None:
        outcome = ingest_chunk(resources, f"{kb}-{uuid.uuid4().hex[:8]}", kb, 0, records)
        assert outcome.counts["documents"] == documents and outcome.counts["triples"] > 0

    with _ingested(settings, secured, neo4j_driver, redis_client, kb, write) as index:
        yield index


@pytest.fixture(scope="module")
def secured_chain_kb(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any
) -> Iterator[str]:
    """test_kgcqr's chain corpus graph."""
    from tests.integration.test_kgcqr import CHAIN_RECORDS

    yield from _corpus_kb(settings, secured, neo4j_driver, redis_client, CHAIN_KB, CHAIN_RECORDS, 2)


@pytest.fixture(scope="module")
def secured_owners_kb(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any
) -> Iterator[str]:
    yield from _corpus_kb(
        settings, secured, neo4j_driver, redis_client, OWNERS_KB, OWNERS_RECORDS, 3
    )


@pytest.fixture(scope="module")
def proxy(
    settings: Settings, secured: SecuredCredentials, secured_kb: str
) -> Iterator[tuple[str, list[str]]]:
    """kgqr serve in front of the secured node as its service user, with a recording LLM
    (a model name of this run's own, so no cached answer hides a prompt)."""
    with recording_llm(_script) as (llm_url, prompts):
        proxied = _as(settings, secured, "kgqr", secured.kgqr_password).replaced(
            {
                "llm_base_url": llm_url,
                "llm_model": f"stand-in-{uuid.uuid4().hex[:8]}",
                "query_log_enabled": True,
                "graph_snapshot_preload": "*",
            }
        )
        with running_proxy(proxied) as url:
            yield url, prompts


@pytest.fixture(scope="module")
def front(
    settings: Settings, secured: SecuredCredentials, proxy: tuple[str, list[str]]
) -> Iterator[str]:
    proxied = _as(settings, secured, "kgqr", secured.kgqr_password)
    kgqr_port = int(proxy[0].rsplit(":", 1)[1])
    with running_front(proxied, "127.0.0.1", free_port(), kgqr_port) as url:
        yield url


@pytest.fixture(params=["proxy", "front"])
def entry(request: pytest.FixtureRequest, proxy: tuple[str, list[str]], front: str) -> str:
    """Where a caller points: `kgqr serve` itself, or its nginx front."""
    return proxy[0] if request.param == "proxy" else front


def _search(url: str, who: str | None, users: dict[str, str], strategy: str) -> httpx.Response:
    headers = {"authorization": users[who]} if who else {}
    params = {"kgqr.strategy": strategy}
    return httpx.post(
        f"{url}/{INDEX}/_search", params=params, json=QUERY, headers=headers, timeout=120
    )


def _explained(
    url: str,
    index: str,
    strategy: str,
    body: dict[str, Any],
    headers: dict[str, str],
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """A search of `index` through kgqr with `strategy` (and kgqr `params`), explained."""
    asked = {"kgqr.strategy": strategy, "kgqr.explain": "true", **(params or {})}
    return httpx.post(f"{url}/{index}/_search", params=asked, json=body, headers=headers,
                      timeout=120)  # fmt: skip


def _ids(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {hit["_id"] for hit in response.json()["hits"]["hits"]}


def test_kgqrs_own_account_cannot_read_the_knowledge_base(
    secured: SecuredCredentials, secured_kb: str, users: dict[str, str]
) -> None:
    """The premise of the tests below: a request kgqr sent as itself would be refused."""
    as_kgqr = {"authorization": users["kgqr"]}
    answer = httpx.post(
        f"{secured.url}/{INDEX}/_search", json=QUERY, headers=as_kgqr, verify=_trusting(secured)
    )
    assert answer.status_code == 403


def test_kgqrs_own_account_reads_the_graphs_copy_by_id_and_nothing_more(
    secured: SecuredCredentials, secured_kb: str, users: dict[str, str]
) -> None:
    """The copy is read like Neo4j, with kgqr's account: node by node, never searched or
    written (ingest's account writes it)."""
    as_kgqr = {"authorization": users["kgqr"]}
    copy = f"{secured.url}/{schema.graph_index(KB)}"
    got = httpx.post(f"{copy}/_mget", json={"ids": ["m1"]}, headers=as_kgqr,
                     verify=_trusting(secured))  # fmt: skip
    assert got.status_code == 200 and got.json()["docs"][0]["found"], got.text
    searched = httpx.post(f"{copy}/_search", json={}, headers=as_kgqr, verify=_trusting(secured))
    assert searched.status_code == 403
    written = httpx.put(f"{copy}/_doc/x", json={"type": "movie"}, headers=as_kgqr,
                        verify=_trusting(secured))  # fmt: skip
    assert written.status_code == 403


@pytest.mark.parametrize("kb", ["query-log-archive", "judgments-2026", "tune-runs-x"])
def test_kgqrs_own_account_reads_no_knowledge_base_named_like_its_bookkeeping(
    kb: str, secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """kgqr's role once covered `kgqr-query-log*` (and judgments, tune runs), so it could
    read, write and delete a knowledge base named `query-log-...`."""
    index = schema.documents_index(kb)
    with httpx.Client(base_url=secured.url, verify=_trusting(secured)) as client:
        admin = {"authorization": secured.admin_authorization}
        as_kgqr = {"authorization": users["kgqr"]}
        client.put(f"/{index}/_doc/1", params={"refresh": "true"}, json={"id": "1"},
                   headers=admin).raise_for_status()  # fmt: skip
        try:
            assert client.get(f"/{index}/_doc/1", headers=as_kgqr).status_code == 403
            assert client.delete(f"/{index}", headers=as_kgqr).status_code == 403
            # Its bookkeeping it still keeps.
            logged = client.post(f"/{schema.QUERY_LOG_INDEX}/_doc", json={"kb": kb},
                                 params={"refresh": "true"}, headers=as_kgqr)  # fmt: skip
            assert logged.status_code == 201, logged.text
            client.delete(f"/{schema.QUERY_LOG_INDEX}/_doc/{logged.json()['_id']}",
                          headers=as_kgqr).raise_for_status()  # fmt: skip
        finally:
            client.delete(f"/{index}", headers=admin)


@pytest.mark.parametrize("account", ["kgqr", "kgqr-ingest"])
def test_kgqrs_accounts_read_the_nodes_and_not_other_callers_requests(
    account: str, secured: SecuredCredentials
) -> None:
    """kgqr's accounts once held `cluster_monitor`: every caller's running search, body
    and all (`_tasks?detailed`), and every team's mappings (`_cluster/state`), were theirs
    to read, where kgqr needs only the nodes' addresses and plugins."""
    password = secured.kgqr_password if account == "kgqr" else secured.ingest_password
    with httpx.Client(
        base_url=secured.url,
        verify=_trusting(secured),
        headers={"authorization": basic_authorization(account, password)},
    ) as client:
        nodes = client.get("/_nodes/http,plugins")
        assert nodes.status_code == 200, nodes.text
        for path in ("/_tasks?detailed=true", "/_cluster/state/metadata", "/_cluster/stats"):
            assert client.get(path).status_code == 403, path
        # Every caller's scrolls ended at once: kgqr reads without scrolls.
        assert client.delete("/_search/scroll/_all").status_code == 403


def test_the_proxy_reads_the_nodes_plugins_with_kgqrs_own_account(
    secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """The proxy fuses in the engine's pipeline when every node has neural search; it asks
    with kgqr's account, which may read the nodes and nothing wider (`_cat/plugins` needs
    the cluster state: refused, the proxy assumed neural search without knowing)."""

    async def read() -> dict[str, set[str]] | None:
        async with httpx.AsyncClient(
            base_url=secured.url,
            verify=_trusting(secured),
            headers={"authorization": users["kgqr"]},
        ) as kgqr:
            return await nodes_plugins(kgqr)

    plugins = asyncio.run(read())
    assert plugins, "kgqr's account could not read the nodes' plugins"
    assert all(NEURAL_SEARCH in names for names in plugins.values()), plugins


def test_kgqr_plugin_roles_narrows_a_role_a_cluster_was_first_given(
    secured: SecuredCredentials, kgqr_env: Callable[..., None]
) -> None:
    """A cluster keeps the roles it was first set up with: one set up before 2026-12-01
    gave kgqr's account `cluster_monitor` until an operator put the role again."""
    role_url = f"{secured.url}/_plugins/_security/api/roles/kgqr_service"
    admin = {"authorization": secured.admin_authorization}
    earlier = copy.deepcopy(kgqr_roles()["kgqr_service"])
    earlier["cluster_permissions"] = ["cluster_monitor", *earlier["cluster_permissions"][1:]]
    put = httpx.put(role_url, json=earlier, headers=admin, verify=_trusting(secured))
    assert put.status_code == 200, put.text

    def roles(user: str, password: str, *args: str) -> Result:
        kgqr_env(KGQR_OPENSEARCH_URL=secured.url, KGQR_OPENSEARCH_CA_CERTS=str(secured.ca_file),
                 KGQR_OPENSEARCH_USER=user, KGQR_OPENSEARCH_PASSWORD=password)  # fmt: skip
        return CliRunner().invoke(main, ["plugin", "roles", *args])

    try:
        refused = roles("kgqr", secured.kgqr_password)
        assert refused.exit_code == 1 and "kgqr may not change roles" in refused.output
        checked = roles("admin", secured.admin_password, "--check")
        assert checked.exit_code == 1, checked.output
        assert "kgqr_service: differs\n  - cluster: cluster_monitor\n" in checked.output
        assert "kgqr_ingest: as kgqr defines it" in checked.output
        applied = roles("admin", secured.admin_password)
        assert applied.exit_code == 0 and "kgqr_service: put" in applied.output, applied.output
        assert "  + cluster: cluster:monitor/nodes/info" in applied.output
        now = httpx.get(role_url, headers=admin, verify=_trusting(secured)).json()
        assert "cluster_monitor" not in now["kgqr_service"]["cluster_permissions"]
        again = roles("admin", secured.admin_password, "--check")
        assert again.exit_code == 0 and "kgqr_service: as kgqr defines it" in again.output
    finally:
        httpx.put(role_url, json=kgqr_roles()["kgqr_service"], headers=admin,
                  verify=_trusting(secured)).raise_for_status()  # fmt: skip


def test_the_ingest_account_copies_a_graph_again_whole(
    settings: Settings, secured: SecuredCredentials, secured_kb: str, neo4j_driver: Any
) -> None:
    """`kgqr kb project` reads the copy back to remove nodes Neo4j no longer has: read by a
    scroll, the ingest account was refused ending it (a cluster action, which would end
    every caller's scrolls), and the command failed once every node was written."""
    ingester = _as(settings, secured, "kgqr-ingest", secured.ingest_password)
    opensearch = connections.opensearch_client(ingester)
    try:
        current = graph_projection.state(opensearch, KB)
        assert current is not None and current.complete
        written, removed = graph_projection.project_all(neo4j_driver, opensearch, KB,
                                                        current.edges)  # fmt: skip
        assert written > 0 and removed == 0
        assert graph_projection.state(opensearch, KB) == current  # complete again
    finally:
        opensearch.close()


def test_the_node_reads_no_key_that_signs_certificates(settings: Settings) -> None:
    """The CA's key (a node certificate signed with it joins the cluster) and the admin
    certificate's (it passes every role) lay in the config folder the node reads; they are
    kept apart, readable by whoever runs kgqr only, as is the admin's password."""
    if wants_containers():
        pytest.skip("the compose stack's test checks its node's certificates")
    node = SecuredOpenSearchNode(settings)
    certs = sorted(path.name for path in (node.config_dir / "certs").iterdir())
    assert certs == ["node-key.pem", "node.pem", "root-ca.pem"], certs
    assert (node.keys_dir / "root-ca-key.pem").is_file()
    kept = node.keys_dir.stat()
    # Not the node's user's when kgqr runs as root (its data folder is handed to that user).
    assert kept.st_mode & 0o077 == 0 and kept.st_uid == os.getuid()
    assert node.credentials_file == node.keys_dir / "credentials.json"
    assert node.credentials_file.is_file() and not (node.data_dir / "credentials.json").exists()
    held = node.credentials_file.stat()
    assert held.st_mode & 0o077 == 0 and held.st_uid == os.getuid()


def test_every_path_runs_as_the_caller(entry: str, users: dict[str, str]) -> None:
    url = entry
    # Pass-through (a strategy-less count; a size-0 search kgqr reads to explain), a
    # rewritten search, and a rewritten msearch item.
    totals = {}
    for who, expected in (("reader", 200), ("restricted", 200), ("outsider", 403)):
        auth = {"authorization": users[who]}
        count = httpx.get(f"{url}/{INDEX}/_count", headers=auth, timeout=60)
        assert count.status_code == expected, (who, count.text)
        facets = httpx.post(
            f"{url}/{INDEX}/_search",
            params={"kgqr.strategy": "hyde", "kgqr.explain": "true"},
            json={**QUERY, "size": 0},
            headers=auth,
            timeout=60,
        )
        assert facets.status_code == expected, (who, facets.text)
        assert "passed_through" in facets.json()["kgqr"]
        totals[who] = facets.json().get("hits", {}).get("total", {}).get("value")
        rewritten = _search(url, who, users, "base")
        assert rewritten.status_code == expected, (who, rewritten.text)
        lines = [{"index": INDEX}, QUERY, {"index": INDEX}, {"query": {"match_all": {}}}]
        ndjson = {**auth, "content-type": "application/x-ndjson"}
        content = "".join(json.dumps(line) + "\n" for line in lines)
        msearch = httpx.post(f"{url}/_msearch", headers=ndjson, content=content, timeout=60)
        assert msearch.status_code == 200
        assert [r["status"] for r in msearch.json()["responses"]] == [expected, expected], who
        # OpenSearch's own word on whom it served, passed through.
        whoami = httpx.get(f"{url}/_plugins/_security/authinfo", headers=auth, timeout=60)
        assert whoami.json()["user_name"] == who
    reader = _ids(_search(url, "reader", users, "base"))
    restricted = _ids(_search(url, "restricted", users, "base"))
    assert "p2" in reader and "p2" not in restricted  # DLS saw the caller, not kgqr
    assert totals["reader"] == totals["restricted"] + 1 and totals["outsider"] is None


def test_a_search_template_is_rendered_and_searched_as_the_caller(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """kgqr has the engine render a template search with the caller's credentials and
    searches what it renders as them. `reader` may render: rewritten. `restricted` may
    not (a cluster permission it lacks): passed through, and the engine's own template
    search still hides p2. `outsider`: the engine's 403."""
    inline = json.dumps({"query": {"match": {"text": "{{q}}"}}, "size": 8})
    template = {"source": inline, "params": {"q": "Heat, the 1995 film about bank robbers"}}
    answers = {
        who: httpx.post(
            f"{proxy[0]}/{INDEX}/_search/template",
            params={"kgqr.strategy": "base", "kgqr.explain": "true"},
            json=template,
            headers={"authorization": users[who]},
            timeout=60,
        )
        for who in ("reader", "restricted", "outsider")
    }
    assert answers["reader"].json()["kgqr"]["strategy"] == "base"
    assert "p2" in _ids(answers["reader"])
    explain = answers["restricted"].json()["kgqr"]
    assert "did not render the template for the caller (403)" in explain["passed_through"]
    assert "p2" not in _ids(answers["restricted"]) and _ids(answers["restricted"])
    assert answers["outsider"].status_code == 403
    # _msearch/template: rewritten for `reader`; `restricted` may not msearch templates at
    # all, and the engine's refusal comes back as it would directly.
    ndjson = json.dumps({"index": INDEX}) + "\n" + json.dumps(template) + "\n"
    multi = {
        who: httpx.post(
            f"{proxy[0]}/_msearch/template",
            params={"kgqr.strategy": "base", "kgqr.explain": "true"},
            content=ndjson,
            headers={"authorization": users[who], "content-type": "application/x-ndjson"},
            timeout=60,
        )
        for who in ("reader", "restricted")
    }
    (item,) = multi["reader"].json()["responses"]
    assert item["kgqr"]["strategy"] == "base" and "p2" in {h["_id"] for h in item["hits"]["hits"]}
    assert multi["restricted"].status_code == 403
    assert "indices:data/read/msearch/template" in multi["restricted"].text


def test_no_credentials_get_opensearchs_401_and_no_rewrite(
    entry: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    url, prompts = entry, proxy[1]
    before = len(prompts)
    assert httpx.get(f"{url}/{INDEX}/_count").status_code == 401
    assert httpx.delete(f"{url}/{INDEX}").status_code == 401
    hyde = _search(url, None, users, "hyde")
    assert hyde.status_code == 401
    wrong_password = {"authorization": basic_authorization("reader", "wrong")}
    wrong = httpx.post(
        f"{url}/{INDEX}/_search",
        params={"kgqr.strategy": "hyde"},
        json=QUERY,
        headers=wrong_password,
    )
    assert wrong.status_code == 401
    assert len(prompts) == before  # refused callers cost no LLM call


def test_kgqr_and_its_front_lend_kgqrs_account_to_the_same_callers(
    settings: Settings, secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """With KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT on, a request carrying none of the
    credential headers kgqr knows runs as kgqr's account, and one carrying any (a session
    cookie, proxy authentication) is the caller's for the engine to judge. The front lent
    the account whenever Authorization was empty: a caller with only a cookie ran as kgqr
    through the front, and was refused through kgqr."""
    lending = _as(settings, secured, "kgqr", secured.kgqr_password).replaced(
        {"anonymous_uses_service_account": True}
    )
    with (
        running_proxy(lending) as proxy_url,
        running_front(
            lending, "127.0.0.1", free_port(), int(proxy_url.rsplit(":", 1)[1])
        ) as front_url,
    ):
        for url in (proxy_url, front_url):
            authinfo = f"{url}/_plugins/_security/authinfo"
            for sent in ({}, {"cookie": ""}):  # an empty header: nginx cannot tell it apart
                anonymous = httpx.get(authinfo, headers=sent)
                assert anonymous.status_code == 200, (url, sent)
                assert anonymous.json()["user_name"] == "kgqr", (url, sent)
            for sent in ({"cookie": "session=elsewhere"}, {"x-proxy-user": "reader"}):
                assert httpx.get(authinfo, headers=sent).status_code == 401, (url, sent)
            reader = httpx.get(authinfo, headers={"authorization": users["reader"]})
            assert reader.json()["user_name"] == "reader", url


def test_a_request_without_valid_credentials_is_not_read_before_the_engines_401(
    entry: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """kgqr once parsed and planned a search before anyone was authenticated, so an
    anonymous caller could make it run a 16 KB query_string word's quadratic parse (or a
    hundred of them in an msearch). A body kgqr would refuse with its own 400 proves the
    order: a caller the engine does not know gets the engine's 401, the body unread."""
    counted = metric_sample("kgqr_searches_passed_through_total", reason="refused")
    hostile = json.dumps({"query": {"query_string": {"query": "x" * 65536}}})
    too_many = "".join(f'{{"index": "{INDEX}"}}\n{hostile}\n' for _ in range(101))
    ndjson = {"content-type": "application/x-ndjson"}
    for headers in ({}, {"authorization": basic_authorization("reader", "wrong")}):
        for path, body, kind in (
            (f"{INDEX}/_search", b"{not json", {"content-type": "application/json"}),
            (f"{INDEX}/_search", hostile.encode(), {"content-type": "application/json"}),
            ("_msearch", too_many.encode(), ndjson),  # kgqr's own limit is 100 items
            (f"{INDEX}/_search/template", b"{not json", {"content-type": "application/json"}),
            ("_kgqr/tune/judgments", b"{not json", {"content-type": "application/json"}),
        ):
            answer = httpx.post(f"{entry}/{path}", content=body, headers={**headers, **kind})
            assert answer.status_code == 401, (path, answer.text[:200])
    # The same malformed body from a known caller is read, and refused by kgqr as before.
    reader = {"authorization": users["reader"], "content-type": "application/json"}
    assert httpx.post(f"{entry}/{INDEX}/_search", content=b"{x", headers=reader).status_code == 400
    assert metric_sample("kgqr_searches_passed_through_total", reason="refused") >= counted + 8
    tune = httpx.post(f"{entry}/_kgqr/tune/judgments", content=b"{x", headers=reader)
    assert tune.status_code == 400 and tune.json()["error"]["type"] == "json_parse_exception"


def test_kgqrs_metrics_need_the_rights_the_engine_asks_for_its_node_stats(
    entry: str, secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """Open to anyone, /_kgqr/metrics told of every KB's searches, strategies and
    fallbacks; the engine shows its own node stats only to monitors."""
    path = f"{entry}/_kgqr/metrics"
    admin = {"authorization": secured.admin_authorization}
    for headers in ({}, {"authorization": users["reader"]}, admin):
        direct = httpx.get(
            f"{secured.url}/_nodes/_local/stats/process", headers=headers, verify=_trusting(secured)
        )
        answer = httpx.get(path, headers=headers)
        assert answer.status_code == direct.status_code, answer.text[:200]
        assert ("kgqr_requests_total" in answer.text) == (direct.status_code == 200)
    assert httpx.get(path, headers={"authorization": users["reader"]}).status_code == 403


def test_a_metrics_token_opens_the_metrics_to_its_holder_too(
    settings: Settings, secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """For a Prometheus that cannot sign in to OpenSearch: KGQR_METRICS_TOKEN, beside the
    monitors the engine itself lets read its node stats."""
    token = SecretStr("scrape-" + secrets.token_urlsafe(8))
    proxied = _as(settings, secured, "kgqr", secured.kgqr_password)
    with running_proxy(proxied.replaced({"metrics_token": token})) as url:
        path = f"{url}/_kgqr/metrics"
        assert httpx.get(path).status_code == 401
        assert httpx.get(path, headers={"authorization": "Bearer nope"}).status_code == 401
        bearer = {"authorization": f"Bearer {token.get_secret_value()}"}
        assert "kgqr_requests_total" in httpx.get(path, headers=bearer).text
        assert httpx.get(path, headers={"authorization": users["reader"]}).status_code == 403
        admin = {"authorization": secured.admin_authorization}
        assert httpx.get(path, headers=admin).status_code == 200


def test_a_kb_name_ending_in_a_newline_is_a_400_not_a_500(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    answer = httpx.get(
        f"{proxy[0]}/_kgqr/tune/judgments.jsonl",
        params={"kb": f"{KB}\n"},
        headers={"authorization": users["tuner"]},
    )
    assert answer.status_code == 400, answer.text


@pytest.mark.parametrize("strategy", ["hyde", "kar", "graph"])
def test_a_caller_who_may_not_search_the_index_gets_no_rewrite(
    strategy: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """An outsider (signed in, no read on the KB) got the engine's 403 with an explain
    holding what kgqr's LLM wrote for its query: the use of kgqr's LLM and graph that the
    index's permissions deny. A KB index that does not exist costs nothing either. (The
    explain named the strategy too: for a search naming none, the KB's default, read from
    kgqr-meta, which the outsider may not read.)"""
    url, prompts = proxy
    body = {**QUERY, "query": {"match": {"text": f"a film about bank robbers ({strategy})"}}}
    counted = metric_sample("kgqr_searches_passed_through_total", reason="refused")
    for who, index, status in (
        ("outsider", INDEX, 403),
        ("reader", schema.documents_index(f"{KB}-x"), 404),
    ):
        before = len(prompts)
        answer = _explained(url, index, strategy, body, {"authorization": users[who]})
        assert answer.status_code == status, answer.text
        assert answer.json()["kgqr"] == {"refused": status}
        assert len(prompts) == before, (who, prompts[before:])
        unnamed = httpx.post(f"{url}/{index}/_search", params={"kgqr.explain": "true"},
                             json=body, headers={"authorization": users[who]})  # fmt: skip
        assert unnamed.status_code == status and unnamed.json()["kgqr"] == {"refused": status}
    assert metric_sample("kgqr_searches_passed_through_total", reason="refused") == counted + 4


def _what_each_saw(
    proxy: tuple[str, list[str]],
    users: dict[str, str],
    index: str,
    body: dict[str, Any],
    strategy: str,
    evidence: str,
) -> dict[str, tuple[str, str]]:
    """For the restricted user, then a reader: the explained answer and the prompts the
    LLM received, after checking the rewrite ran and found graph `evidence` to check."""
    url, prompts = proxy
    seen = {}
    for who in ("restricted", "reader"):
        before = len(prompts)
        answer = _explained(url, index, strategy, body, {"authorization": users[who]})
        assert answer.status_code == 200, answer.text
        explain = answer.json()["kgqr"]
        assert explain["fallback"] is None, explain["fallback"]
        assert explain["details"][evidence], f"no {evidence} to check"
        seen[who] = (json.dumps(answer.json()), "\n".join(prompts[before:]))
    return seen


@pytest.mark.parametrize("strategy", ["kar", "kar+boost"])
def test_graph_evidence_obeys_document_level_security(
    strategy: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    # A query of this test's own: the LLM cache would otherwise answer a prompt seen before
    # without the stand-in seeing it.
    body = {
        **QUERY,
        "query": {"match": {"text": f"Heat, the 1995 film about bank robbers ({strategy})"}},
    }
    seen = _what_each_saw(proxy, users, INDEX, body, strategy, evidence="neighbours")
    response, prompt = seen["restricted"]
    assert HIDDEN not in response and '"p2"' not in response
    assert HIDDEN not in prompt
    # The same query for a reader of the whole KB does show the hidden node, so the test can
    # fail, and the restricted user's rewrite was not served to the reader from the cache.
    response, prompt = seen["reader"]
    assert HIDDEN in response and HIDDEN in prompt


def test_graph_copies_to_preload_are_listed_with_kgqrs_own_account(
    settings: Settings, secured: SecuredCredentials, secured_kb: str
) -> None:
    """KGQR_GRAPH_SNAPSHOT_PRELOAD=* (the proxy above runs with it) lists the KBs in
    kgqr-meta as kgqr, for its own bookkeeping; a caller's credentials play no part."""
    as_kgqr = _as(settings, secured, "kgqr", secured.kgqr_password)

    async def listed(service_account: bool) -> list[str] | int:
        client = opensearch_http_client(as_kgqr, service_account=service_account)
        try:
            return await knowledge_base_names(EngineSession(client, {}))
        except httpx.HTTPStatusError as refused:
            return refused.response.status_code
        finally:
            await client.aclose()

    names = asyncio.run(listed(service_account=True))
    assert isinstance(names, list) and KB in names, names
    assert asyncio.run(listed(service_account=False)) == 401  # no account: no list


@pytest.fixture(scope="module")
def copy_proxy(settings: Settings, secured: SecuredCredentials, secured_kb: str) -> Iterator[str]:
    """kgqr serve keeping no in-memory copy: expansions read the graph's copy in OpenSearch,
    with kgqr's own account."""
    proxied = _as(settings, secured, "kgqr", secured.kgqr_password).replaced(
        {"graph_snapshot_max_relations": 0, "rewrite_cache_ttl_s": 0}
    )
    with running_proxy(proxied) as url:
        yield url


@pytest.mark.parametrize("strategy", ["graph", "graph_walk"])
def test_the_graphs_copy_in_opensearch_leads_only_to_documents_the_caller_may_read(
    strategy: str, copy_proxy: str, users: dict[str, str]
) -> None:
    """kgqr's account may read the copy (and only the copy: not the documents), and what
    it reads there reaches a caller only where the caller may read the documents."""
    seen = _what_each_saw((copy_proxy, []), users, INDEX, QUERY, strategy, "graph_nodes")
    restricted, reader = (json.loads(seen[who][0])["kgqr"] for who in ("restricted", "reader"))
    assert restricted["details"]["graph_source"] == reader["details"]["graph_source"]
    assert reader["details"]["graph_source"] == "opensearch"  # not Neo4j: the copy was read
    assert HIDDEN not in seen["restricted"][0] and "p2" not in seen["restricted"][0]
    assert "p2" in {node["id"] for node in reader["details"]["graph_nodes"]}


@pytest.mark.parametrize("strategy", ["graph", "graph_walk", "graph_mix"])
def test_the_graph_boosts_and_shows_only_documents_the_caller_may_read(
    strategy: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """Heat (m1), the first hit, stars Al Pacino (p2): the graph reaches p2 for a reader of
    the whole KB, and never for the restricted caller, neither as a boost nor in a path."""
    seen = _what_each_saw(proxy, users, INDEX, QUERY, strategy, evidence="graph_nodes")
    response, prompt = seen["restricted"]
    assert HIDDEN not in response and "p2" not in response and prompt == ""
    response, _ = seen["reader"]
    shown = json.loads(response)["kgqr"]
    assert "p2" in {node["id"] for node in shown["details"]["graph_nodes"]}
    assert "p2" in json.dumps(shown["final_query"]["query"]["hybrid"]["queries"][2])
    # Not even a count says p2 exists: `graph` counted every document the first hit
    # bridges to and `graph_walk` every node it reached, readable or not.
    counted = {who: _counts(json.loads(seen[who][0])["kgqr"]["details"]) for who in seen}
    assert counted["restricted"] == {
        name: count - 1 for name, count in counted["reader"].items()
    }, counted


@pytest.mark.parametrize("strategy", ["graph", "graph_mix"])
def test_a_caller_who_may_not_see_kgqrs_id_field_gets_the_same_graph_boosts(
    strategy: str, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """The similarity lookups read kgqr's documents' ids from their `id` field (the
    engine's `_id` costs a read of stored fields); a role whose field-level security
    hides that field, or masks it (its doc values are then hashes, which the graph does
    not know), gets them by `_id` instead, not a rewrite without its boosts."""
    boosted = {}
    for who in ("reader", "idless", "idmasked"):
        answer = _explained(proxy[0], INDEX, strategy, QUERY, {"authorization": users[who]})
        assert answer.status_code == 200, answer.text
        explain = answer.json()["kgqr"]
        assert explain["fallback"] is None, explain["fallback"]
        boosted[who] = [(node["id"], node["score"]) for node in explain["details"]["graph_nodes"]]
    assert boosted["reader"] and boosted["idless"] == boosted["reader"], boosted
    assert boosted["idmasked"] == boosted["reader"], boosted


def test_the_walks_cut_off_is_made_among_the_documents_the_caller_may_read(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """`graph_walk` kept its best graph.boosts documents and then dropped the hidden ones,
    so with p2 inside the cut the restricted caller got one boost fewer than the cut
    allows: a short list that tells of a hidden document. The cut is now made after."""
    url, _ = proxy
    body = {**QUERY, "query": {"match": {"text": "Heat, the 1995 film (the walk's cut)"}}}

    def walked(who: str, boosts: int) -> list[str]:
        answer = _explained(url, INDEX, "graph_walk", body, {"authorization": users[who]},
                            {"kgqr.param.graph.boosts": str(boosts)})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return [node["id"] for node in answer.json()["kgqr"]["details"]["graph_nodes"]]

    assert "p2" in walked("reader", 100)  # the walk reaches the hidden document
    uncut = walked("restricted", 100)
    for cut in range(1, len(uncut) + 1):  # each cut is a prefix of the whole ranking
        assert walked("restricted", cut) == uncut[:cut], cut


def _counts(explained: dict[str, Any]) -> dict[str, int]:
    """The numbers of documents an explain's details state, by name."""
    return {
        name: value if isinstance(value, int) else len(value)
        for name, value in explained.items()
        if name in ("candidates", "reached", "graph_nodes")
    }


def test_the_agents_plan_answers_only_with_documents_the_caller_may_read(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """The Insider stars Russell Crowe (p4) and Al Pacino (p2); the plan's `follow` reads
    Neo4j as kgqr, and the restricted caller must still never see p2."""
    body = {**QUERY, "query": {"match": {"text": "The Insider, the tobacco whistleblower film"}}}
    seen = _what_each_saw(proxy, users, INDEX, body, "agent", evidence="answers")
    response, prompt = seen["restricted"]
    answers = json.loads(response)["kgqr"]["details"]["answers"]
    assert "p4" in answers and "p2" not in answers
    # The optimised plan is kgqr-meta's, which no test user may read.
    assert not {"plan", "category", "plans_version"} & set(json.loads(response)["kgqr"]["details"])
    assert HIDDEN not in response and '"p2"' not in response and prompt == ""
    response, _ = seen["reader"]
    assert {"p2", "p4"} <= set(json.loads(response)["kgqr"]["details"]["answers"])
    # The `follow` step's count of what it reached in Neo4j said p2 was there: only the
    # steps read as the caller (the search, the rank) are counted.
    reader, restricted = (
        [step["rows"] for step in json.loads(seen[who][0])["kgqr"]["details"]["steps"]]
        for who in ("reader", "restricted")
    )
    assert reader[:2] == restricted[:2] == [1, None]
    assert restricted[2] == reader[2] - 1


def test_what_kgqr_meta_says_of_a_kbs_default_is_shown_only_to_who_may_read_it(
    settings: Settings, secured: SecuredCredentials, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    """The default a search got is read from kgqr-meta with kgqr's own account. What ran
    (strategy, parameters, version) is the caller's to see; who set it, when and why is
    kgqr-meta's, which `reader` may not search and the admin may."""
    ingester = connections.opensearch_client(
        _as(settings, secured, "kgqr-ingest", secured.ingest_password)
    )
    chosen = kb_meta.set_default(ingester, KB, "graph", {}, "judged queries favour it", "ops-7")
    plain = {"authorization": users["reader"]}
    try:
        deadline = time.monotonic() + settings.rewrite.kb_refresh_s + 10
        while True:
            asked = {"kgqr.explain": "true"}
            shown = httpx.post(f"{proxy[0]}/{INDEX}/_search", params=asked, json=QUERY,
                               headers=plain, timeout=120).json()["kgqr"]  # fmt: skip
            if (shown.get("default") or {}).get("version") == chosen.version:
                break
            assert time.monotonic() < deadline, f"the default never served: {shown}"
            time.sleep(0.5)
        default = shown["default"]
        assert default["strategy"] == "graph" and shown["strategy"] == "graph"
        assert not {"reason", "set_by", "set_at"} & set(default)
        assert "kgqr-meta" in default["withheld"]
        assert "ops-7" not in json.dumps(shown) and "judged queries" not in json.dumps(shown)
        own = httpx.post(f"{proxy[0]}/{INDEX}/_search", params=asked, json=QUERY,
                         headers={"authorization": secured.admin_authorization},
                         timeout=120)  # fmt: skip
        told = own.json()["kgqr"]["default"]
        assert told["set_by"] == "ops-7" and told["reason"] == "judged queries favour it"
    finally:
        kb_meta.set_default(ingester, KB, None, {}, "test done", "test")
        ingester.close()


def test_the_walk_uses_no_edge_read_from_a_passage_the_caller_may_not_read(
    proxy: tuple[str, list[str]], users: dict[str, str], secured_owners_kb: str
) -> None:
    """The walk once scored, lifted and showed `entity:acme --is secretly owned by->
    [evilcorp]` to a caller DLS hides the memo from: an edge carries the passage it was
    read from, and counts only where the caller may read that passage."""
    body = {"query": {"match": {"text": "Where is Acme based?"}}, "size": 5}
    params = {"graph.seeds": "1", "graph.triple_seeds": "1"}
    walked = {}
    for who in ("reader", "restricted"):
        answer = _explained(
            proxy[0], secured_owners_kb, "graph_walk", body, {"authorization": users[who]},
            {f"kgqr.param.{name}": value for name, value in params.items()},
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        walked[who] = answer.json()["kgqr"]
    paths = {node["id"]: node["path"] for node in walked["reader"]["details"]["graph_nodes"]}
    assert "is secretly owned by" in str(paths.get("d9")), paths  # the reader may read p2
    restricted = walked["restricted"]
    assert "secretly" not in json.dumps(restricted)
    assert {node["id"] for node in restricted["details"]["graph_nodes"]} <= {"p1"}


WALKED = {"kgqr.param.graph.seeds": "1", "kgqr.param.graph.triple_seeds": "1"}


@pytest.mark.parametrize(
    ("strategy", "params"),
    [("graph_walk", WALKED), ("graph_mix", WALKED), ("graph", {}), ("kgcqr", {})],
)
def test_the_graphs_facts_reach_only_callers_shown_the_text_they_were_read_from(
    proxy: tuple[str, list[str]], users: dict[str, str], secured_owners_kb: str,
    strategy: str, params: dict[str, str],
) -> None:  # fmt: skip
    """The triples and entities of kgqr's own knowledge base state what its passages say.
    A role that hides or masks the passages' text still reads them by id, so every
    passage check passed, and a path or a triple stated the hidden text to it."""
    body = {"query": {"match": {"text": "Where is Acme based?"}}, "size": 5}
    explained = {}
    for who in ("reader", "textless", "textmasked"):
        answer = _explained(proxy[0], secured_owners_kb, strategy, body,
                            {"authorization": users[who]}, params)  # fmt: skip
        assert answer.status_code == 200, answer.text
        explained[who] = json.dumps(answer.json()["kgqr"]).lower()
    # What p1 says, as a fact or an entity on a path (the bridge's: p1 -> [acme] -> p2).
    facts = ("oslo", "[acme]", "entity:", "secretly")
    assert any(fact in explained["reader"] for fact in facts), explained["reader"]
    for who in ("textless", "textmasked"):
        assert not any(fact in explained[who] for fact in facts), explained[who]
        assert "not shown the text" in explained[who], explained[who]  # said, not silent


def test_a_cached_walk_is_not_served_once_a_passage_behind_its_paths_is_hidden(
    proxy: tuple[str, list[str]],
    users: dict[str, str],
    secured: SecuredCredentials,
    secured_owners_kb: str,
) -> None:
    """Once DLS hides the memo, a cached walk whose path states what only the memo says
    (`--is secretly owned by-->`) is not served again. (Here the memo is among the walk's
    boosts too; tests/unit/test_graph_snapshot.py shows a path's passages kept where it
    is not.)"""
    # A text of its own (another test caches the same caller's walk of the plain one), and
    # fixed: the triple nearest it must be p1's, whose Acme the memo's edge leads on from.
    body = {"query": {"match": {"text": "Where is Acme based? (a cached walk)"}}, "size": 5}
    params = {"kgqr.param.graph.seeds": "1", "kgqr.param.graph.triple_seeds": "1"}
    restricted = {"authorization": users["restricted"]}

    def walked() -> dict[str, Any]:
        answer = _explained(proxy[0], secured_owners_kb, "graph_walk", body, restricted, params)
        assert answer.status_code == 200, answer.text
        explained: dict[str, Any] = answer.json()["kgqr"]
        assert explained["fallback"] is None, explained["fallback"]
        return explained

    _restricted_role(secured, ["none-of-these"])  # the memo readable, for now
    try:
        first = walked()
        assert "secretly" in json.dumps(first["details"]), first["details"]
        again = walked()
        assert again["cached"] and again["details"] == first["details"]
        _restricted_role(secured, ["p2"])
        after = walked()
        assert not after["cached"]
        assert "secretly" not in json.dumps(after)
    finally:
        _restricted_role(secured, ["p2"])


def test_an_llm_answer_made_for_one_caller_is_not_served_to_another(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """The LLM's answers were cached for everyone: a second user's explain said
    `cached_llm_calls: 1` (and answered faster), telling them someone had just asked the
    same thing. Answers are now kept per caller, like the rewrites."""
    url, prompts = proxy
    body = {**QUERY, "query": {"match": {"text": f"bank robbers ({uuid.uuid4().hex[:8]})"}}}
    calls = []
    for who in ("reader", "tuner", "reader"):
        before = len(prompts)
        answer = _explained(url, INDEX, "hyde", body, {"authorization": users[who]})
        assert answer.status_code == 200, answer.text
        explained = answer.json()["kgqr"]
        calls.append((explained["cached"], explained["cached_llm_calls"], len(prompts) - before))
    assert calls[0] == (False, 0, 1)  # the first caller's own LLM call
    assert calls[1] == (False, 0, 1)  # another caller's: a call of its own, nothing shared
    assert calls[2][0] is True  # the first caller again: its own cached rewrite


def test_one_callers_burst_of_llm_rewrites_does_not_queue_anothers_behind_it(
    settings: Settings, secured: SecuredCredentials, secured_kb: str, users: dict[str, str]
) -> None:
    """The LLM's slot went first come, first served: a caller's single search waited
    behind every call of another caller's burst. A freed slot now goes to the callers in
    turn, so the second caller's call goes before the burst's calls still queued."""

    opened = threading.Event()  # the LLM answers nothing until every search is queued

    def slow(prompt: str) -> str:
        opened.wait(timeout=120)
        time.sleep(0.1)
        return _script(prompt)

    with recording_llm(slow) as (llm_url, prompts):
        proxied = _as(settings, secured, "kgqr", secured.kgqr_password).replaced({
            "llm_base_url": llm_url, "llm_model": f"stand-in-{uuid.uuid4().hex[:8]}",
            "llm_max_concurrent": 1,
        })  # fmt: skip
        with running_proxy(proxied) as url:
            run = uuid.uuid4().hex[:8]

            def search(who: str, n: int) -> httpx.Response:
                text = f"bank robbers {who} {n} ({run})"
                body = {**QUERY, "query": {"match": {"text": text}}}
                return _explained(url, INDEX, "hyde", body, {"authorization": users[who]})

            monitor = secured.admin_authorization
            with ThreadPoolExecutor(max_workers=8) as pool:
                try:
                    burst = [pool.submit(search, "reader", n) for n in range(7)]
                    # One call at the LLM, the burst's six others queued, then the tuner's:
                    # first come, first served would answer it last.
                    _wait_for_llm_calls_waiting(url, monitor, at_least=6)
                    single = pool.submit(search, "tuner", 0)
                    _wait_for_llm_calls_waiting(url, monitor, at_least=7)
                finally:
                    opened.set()
                answers = [future.result() for future in [*burst, single]]
    assert all(a.status_code == 200 for a in answers), [a.text[:300] for a in answers]
    assert [a.json()["kgqr"]["fallback"] for a in answers] == [None] * 8
    asked = [who for prompt in prompts for who in ("reader", "tuner") if f" {who} " in prompt]
    # First come, first served, the tuner's call was the last.
    assert len(asked) == 8 and asked[asked.index("tuner") :].count("reader") >= 3, asked


def _wait_for_llm_calls_waiting(url: str, monitor: str, at_least: int) -> None:
    """Until the proxy's gauge of LLM calls waiting for a slot reads `at_least` (read as
    `monitor`: the engine shows its node stats, and kgqr its metrics, to monitors)."""
    deadline, waiting = time.monotonic() + 60, 0.0
    while time.monotonic() < deadline:
        scraped = httpx.get(f"{url}{metrics.PATH}", headers={"authorization": monitor})
        for line in scraped.text.splitlines():
            if line.startswith("kgqr_llm_calls_waiting "):
                waiting = float(line.split()[1])
        if waiting >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"{waiting:g} LLM calls waiting after 60 s, not {at_least}")


def _restricted_role(secured: SecuredCredentials, hidden: list[str]) -> None:
    """Set the restricted role's document-level security to hide `hidden`."""
    dls = json.dumps({"bool": {"must_not": {"ids": {"values": hidden}}}})
    index_permissions = [{**ROLES["kgqr_test_restricted"]["index_permissions"][0], "dls": dls}]
    answer = httpx.put(
        f"{secured.url}/_plugins/_security/api/roles/kgqr_test_restricted",
        json={**ROLES["kgqr_test_restricted"], "index_permissions": index_permissions},
        headers={"authorization": secured.admin_authorization},
        verify=_trusting(secured),
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("strategy", "params", "shown"),
    [
        ("kar", {}, lambda kgqr: [n["relation"] for n in kgqr["details"]["neighbours"]]),
        ("graph_walk", {"kgqr.param.graph.seeds": "1"},
         lambda kgqr: [n["path"] for n in kgqr["details"]["graph_nodes"]]),
    ],
)  # fmt: skip
def test_a_path_names_a_document_only_as_the_callers_own_fetch_shows_it(
    proxy: tuple[str, list[str]],
    users: dict[str, str],
    strategy: str,
    params: dict[str, str],
    shown: Callable[[dict[str, Any]], list[str]],
) -> None:
    """Paths named the document between by the graph's copy of its title, which
    field-level security does not reach: a caller whose role hides `title` read
    "[Michael Mann]" in Heat's path to Collateral."""
    body = {**QUERY, "query": {"match": {"text": f"Heat, the 1995 film ({strategy} paths)"}}}
    texts = {}
    for who in ("reader", "untitled"):
        answer = _explained(proxy[0], INDEX, strategy, body, {"authorization": users[who]}, params)
        assert answer.status_code == 200, answer.text
        texts[who] = " ".join(str(text) for text in shown(answer.json()["kgqr"]))
    # Which document a tied two-hop path runs through (Michael Mann, Al Pacino, Crime
    # film) is the graph's storage order: any of them shows its title to the reader only.
    documents = Path(__file__).parents[1] / "fixtures" / "tiny_kb" / "documents.jsonl"
    titles = [json.loads(line)["title"] for line in documents.read_text().splitlines()]
    assert any(f"[{title}]" in texts["reader"] for title in titles), texts["reader"]
    assert not any(f"[{title}]" in texts["untitled"] for title in titles), texts["untitled"]
    assert "(no title you may read)]" in texts["untitled"]


def test_kar_without_drf_ranks_neighbours_by_titles_only_as_the_caller_reads_them(
    proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """`kar_no_drf` scored each neighbour by the graph's copy of its title, which
    field-level security does not reach, and the explain shows the scores: a caller whose
    role hides titles could guess a hidden title and watch its score."""
    body = {**QUERY, "query": {"match": {"text": "Heat, the 1995 film (Al Pacino)"}}}
    scores = {}
    for who in ("reader", "untitled"):
        answer = _explained(proxy[0], INDEX, "kar_no_drf", body, {"authorization": users[who]})
        assert answer.status_code == 200, answer.text
        explain = answer.json()["kgqr"]
        assert explain["fallback"] is None, explain["fallback"]
        scores[who] = {n["id"]: n["score"] for n in explain["details"]["neighbours"]}
        if who == "untitled":
            assert all(n["title"] == "" for n in explain["details"]["neighbours"])
    shared = set(scores["reader"]) & set(scores["untitled"])
    assert shared, scores
    # The reader's scores are their titles'; the other caller's cannot be.
    assert all(scores["reader"][node] != scores["untitled"][node] for node in shared), scores


def test_a_cached_rewrite_is_not_served_once_its_evidence_is_hidden_from_the_caller(
    proxy: tuple[str, list[str]], users: dict[str, str], secured: SecuredCredentials
) -> None:
    """Rewrites are cached for a day: narrowing a role's document-level security (or an
    ACL change, or a deletion) kept serving the old evidence. A cached rewrite is served
    only while the caller may still read every document it was built from."""
    body = {**QUERY, "query": {"match": {"text": "Heat, bank robbers (a cached rewrite)"}}}
    restricted = {"authorization": users["restricted"]}

    def feedback() -> tuple[list[str], bool]:
        answer = _explained(proxy[0], INDEX, "prf", body, restricted)
        assert answer.status_code == 200, answer.text
        explained = answer.json()["kgqr"]
        return explained["details"]["feedback_documents"], explained["cached"]

    first, _ = feedback()
    assert "m1" in first  # Heat, which the role is about to hide
    assert feedback() == (first, True)  # served from the cache while nothing changed
    stale = metric_sample("kgqr_rewrite_cache_total", result="stale")
    _restricted_role(secured, ["p2", "m1"])
    try:
        after, cached = feedback()
        assert "m1" not in after and not cached
        assert metric_sample("kgqr_rewrite_cache_total", result="stale") == stale + 1
    finally:
        _restricted_role(secured, ["p2"])


def test_kgcqrs_triples_are_cut_among_those_the_caller_may_read(
    proxy: tuple[str, list[str]], users: dict[str, str], secured_chain_kb: str
) -> None:
    """KG-CQR took its top kgcqr.k triples and then dropped those of hidden passages, so
    a caller who knew k could tell that a hidden passage's triple was among them. Its
    list for each k is now the first k of its whole readable ranking."""
    body = {"query": {"match": {"text": "What does Delta Labs research, and who bought it?"}}}

    def retrieved(who: str, k: int) -> list[str]:
        asked = {"kgqr.param.kgcqr.k": str(k)}
        answer = _explained(
            proxy[0], secured_chain_kb, "kgcqr", body, {"authorization": users[who]}, asked
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["kgqr"]["details"]["retrieved_triples"])

    assert any(CHAIN_HIDDEN in fact for fact in retrieved("reader", 2))  # hidden ones rank high
    # Searched with kgqr's account: the caller has no grant on them, and never needed one.
    triples = httpx.post(f"{proxy[0]}/{schema.triples_index(CHAIN_KB)}/_search",
                         headers={"authorization": users["reader"]}, json={})  # fmt: skip
    assert triples.status_code == 403
    uncut = retrieved("restricted", 20)
    assert uncut and not any(CHAIN_HIDDEN in fact for fact in uncut)
    for k in range(1, len(uncut) + 1):
        assert retrieved("restricted", k) == uncut[:k], k


def test_a_chain_of_follows_goes_on_only_from_documents_the_caller_may_read(
    settings: Settings,
    secured: SecuredCredentials,
    secured_kb: str,
    users: dict[str, str],
) -> None:
    """Heat's cast, then their other films: through Al Pacino (hidden from `restricted`)
    the chain reached The Insider, and a limit after the first follow cut before p2 was
    dropped. Each follow now keeps only what the caller may read before going on."""
    costars = Plan.model_validate({"steps": [
        {"id": "film", "op": "search", "text": "Heat", "type": "movie", "k": 1},
        {"id": "cast", "op": "follow", "from": "film", "relation": "starring", "type": "person"},
        {"id": "first", "op": "limit", "from": "cast", "k": 1},
        {"id": "films", "op": "follow", "from": "first", "relation": "starring",
         "direction": "in", "type": "movie"},
    ]})  # fmt: skip
    embedder = get_embedder(settings.embedder.model)

    async def embed(texts: list[str]) -> Any:
        return embedder.encode(texts)

    async def run(who: str) -> dict[str, list[str]]:
        as_caller = _as(settings, secured, "kgqr", secured.kgqr_password)
        async with opensearch_http_client(as_caller) as http, connections.async_neo4j_driver(
            settings
        ) as driver:  # fmt: skip
            gateway = EngineSession(http, {"authorization": users[who]})
            ctx = StrategyContext(as_caller, secured_kb, KB, DocumentStructure(), None,  # type: ignore[arg-type]
                                  gateway, embed, graph=Neo4jGraph(driver))  # fmt: skip
            ran = await execute(costars, "Heat", ctx)
            return {"answer": ran.answer}

    reader, restricted = asyncio.run(run("reader")), asyncio.run(run("restricted"))
    assert "m3" in reader["answer"] or "m1" in reader["answer"], reader  # via p2 (Al Pacino)
    assert restricted["answer"] == [], restricted  # Heat's only other readable star: none


def test_kgcqr_shows_triples_only_from_passages_the_caller_may_read(
    proxy: tuple[str, list[str]], users: dict[str, str], secured_chain_kb: str
) -> None:
    body = {"query": {"match": {"text": "How did Alpha Corp grow through Beta and Gamma?"}}}
    seen = _what_each_saw(proxy, users, secured_chain_kb, body, "kgcqr", "retrieved_triples")
    response, prompt = seen["restricted"]
    assert CHAIN_HIDDEN not in response and CHAIN_HIDDEN not in prompt
    response, prompt = seen["reader"]  # the same query does show them to a full reader
    assert CHAIN_HIDDEN in response and CHAIN_HIDDEN in prompt


@pytest.mark.same_on_containers
def test_the_tuning_page_searches_and_judges_as_the_caller(
    settings: Settings, secured: SecuredCredentials, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    url = proxy[0]
    query = {"kb": KB, "query": "American actor in Heat", "strategy": "base", "size": 8}

    def tune(who: str | None, path: str = "search", body: dict[str, Any] = query) -> httpx.Response:
        headers = {"authorization": users[who]} if who else {}
        return httpx.post(f"{url}/_kgqr/tune/{path}", json=body, headers=headers, timeout=120)

    shown: dict[str, dict[str, Any]] = {}
    for who in ("reader", "restricted", "tuner"):
        answer = tune(who)
        assert answer.status_code == 200, (who, answer.text)
        shown[who] = answer.json()
    ids = {who: {hit["id"] for hit in result["hits"]} for who, result in shown.items()}
    assert "p2" in ids["reader"] and "p2" not in ids["restricted"] and "p2" in ids["tuner"]
    # Searching needs only read rights; the scoreboard needs write rights on kgqr's tuning
    # indices, which OpenSearch checks for the caller, not for kgqr.
    assert shown["reader"]["recorded"] is False and "403" in shown["reader"]["not_recorded"]
    assert shown["tuner"]["recorded"] is True
    judgment = {"kb": KB, "query": query["query"], "doc_id": "p2", "relevant": True}
    assert tune("reader", "judgments", judgment).status_code == 403
    assert tune("tuner", "judgments", judgment).status_code == 200
    assert tune("outsider").status_code == 403
    assert tune(None).status_code == 401
    # A default changes every caller's searches: the page promotes one only with the
    # caller's own right to write kgqr-meta, which a tuner does not have. (Ten judged
    # queries: on fewer the page records nothing and says so before any write.)
    assert tune("tuner", body={**query, "strategy": "graph"}).status_code == 200
    for number in range(10):
        other = {**query, "query": f"the director of Heat, take {number}"}
        for strategy in ("base", "graph"):
            assert tune("tuner", body={**other, "strategy": strategy}).status_code == 200
        tune("tuner", "judgments", {**judgment, "query": other["query"], "doc_id": "p1"})
    refused = tune("tuner", "promote", {"kb": KB})
    assert refused.status_code == 403, refused.text
    assert "kgqr-meta" in refused.text or "no permissions" in refused.text
    # One who may write it promotes, and the default's record says who did.
    promoted = httpx.post(f"{url}/_kgqr/tune/promote", json={"kb": KB}, timeout=120,
                          headers={"authorization": secured.admin_authorization})  # fmt: skip
    ingester = connections.opensearch_client(
        _as(settings, secured, "kgqr-ingest", secured.ingest_password)
    )
    try:
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["default"]["set_by"] == "tune page, as admin"
    finally:
        kb_meta.set_default(ingester, KB, None, {}, "test done", "test")
        ingester.close()


def _cors(answer: httpx.Response) -> dict[str, list[str]]:
    """The CORS headers of an answer, each with its values in order (the engine repeats
    `access-control-allow-methods` once per method)."""
    found: dict[str, list[str]] = {}
    for name, value in answer.headers.multi_items():
        if name.lower().startswith("access-control-") or name.lower() == "vary":
            found.setdefault(name.lower(), []).append(value)
    return found


def test_a_browser_app_calls_through_kgqr_as_cors_lets_it_call_the_engine(
    entry: str, secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """A page on an origin the cluster allows first sends a preflight (OPTIONS, no
    credentials), then its search; the browser reads an answer only with the engine's
    Access-Control headers. kgqr refused OPTIONS (405), so no browser app worked."""
    url = entry

    def both(method: str, path: str, kgqr: dict[str, str], **kwargs: Any) -> list[httpx.Response]:
        """The engine's answer and kgqr's (given kgqr's own parameters `kgqr`)."""
        direct = httpx.request(method, secured.url + path, verify=_trusting(secured), **kwargs)
        return [direct, httpx.request(method, url + path, params=kgqr, timeout=120, **kwargs)]

    for origin, allowed in ((BROWSER_APP_ORIGIN, True), ("https://elsewhere.example", False)):
        preflight = {
            "origin": origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type",
        }
        asked = {"origin": origin, "authorization": users["reader"]}
        for method, path, kgqr, kwargs in (
            ("OPTIONS", f"/{INDEX}/_search", {}, {"headers": preflight}),
            ("GET", f"/{INDEX}/_count", {}, {"headers": asked}),  # passed through
            (
                "POST",
                f"/{INDEX}/_search",
                {"kgqr.strategy": "base"},
                {"headers": asked, "json": QUERY},
            ),
        ):
            direct, through = both(method, path, kgqr, **kwargs)
            assert through.status_code == direct.status_code, (method, through.text)
            assert _cors(through) == _cors(direct), method
            # The premise: the engine answers the site it allows and refuses the other.
            assert ("access-control-allow-origin" in _cors(direct)) is allowed
            assert direct.status_code == (200 if allowed else 403)


def test_a_caller_acting_as_another_user_sees_what_that_user_sees(
    entry: str, proxy: tuple[str, list[str]], secured: SecuredCredentials, users: dict[str, str]
) -> None:
    """With REST impersonation the engine runs a request as the user the header names; kgqr
    resolved its rewrite's identity and checked its graph evidence with the credentials
    alone, so the impersonated user was shown the reader's evidence (and cached rewrite),
    and the front dropped the header (nginx drops names with underscores)."""
    url, prompts = entry, proxy[1]
    acting = {"authorization": users[IMPERSONATOR], IMPERSONATION_HEADER: IMPERSONATED}
    whoami = httpx.get(f"{secured.url}/_plugins/_security/authinfo", headers=acting,
                       verify=_trusting(secured)).json()  # fmt: skip
    assert whoami["user_name"] == IMPERSONATED  # the premise: the engine honours it
    body = {**QUERY, "query": {"match": {"text": f"Heat, the 1995 film (as, {url})"}}}
    seen = {}
    for who, headers in (("itself", {"authorization": users[IMPERSONATOR]}), ("as", acting)):
        before = len(prompts)
        answer = _explained(url, INDEX, "kar", body, headers)
        assert answer.status_code == 200, answer.text
        assert answer.json()["kgqr"]["details"]["neighbours"], "no graph evidence to check"
        seen[who] = answer.text + "\n".join(prompts[before:])
    assert HIDDEN in seen["itself"]
    assert HIDDEN not in seen["as"]
    counted = {
        who: httpx.get(f"{url}/{INDEX}/_count", headers=headers, timeout=60).json()["count"]
        for who, headers in (("itself", {"authorization": users[IMPERSONATOR]}), ("as", acting))
    }
    assert counted["as"] == counted["itself"] - 1  # passed through, as the user impersonated


def test_kgqr_eval_scores_judged_queries_as_the_user_it_is_given(
    proxy: tuple[str, list[str]], users: dict[str, str], tmp_path: Path
) -> None:
    """`kgqr eval` searched anonymously, so on a secured cluster every search was a 401
    and no team could score strategies on its own judgments."""
    judged = tmp_path / "judged.jsonl"
    judged.write_text(
        json.dumps({"query": "Heat, the 1995 film about bank robbers", "relevant": ["m1"]})
    )
    args = ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies", "base", "--proxy", proxy[0]]
    anonymous = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "anonymous")])
    assert anonymous.exit_code == 1 and "HTTP 401" in anonymous.output, anonymous.output
    reader = base64.b64decode(users["reader"].removeprefix("Basic ")).decode()
    user, password = reader.split(":", 1)
    for given, typed in ((reader, None), (user, password + "\n")):  # the password asked for
        out = tmp_path / f"as-{len(given)}"
        scored = CliRunner().invoke(main, [*args, "--user", given, "--out", str(out)], typed)
        assert scored.exit_code == 0, scored.output
        (row,) = json.loads(out.with_suffix(".json").read_text())["strategies"]
        assert row["metrics"]["Hit@1"] == 1.0


def _graph_in_process(resources: WorkerResources, redis: Any, kb: str, source: Any) -> None:
    """An attached KB's graph job, its chunks run here as kgqr-ingest (`kgqr kb graph`)."""

    def send(job_id: str, chunk: int, records: list[Any], extract: bool) -> None:
        ingest_chunk(resources, job_id, kb, chunk, records, extract)

    job_runner.enqueue_graph(source, str(source.path), kb, opensearch=resources.opensearch,
                             jobs=JobStore(redis), send=send, restart=True)  # fmt: skip


def _let_ingest_attach(secured: SecuredCredentials, role: str, index: str) -> None:
    """What a team grants kgqr-ingest on its index: its mapping (attach) and its documents
    (graph sources), nothing else."""
    allowed = ["read", "indices:admin/mappings/get"]
    definition = {"index_permissions": [{"index_patterns": [index], "allowed_actions": allowed}]}
    with httpx.Client(
        base_url=secured.url,
        verify=_trusting(secured),
        headers={"authorization": secured.admin_authorization},
    ) as api:
        for path, body in (
            (f"roles/{role}", definition),
            (f"rolesmapping/{role}", {"users": ["kgqr-ingest"]}),
        ):
            answer = api.put(f"/_plugins/_security/api/{path}", json=body)
            assert answer.status_code in (200, 201), answer.text  # fmt: skip


@pytest.fixture(scope="module")
def secured_team_index(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any,
    users: dict[str, str],
) -> Iterator[str]:  # fmt: skip
    """The team's index, written by the admin as the team's app would, attached and given
    its graph by kgqr-ingest, which the team lets read that one index (its mapping for the
    attach, its documents for graph sources)."""
    from ingest.attached_indices import FieldChoices, attach, checked, field_map_for, mapping_of
    from ingest.sources.attached_graph import RelationsFileSource
    from tests.integration.test_attached_index import FIXTURE, MAPPING, team_documents

    admin = connections.opensearch_client(_as(settings, secured, "admin", secured.admin_password))
    admin.indices.delete(index=TEAM_INDEX, ignore=[404])
    admin.indices.create(index=TEAM_INDEX, body=MAPPING)
    for doc_id, body in team_documents(settings.embedder.model):
        admin.index(index=TEAM_INDEX, id=doc_id, body=body, refresh=True)
    _let_ingest_attach(secured, "kgqr_test_attach", TEAM_INDEX)

    def write(ingester: Settings, opensearch: Any, resources: WorkerResources, _: int) -> None:
        mapping = mapping_of(opensearch, TEAM_INDEX)
        chosen = FieldChoices(vector_model=settings.embedder.model)
        attach(opensearch, TEAM_KB, checked(field_map_for(TEAM_INDEX, mapping, chosen), mapping))
        relations = FIXTURE / "relations.jsonl"
        _graph_in_process(resources, redis_client, TEAM_KB, RelationsFileSource(relations))

    with _ingested(settings, secured, neo4j_driver, redis_client, TEAM_KB, write):
        yield TEAM_INDEX
    admin.indices.delete(index=TEAM_INDEX, ignore=[404])
    admin.close()


SHOP = {
    "s1": {"name": "Heavy anvil", "description": "A heavy anvil for blacksmiths", "brand": "Acme"},
    "s2": {"name": "Rocket skates", "description": "Skates with rockets on", "brand": "Acme"},
    "s3": {"name": "Light anvil", "description": "A light anvil for jewellers", "brand": "Zeta"},
    "s4": {"name": "Portable hole", "description": "A hole to carry about", "brand": "Acme"},
}
SHOP_QUERY = {"query": {"match": {"description": "heavy anvil for blacksmiths"}}, "size": 4}


@pytest.fixture(scope="module")
def secured_shop_index(
    settings: Settings, secured: SecuredCredentials, neo4j_driver: Any, redis_client: Any,
    users: dict[str, str],
) -> Iterator[str]:  # fmt: skip
    """The shop's index, written by the admin, attached without vectors and given a graph
    from its brand (`brand.keyword`, as dynamic mapping maps a string) and kgqr's vectors
    of its description and brand by kgqr-ingest, which reads every field."""
    from ingest.attached_indices import FieldChoices, attach, checked, field_map_for, mapping_of
    from ingest.sources.attached_graph import IndexEmbedSource, IndexFieldsSource
    from plugin import installer

    admin = connections.opensearch_client(_as(settings, secured, "admin", secured.admin_password))
    admin.indices.delete(index=SHOP_INDEX, ignore=[404])
    admin.indices.create(
        index=SHOP_INDEX,
        body={"mappings": {"properties": {
            "name": {"type": "text"}, "description": {"type": "text"},
            "brand": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        }}},
    )  # fmt: skip
    for doc_id, product in SHOP.items():
        admin.index(index=SHOP_INDEX, id=doc_id, body=product, refresh=True)
    _let_ingest_attach(secured, "kgqr_test_attach_shop", SHOP_INDEX)

    def write(ingester: Settings, opensearch: Any, resources: WorkerResources, _: int) -> None:
        mapping = mapping_of(opensearch, SHOP_INDEX)
        chosen = FieldChoices(no_vectors=True, entity_fields=("brand.keyword",))
        fields = checked(field_map_for(SHOP_INDEX, mapping, chosen), mapping)
        attach(opensearch, SHOP_KB, fields)
        _graph_in_process(resources, redis_client, SHOP_KB, IndexFieldsSource(opensearch, fields))
        embedded = fields.model_copy(update={  # what `kgqr kb embed --field ...` records
            "side_vector_fields": ["description", "brand"],
            "vector_model": settings.embedder.model, "dimension": resources.dimension,
        })  # fmt: skip
        kb_meta.record(opensearch, SHOP_KB,
                       {"attached": embedded, "embedder": settings.embedder.model})  # fmt: skip
        installer.create_index(opensearch, schema.vectors_index(SHOP_KB),
                               schema.kb_index_body("vectors", dimension=0))  # fmt: skip
        _graph_in_process(resources, redis_client, SHOP_KB, IndexEmbedSource(opensearch, embedded))

    with _ingested(settings, secured, neo4j_driver, redis_client, SHOP_KB, write):
        yield SHOP_INDEX
    admin.indices.delete(index=SHOP_INDEX, ignore=[404])
    admin.close()


def _until_rewritten(url: str, index: str, body: dict[str, Any], authorization: str) -> None:
    """Wait until the proxy rewrites `body` on a just-attached index: it reads kgqr-meta
    again for an unknown name at most every kb_indices.MISS_TTL_S."""
    deadline = time.monotonic() + MISS_TTL_S + 5
    while time.monotonic() < deadline:
        answer = _explained(url, index, "base", body, {"authorization": authorization})
        if "passed_through" not in answer.json().get("kgqr", {}):
            return
        time.sleep(0.5)
    pytest.fail(f"kgqr never took {index} for a knowledge base: {answer.text[:600]}")


@pytest.mark.parametrize("strategy", ["graph", "graph_walk", "graph_mix"])
def test_a_graph_read_from_a_field_leads_only_callers_who_see_the_field(
    strategy: str, secured_shop_index: str, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    """The heavy anvil's brand, Acme, leads a reader to the skates and the hole. A caller
    whose field-level security hides `brand`, or whose masking hashes it, may read every
    product but is led nowhere by the brand, and never sees its name."""
    _until_rewritten(proxy[0], SHOP_INDEX, SHOP_QUERY, users["reader"])
    led_to: dict[str, set[str]] = {}
    for who in ("reader", "brandless", "masked"):
        answer = _explained(proxy[0], SHOP_INDEX, strategy, SHOP_QUERY,
                            {"authorization": users[who]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        explain = answer.json()["kgqr"]
        assert explain["fallback"] is None, explain["fallback"]
        assert {hit["_id"] for hit in answer.json()["hits"]["hits"]} >= {"s1", "s3"}, who
        nodes = explain["details"]["graph_nodes"]
        led_to[who] = {node["id"] for node in nodes} - {"s1", "s3"}
        if who != "reader":
            assert "acme" not in answer.text.lower(), (who, answer.text)
        else:
            assert any("Acme" in (node["path"] or "") for node in nodes), nodes
    assert led_to == {"reader": {"s2", "s4"}, "brandless": set(), "masked": set()}


def test_kgqrs_vectors_count_only_for_callers_who_see_the_text_they_were_made_from(
    secured: SecuredCredentials, secured_shop_index: str, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    """kgqr embedded each product's description and brand. A caller whose field-level
    security hides `brand`, or whose masking hashes it, cannot be ranked by vectors made
    from it; one who sees both is. And kgqr's side index is kgqr's: no caller reads it."""
    _until_rewritten(proxy[0], SHOP_INDEX, SHOP_QUERY, users["reader"])
    scored = {}
    for who in ("reader", "brandless", "masked"):
        answer = _explained(proxy[0], SHOP_INDEX, "base", SHOP_QUERY,
                            {"authorization": users[who]})  # fmt: skip
        explain = answer.json()["kgqr"]
        assert explain["fallback"] is None, explain
        vectors = explain["side_vectors"]
        scored[who] = (vectors["scored"], vectors["candidates"], explain["signals"])
    assert scored["reader"][0] == scored["reader"][1] >= 2, scored
    assert scored["reader"][2] == ["bm25", "knn"], scored
    for hidden in ("brandless", "masked"):  # no vector side at all
        assert scored[hidden][0] == 0 and scored[hidden][2] == ["bm25"], scored
    for who in ("reader", "brandless", "masked"):  # the graph's seeds read them the same way
        graph = _explained(proxy[0], SHOP_INDEX, "graph", SHOP_QUERY,
                           {"authorization": users[who]}).json()["kgqr"]  # fmt: skip
        assert graph["fallback"] is None and graph["details"]["seeds"], graph
        assert graph["side_vectors"]["scored"] == scored[who][0], graph
    for who in ("reader", "brandless"):
        direct = httpx.post(
            f"{secured.url}/{schema.vectors_index(SHOP_KB)}/_search",
            headers={"authorization": users[who]},
            verify=_trusting(secured),
        )
        assert direct.status_code == 403, direct.text


def _put_role(secured: SecuredCredentials, role: str, definition: dict[str, Any]) -> None:
    with httpx.Client(base_url=secured.url, verify=_trusting(secured),
                      headers={"authorization": secured.admin_authorization}) as admin:  # fmt: skip
        put = admin.put(f"/_plugins/_security/api/roles/{role}", json=definition)
        assert put.status_code in (200, 201), put.text


def test_a_cached_rewrite_is_not_served_once_the_field_it_was_led_by_is_hidden(
    secured: SecuredCredentials, secured_shop_index: str, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    """The same caller, the same roles: the rewrite led by the brand is cached, then the
    role's field-level security hides `brand`. The cache must not serve the brand's path."""
    _until_rewritten(proxy[0], SHOP_INDEX, SHOP_QUERY, users["reader"])
    body = {**SHOP_QUERY, "query": {"match": {"description": "heavy anvil blacksmiths"}}}

    def search() -> httpx.Response:
        answer = _explained(proxy[0], SHOP_INDEX, "graph", body,
                            {"authorization": users["shifting"]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer

    search()
    again = search()
    assert again.json()["kgqr"]["cached"] is True and "Acme" in again.text
    narrowed = {**ROLES["kgqr_test_shifting"], "index_permissions": [
        {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~brand"]}]}  # fmt: skip
    _put_role(secured, "kgqr_test_shifting", narrowed)
    try:
        after = search()
        assert after.json()["kgqr"]["cached"] is False
        assert "acme" not in after.text.lower(), after.text
    finally:
        _put_role(secured, "kgqr_test_shifting", ROLES["kgqr_test_shifting"])


def test_a_cached_rewrite_is_not_served_once_the_text_it_quotes_is_hidden(
    secured: SecuredCredentials, proxy: tuple[str, list[str]], users: dict[str, str]
) -> None:
    """PRF's expansion is made of its top hits' text, as the caller's fetch showed it.
    The same caller, the same roles, then field-level security hides the text: the cache
    (kgqr's documents keep it in `body`) kept serving the expansion for its 24 hours,
    though only ids were checked."""
    body = {**QUERY, "query": {"match": {"text": "professional bank robbers and the police"}}}

    def expanded() -> tuple[bool, str]:
        answer = _explained(proxy[0], INDEX, "prf", body, {"authorization": users["shifting"]})
        assert answer.status_code == 200, answer.text
        explain = answer.json()["kgqr"]
        return explain["cached"], json.dumps(explain["expansions"])

    expanded()
    cached, before = expanded()
    assert cached is True and "police" in before  # m1's text: "... the heat from police"
    narrowed = {**ROLES["kgqr_test_shifting"], "index_permissions": [
        {"index_patterns": PATTERNS, "allowed_actions": ["read"], "fls": ["~body"]}]}  # fmt: skip
    _put_role(secured, "kgqr_test_shifting", narrowed)
    try:
        cached, after = expanded()
        assert cached is False
        assert "police" not in after, after
    finally:
        _put_role(secured, "kgqr_test_shifting", ROLES["kgqr_test_shifting"])


def test_an_attached_index_is_searched_and_graphed_only_as_the_caller_may_read_it(
    secured: SecuredCredentials, secured_team_index: str, proxy: tuple[str, list[str]],
    users: dict[str, str],
) -> None:  # fmt: skip
    """Heat's neighbour Al Pacino (p2) is a graph node for a reader of the team's index and
    nowhere for the restricted user, whose DLS hides it; kgqr's own account is refused the
    index, so every request made for them went with their credentials."""
    as_kgqr = httpx.post(
        f"{secured.url}/{TEAM_INDEX}/_search",
        json={},
        headers={"authorization": users["kgqr"]},
        verify=_trusting(secured),
    )
    assert as_kgqr.status_code == 403  # fmt: skip
    body = {"query": {"match": {"content": "Heat, the 1995 film about bank robbers"}}, "size": 8}
    _until_rewritten(proxy[0], TEAM_INDEX, body, users["reader"])
    seen = _what_each_saw(proxy, users, TEAM_INDEX, body, "graph", evidence="graph_nodes")
    response, _ = seen["restricted"]
    at = response.find(HIDDEN)
    assert at < 0 and '"p2"' not in response, response[max(0, at - 600) : at + 200]
    shown = json.loads(seen["reader"][0])
    assert "p2" in {node["id"] for node in shown["kgqr"]["details"]["graph_nodes"]}
    assert "p2" in {hit["_id"] for hit in shown["hits"]["hits"]}
    outsider = _explained(proxy[0], TEAM_INDEX, "graph", body, {"authorization": users["outsider"]})
    assert outsider.status_code == 403  # the engine's refusal, as directly
