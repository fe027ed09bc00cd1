"""`kgqr tune auto` and `kgqr kb set-default` end to end: a knowledge base whose judged
queries favour the graph walk gets the walk as its default, one whose queries favour
nothing keeps base, and a proxy serves each default with the explain naming it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from kgqr_ops.cli import main
from plugin import kb_meta
from plugin.schema import documents_index, meta_mapping_update
from tests.integration.ingest_helpers import TINY_KB, ingested

pytestmark = pytest.mark.quick

WALKS_KB = "auto-birthplaces"
PLAIN_KB = "auto-movies"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PEOPLE = ["Ada Quill", "Bram Otter", "Cora Lunt", "Dov Marsh", "Edda Pike", "Fenn Roe",
          "Gia Tolle", "Hugo Venn", "Ines Wold", "Jory Yates", "Kai Zell", "Lise Arno"]  # fmt: skip
TOWNS = ["Ashford", "Brindle", "Carrow", "Dunmere", "Eskby", "Farrow", "Gorsley",
         "Hollin", "Ivystone", "Jedburgh", "Kelso", "Lanark"]  # fmt: skip


@pytest.fixture(scope="module")
def birthplaces(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """People whose pages never name their birthplace, towns whose pages never name their
    people, and the graph's born_in edges between them: a question about where someone
    was born finds their page, and only the graph leads on to the town."""
    folder = tmp_path_factory.mktemp("birthplaces")
    documents, relations, judged = [], [], []
    for number, (person, town) in enumerate(zip(PEOPLE, TOWNS, strict=True)):
        page = f"{person} is a painter who left home young and never went back."
        documents.append({"id": f"p{number}", "type": "person", "title": person, "text": page})
        about = f"{town} is a town of bridges, markets and old mills."
        documents.append({"id": f"t{number}", "type": "town", "title": town, "text": about})
        relations.append({"source": f"p{number}", "type": "born_in", "target": f"t{number}"})
        question = f"the town where the painter {person} was born"
        judged.append({"id": f"q{number}", "query": question, "relevant": [f"t{number}"]})
    (folder / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    (folder / "relations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relations))
    (folder / "structure.json").write_text(json.dumps(
        {"types": {"person": [], "town": []}, "relations": ["born_in"]}))  # fmt: skip
    queries = folder / "judged.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in judged))
    return f"jsonl:{folder}", queries


@pytest.fixture(scope="module")
def knowledge_bases(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, birthplaces: tuple[str, Path],
) -> Iterator[None]:  # fmt: skip
    stores = (settings, opensearch, neo4j_driver, redis_client)
    with ingested(*stores, birthplaces[0], WALKS_KB), ingested(*stores, TINY_KB, PLAIN_KB):
        yield


@pytest.fixture(scope="module")
def proxy(settings: Settings, knowledge_bases: None) -> Iterator[str]:
    """A proxy that re-reads kgqr-meta every second, and searches naming no strategy pass
    through unless their KB has a default of its own."""
    tuned = settings.replaced({"rewrite_cache_ttl_s": 0, "rewrite_kb_refresh_s": 1.0,
                               "rewrite_default_strategy": "none"})  # fmt: skip
    with running_proxy(tuned) as url:
        yield url


def _kgqr(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _served(proxy: str, kb: str, text: str, version: int) -> dict[str, Any]:
    """The explain of a search naming no strategy, once the proxy serves `version`."""
    deadline = time.monotonic() + 10
    while True:
        body = {"query": {"match": {"text": text}}, "size": 5}
        answer = httpx.post(f"{proxy}/{documents_index(kb)}/_search",
                            params={"kgqr.explain": "true"}, json=body, timeout=60)  # fmt: skip
        explain = answer.json()["kgqr"]
        if explain.get("default", {}).get("version") == version or time.monotonic() > deadline:
            return explain
        time.sleep(0.5)


def test_judged_queries_that_favour_the_walk_make_it_the_default(
    proxy: str, birthplaces: tuple[str, Path], opensearch: Any, tmp_path: Path
) -> None:
    judged = f"jsonl:{birthplaces[1]}"
    output = _kgqr("tune", "auto", "--kb", WALKS_KB, "--queries", judged, "--strategies",
                   "graph_walk", "--proxy", proxy, "--out", str(tmp_path))  # fmt: skip
    meta = kb_meta.load(opensearch, WALKS_KB)
    assert meta is not None and meta.default is not None, output
    chosen = meta.default
    assert chosen.strategy == "graph_walk", output
    assert chosen.set_by == "kgqr tune auto" and "beat base on 12 judged queries" in chosen.reason
    evidence = chosen.evidence or {}
    recall = next(c for c in evidence["against_base"] if c["metric"] == "R@5")
    assert recall["low"] > 0 and recall["verdict"] == "better"
    assert json.loads((tmp_path / "tune-auto.json").read_text())["best_overall"]
    explain = _served(proxy, WALKS_KB, "the town where the painter Ada Quill was born",
                      chosen.version)  # fmt: skip
    assert explain["strategy"] == "graph_walk"
    assert explain["default"]["version"] == chosen.version
    assert explain["default"]["reason"] == chosen.reason

    # By hand, and back: each a new version, each served with its own explain.
    _kgqr("kb", "set-default", WALKS_KB, "graph", "--param", "graph.weight=0.4",
          "--reason", "trying the bridge")  # fmt: skip
    tried = _served(proxy, WALKS_KB, "Ada Quill", chosen.version + 1)
    assert tried["strategy"] == "graph" and tried["default"]["reason"] == "trying the bridge"
    assert tried["default"]["params"] == {"graph.weight": 0.4}
    _kgqr("kb", "set-default", WALKS_KB, "--rollback")
    back = _served(proxy, WALKS_KB, "Ada Quill", chosen.version + 2)
    assert back["strategy"] == "graph_walk"
    assert back["default"]["reason"].startswith(f"rollback to v{chosen.version}")
    shown = _kgqr("kb", "show", WALKS_KB)
    assert f"default v{chosen.version + 2}: graph_walk" in shown and "(served)" in shown


def test_judged_queries_that_favour_nothing_keep_base(
    proxy: str, opensearch: Any, tmp_path: Path
) -> None:
    """Each document of the movie KB asked for by its title (and each movie by its plot):
    base finds it first already, so nothing can beat it. Eleven queries: on fewer than
    ten, tune auto records nothing at all. Base is recorded with the --param it was scored
    with (it was recorded without, and served at a setting never scored)."""
    documents = (FIXTURES / "tiny_kb" / "documents.jsonl").read_text().splitlines()
    judged = []
    for document in map(json.loads, documents):
        judged.append({"query": document["title"], "relevant": [document["id"]]})
        if plot := document.get("fields", {}).get("plot"):
            judged.append({"query": plot, "relevant": [document["id"]]})
    assert len(judged) >= 10
    queries = tmp_path / "judged.jsonl"
    queries.write_text(
        "".join(json.dumps({"id": f"q{n}", **q}) + "\n" for n, q in enumerate(judged))
    )
    output = _kgqr("tune", "auto", "--kb", PLAIN_KB, "--queries", f"jsonl:{queries}",
                   "--param", "knn.k=40", "--proxy", proxy,
                   "--out", str(tmp_path / "out"))  # fmt: skip
    meta = kb_meta.load(opensearch, PLAIN_KB)
    assert meta is not None and meta.default is not None
    assert meta.default.strategy == "base" and "no setting beat base" in meta.default.reason
    assert meta.default.params == {"knn.k": 40.0}
    assert "no setting beat base" in output
    explain = _served(proxy, PLAIN_KB, "professional bank robbers", meta.default.version)
    assert explain["strategy"] == "base" and explain["default"]["strategy"] == "base"
    assert explain["default"]["params"] == {"knn.k": 40.0}


def test_set_default_refuses_what_a_strategy_does_not_read_and_unknown_versions(
    knowledge_bases: None,
) -> None:
    runner = CliRunner()
    foreign = runner.invoke(main, ["kb", "set-default", PLAIN_KB, "graph", "--param", "kar.k=3"])
    assert foreign.exit_code == 2 and "graph.weight" in foreign.output
    llm = runner.invoke(main, ["tune", "auto", "--kb", PLAIN_KB, "--strategies", "hyde"])
    assert llm.exit_code == 2 and "must be LLM-free" in llm.output
    never = runner.invoke(main, ["kb", "set-default", PLAIN_KB, "--rollback", "--to-version",
                                 "99"])  # fmt: skip
    assert never.exit_code == 1 and "no default v99" in never.output


def test_defaults_set_at_once_all_land_as_consecutive_versions(
    knowledge_bases: None, settings: Settings, opensearch: Any
) -> None:
    """Each version is written over the record it was numbered from: four set at once
    land as four consecutive versions, none lost."""
    from concurrent.futures import ThreadPoolExecutor

    from kgqr_core import connections

    meta = kb_meta.load(opensearch, PLAIN_KB)
    assert meta is not None
    before = len(meta.defaults)

    def set_one(number: int) -> int:
        client = connections.opensearch_client(settings)
        return kb_meta.set_default(
            client, PLAIN_KB, "base", {}, f"at once {number}", "test"
        ).version

    with ThreadPoolExecutor(4) as pool:
        versions = sorted(pool.map(set_one, range(4)))
    assert versions == [before + 1, before + 2, before + 3, before + 4]
    after = kb_meta.load(opensearch, PLAIN_KB)
    assert after is not None and len(after.defaults) == before + 4


def test_an_older_kgqr_metas_mapping_takes_kgqrs_new_fields(
    opensearch: Any, unique_name: str
) -> None:
    """On a kgqr-meta whose `document_revision` the engine mapped as `long` (written
    before kgqr mapped it), the update was a 400 over the one field, and `kb set-default`
    and `kb attach` ended on it. A stand-in index: kgqr-meta's mapping cannot be undone."""
    opensearch.indices.create(index=unique_name, body={"mappings": {"properties": {
        "kb": {"type": "keyword"}, "document_revision": {"type": "long"}}}})  # fmt: skip
    try:
        current = opensearch.indices.get_mapping(index=unique_name)
        opensearch.indices.put_mapping(index=unique_name, body=meta_mapping_update(current))
        mapped = opensearch.indices.get_mapping(index=unique_name)[unique_name]["mappings"]
        assert mapped["dynamic"] == "false"
        assert mapped["properties"]["document_revision"] == {"type": "long"}
        assert mapped["properties"]["defaults"] == {"type": "object", "enabled": False}
        # A field no kgqr maps is kept in the record and not mapped.
        opensearch.index(index=unique_name, id="x", body={"kb": "x", "newer": {"a": 1}},
                         refresh=True)  # fmt: skip
        assert "newer" not in opensearch.indices.get_mapping(index=unique_name)[unique_name][
            "mappings"]["properties"]  # fmt: skip
        assert opensearch.get(index=unique_name, id="x")["_source"]["newer"] == {"a": 1}
    finally:
        opensearch.indices.delete(index=unique_name, ignore_unavailable=True)
