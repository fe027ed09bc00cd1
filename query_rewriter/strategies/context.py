"""What a strategy may use for one query, so strategies never reach into the proxy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kgqr_core.llm import LlmRequest, parse_json_object
from kgqr_core.prompts import render
from kgqr_core.settings import Settings
from kgqr_core.single_flight import SingleFlight
from plugin.field_map import OWN_ID_FIELD, FieldMap
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta
from query_rewriter.engine.hybrid_query import (
    OWN_FIELDS,
    HybridWeights,
    SearchFields,
    bm25_clause,
    hybrid_body,
    search_params,
)
from query_rewriter.engine.identities import OwnDocumentsAsRead
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.strategies.params import (
    EXPANSIONS,
    HYBRID_BM25,
    KNN_K,
    Param,
    param_value,
    requested_value,
)
from query_rewriter.strategies.rewrite import LlmUsage, StageTimer
from query_rewriter.strategies.services import (
    Embed,
    Graph,
    Llm,
    OwnReadsCheck,
    Search,
    SideVectorScores,
)
from query_rewriter.strategies.text_facts import WithoutTextFacts

# What the context itself reads for every strategy: the models behind its LLM and embedder,
# and the length documents are cut to.
CONTEXT_SETTINGS = ("llm_model", "embedder_model", "rewrite_doc_chars")


class UndeclaredKnob(RuntimeError):
    """A strategy read a parameter or setting it did not declare: its rewrites would be
    cached without it in the key, so the read fails instead."""


@dataclass
class StrategyContext:
    settings: Settings
    index: str
    kb: str
    structure: DocumentStructure
    llm: Llm
    opensearch: Search
    embed: Embed
    timer: StageTimer = field(default_factory=StageTimer)
    params: dict[str, float] = field(default_factory=dict)
    graph: Graph | None = None  # for the KG strategies
    # Vectors of the texts embedded as queries in this rewrite: the query is needed by the
    # initial hits, the graph's triple seeds, KAR, KG-CQR and the final fusion alike, and
    # embedding it (CPU-bound, ~10 ms) once is enough.
    query_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    # The graph strategies ask for the query's vector from two branches at once (the plain
    # hits and the nearest triples): one embedding serves both.
    embedding: SingleFlight[np.ndarray] = field(default_factory=SingleFlight)
    # The names the running strategy declared (Strategy.declared); None: a context built by
    # hand (a bench, a test) that may read anything.
    declared: frozenset[str] | None = None
    usage: LlmUsage = field(default_factory=LlmUsage)
    meta: KnowledgeBaseMeta | None = None  # the KB's kgqr-meta record, where there is one
    # Where the KB's documents keep words, titles and vectors (an attached index's map);
    # None: kgqr's own documents.
    fields: FieldMap | None = None
    # A vector query's rewrite: `query_vectors` holds the caller's vector under the query's
    # name, and the plain hits are the k-NN search of it alone (it has no words).
    vector_query: bool = False
    # An attached index without vectors that kgqr embedded: its plain hits are ranked by
    # BM25 and these, as its searches are, so the graph's seeds are the hits base shows.
    side_vectors: SideVectorScores | None = None
    # Asked before search_ids trusts the `id` doc values (kept per caller by the proxy);
    # None: a context built by hand, which trusts every hit that has one.
    own_reads: OwnReadsCheck | None = None
    # Its answer, asked once per rewrite: an unclear one (an error, an index the caller sees
    # nothing of) is not kept across searches, and must not cost a probe per lookup.
    own_read: OwnDocumentsAsRead | None = None
    # The fields the caller's query named: an attached index that follows them reads its
    # plain hits (the graph's seeds) there, as the caller's search does.
    query_fields: tuple[str, ...] = ()
    # Whether the caller's fetch shows the text the graph's facts were read from (kgqr's
    # own knowledge bases; an attached index's edges carry their own field evidence).
    # Where it does not, the graph is read without them (strategies/text_facts.py) and no
    # triple is found.
    text_facts: bool = True
    # Where the KB's triples are searched: kgqr's account in the proxy, so that no caller
    # needs a grant on kgqr-KB-triples, which holds what every passage says whatever the
    # caller may read (vector_lookups.with_readable_passage checks each triple as the
    # caller). None: `opensearch` (a context built by hand).
    triples_reader: Search | None = None

    @property
    def triples(self) -> Search:
        """What searches the KB's triples index (triples_reader)."""
        return self.triples_reader or self.opensearch

    @property
    def search_fields(self) -> SearchFields:
        if self.fields is None:
            return OWN_FIELDS
        return SearchFields.of(self.fields, self.query_fields)

    @property
    def title_field(self) -> str:
        return (self.fields.title_field if self.fields else "title") or ""

    @property
    def body_field(self) -> str:
        return (self.fields.body_field if self.fields else "body") or ""

    async def query_vector(self, text: str) -> np.ndarray:
        if text not in self.query_vectors:
            vector, _ = await self.embedding.run(text, lambda: self._embed_one(text))
            self.query_vectors[text] = vector
        return self.query_vectors[text]

    async def _embed_one(self, text: str) -> np.ndarray:
        vectors = await self.embed([text])
        vector: np.ndarray = vectors[0]
        return vector

    def knowledge_graph(self) -> Graph:
        """The graph, for a strategy that cannot work without one: without the facts read
        from text the caller is not shown."""
        if self.graph is None:
            raise RuntimeError("no knowledge graph: this strategy needs one")
        return self.graph if self.text_facts else WithoutTextFacts(self.graph)

    def param(self, param: Param) -> float:
        """The request's value of a parameter the strategy declared, else its setting's."""
        self._check(param.name)
        return param_value(param, self.params, self.settings)

    def requested(self, param: Param) -> float | None:
        """The request's own value of a declared parameter, None where it set none."""
        self._check(param.name)
        return requested_value(param, self.params)

    def setting(self, name: str) -> Any:
        """A setting the strategy declared (Strategy.settings)."""
        self._check(name)
        return self.settings.value(name)

    def _check(self, name: str) -> None:
        if self.declared is not None and name not in self.declared:
            raise UndeclaredKnob(f"[{name}] is read but not declared by the strategy")

    @property
    def structure_text(self) -> str:
        """The KB's document structure for prompts; plain passages when none is recorded."""
        return self.structure.describe() or "- passage: title, text"

    @property
    def template_words(self) -> frozenset[str]:
        """The words a prompt's structure block shows the LLM (type and field names, and the
        "type: fields" legend), so that an answer which only copies them can be told apart."""
        return frozenset(_words(self.structure_text)) | {"type", "fields"}

    def generated_documents(self, answer: dict[str, Any] | None, limit: int = 0) -> list[str]:
        """The documents an LLM wrote, without the ones that only echo the structure block."""
        return documents_from(answer, limit or self.n_expansions, self.template_words)

    @property
    def n_expansions(self) -> int:
        return int(self.param(EXPANSIONS))

    def truncate(self, text: str, limit: int | None = None) -> str:
        limit = limit or int(self.setting("rewrite_doc_chars"))
        return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."

    async def llm_json(
        self, stage: str, prompt: str, max_tokens: int = 700, **values: Any
    ) -> dict[str, Any] | None:
        """Render a prompt template, ask for JSON, count the call; None if unparseable."""
        text = render(prompt, **values)
        with self.timer.stage(stage):
            answer = await self.llm.complete(
                LlmRequest.user(text, json_mode=True, max_tokens=max_tokens, temperature=0.7)
            )
        self.usage.calls += 1
        self.usage.cached += int(answer.cached)
        self.usage.prompt_chars[stage] = self.usage.prompt_chars.get(stage, 0) + len(text)
        return parse_json_object(answer.texts[0])

    async def search_ids(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """`body`'s hits (`_id`, `_score`) when nothing else of them is needed. Of kgqr's
        own documents, their `id` doc values and no stored fields: the engine reads `_id`
        from stored fields compressed in blocks with whole documents (vectors included),
        which made a 150-id cosine lookup 3x dearer (40 ms against 13) and a 10-hit hybrid
        search 3.5x (34 ms against 10) on this machine. An attached index, or a caller
        whose field-level security hides or masks `id`, gets `_id` from `_source: false`:
        a masked field's doc values are hashes, which the graph would not know."""
        if self.fields is None and index == self.index and await self._reads_own_ids():
            own = {**body, "stored_fields": "_none_", "docvalue_fields": [OWN_ID_FIELD]}
            hits = (await self.opensearch.search(index, own, params))["hits"]["hits"]
            found = [(hit.get("fields") or {}).get(OWN_ID_FIELD) or [] for hit in hits]
            if all(found):
                return [{"_id": str(values[0]), "_score": hit.get("_score")}
                        for values, hit in zip(found, hits, strict=True)]  # fmt: skip
        bare = {**body, "_source": False}
        return list((await self.opensearch.search(index, bare, params))["hits"]["hits"])

    async def _reads_own_ids(self) -> bool:
        if self.own_reads is None:
            return True
        if self.own_read is None:
            self.own_read = await self.own_reads()
        return self.own_read.ids

    async def plain_hits(
        self,
        query: str,
        size: int,
        fields: list[str] | None,
        stage: str = "initial_retrieval",
        filters: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """The plain query's top hits (hybrid BM25 + k-NN, or kgqr's side vectors; BM25
        alone if the hybrid search fails), as OpenSearch returns them: `_id`, `_score`,
        `_source` with `fields` (None: ids alone, search_ids); `filters` (OpenSearch
        filter clauses) apply to both sides."""
        with self.timer.stage(stage):
            vector = await self.query_vector(query)
            parsed = ParsedQuery(query, filters=filters or [])
            request: dict[str, Any] = {"size": size}
            if fields is not None:
                request["_source"] = fields
            weights = HybridWeights(
                self.requested(HYBRID_BM25), self.settings.rewrite.hybrid_boost_weights
            )
            searched = self.search_fields
            k = int(self.param(KNN_K))
            scores = None
            if self.vector_query:
                parsed = ParsedQuery(query, filters=filters or [], vector=tuple(vector))
            elif self.side_vectors is not None:
                scores = await self.side_vectors(parsed, searched, vector, size)
            body = hybrid_body(
                request, parsed, query, vector, k, weights, fields=searched, vector_scores=scores
            )
            try:
                return await self._hits(body, search_params({}, body), fields is None)
            except Exception:
                if self.vector_query:  # no words to fall back on: the rewrite falls back
                    raise
                body = {**request, "query": bm25_clause(query, parsed, searched)}
                return await self._hits(body, None, fields is None)

    async def _hits(
        self, body: dict[str, Any], params: dict[str, str] | None, ids_only: bool
    ) -> list[dict[str, Any]]:
        if ids_only:
            return await self.search_ids(self.index, body, params)
        hits: list[dict[str, Any]] = (await self.opensearch.search(self.index, body, params))[
            "hits"
        ]["hits"]
        return hits

    async def initial_hits(self, query: str, size: int) -> list[dict[str, Any]]:
        """The plain query's top hits as PRF and RAR show them to the LLM: id, title, text."""
        title, body = self.title_field, self.body_field
        return [
            {
                "id": hit["_id"],
                "title": source_text(hit["_source"], title),
                "text": self.truncate(source_text(hit["_source"], body)),
            }
            for hit in await self.plain_hits(query, size, [f for f in (title, body) if f])
        ]

    def format_documents(self, documents: list[dict[str, Any]]) -> str:
        return "\n".join(
            f"[{i}] {doc['title']}: {doc['text']}" for i, doc in enumerate(documents, start=1)
        )


def source_text(source: dict[str, Any], path: str) -> str:
    """A hit's field as text, by dotted path (`metadata.title`, as third-party clients
    nest theirs); empty when the hit lacks it (or field-level security hid it)."""
    value: Any = source
    for part in path.split(".") if path else ():
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or value is source:
        return ""
    return value if isinstance(value, str) else _flatten(value)


def _flatten(value: Any) -> str:
    """A generated document as plain text, however the LLM nested it."""
    if isinstance(value, dict):
        return " ".join(_flatten(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_flatten(v) for v in value)
    return str(value) if value is not None else ""


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def documents_from(
    answer: dict[str, Any] | None, limit: int, template_words: frozenset[str] = frozenset()
) -> list[str]:
    """The ``documents`` list of a JSON answer, cleaned; empty when the answer is unusable.

    A document made only of `template_words` is dropped. The 1.5B model sometimes fills the
    structure in with its own names ("fields title text" for "- passage: title, text")
    instead of writing facts; appended to the query, that would only match boilerplate.
    """
    if not answer:
        return []
    documents = answer.get("documents")
    if isinstance(documents, str | dict):
        documents = [documents]
    if not isinstance(documents, list):
        return []
    cleaned = [" ".join(_flatten(document).split()) for document in documents]
    return [text for text in cleaned if not _words(text) <= template_words][:limit]
