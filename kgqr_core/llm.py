"""The LLM behind an OpenAI-compatible endpoint, with every answer cached in Redis.

Answers are cached by (model, request), so re-running an ingest or an evaluation with the
same prompts costs no LLM time; the cache is shared by every process using the same Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from kgqr_core.fair_slots import FairSlots
from kgqr_core.outage_notice import OutageNotice
from kgqr_core.settings import Settings
from kgqr_core.single_flight import SingleFlight

log = logging.getLogger("kgqr.llm")

CACHE_PREFIX = "kgqr:llm:"
CACHE_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True)
class LlmRequest:
    messages: tuple[tuple[str, str], ...]
    json_mode: bool = False
    n: int = 1
    max_tokens: int = 512
    temperature: float = 0.0

    @classmethod
    def user(cls, prompt: str, **options: Any) -> LlmRequest:
        return cls(messages=(("user", prompt),), **options)

    def cache_key(self, model: str, sample: int = 0) -> str:
        """Sample 0 keeps the key answers had before samples existed; a greedy (temperature
        0) answer is the same in every sample, so it is cached once."""
        fields: list[Any] = [model, self.messages, self.json_mode, self.n, self.max_tokens,
                             self.temperature]  # fmt: skip
        if sample and self.temperature > 0:
            fields.append({"sample": sample})
        return CACHE_PREFIX + hashlib.sha256(json.dumps(fields).encode()).hexdigest()

    def openai_arguments(self, model: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": model,
            "messages": [{"role": role, "content": content} for role, content in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "n": self.n,
        }
        if self.json_mode:
            arguments["response_format"] = {"type": "json_object"}
        return arguments


class LlmStreamInterrupted(RuntimeError):
    """The endpoint closed a streamed answer before it was complete."""


class StreamedAnswer:
    """Collects a streamed chat completion's pieces per choice."""

    def __init__(self, n: int) -> None:
        self._parts: dict[int, list[str]] = {index: [] for index in range(n)}
        self._finished: set[int] = set()

    def add(self, chunk: Any) -> None:
        for choice in chunk.choices:
            self._parts.setdefault(choice.index, []).append(choice.delta.content or "")
            if choice.finish_reason is not None:
                self._finished.add(choice.index)

    def texts(self, model: str) -> list[str]:
        if self._finished != set(self._parts):
            # llama-cpp-python ends a stream early, with no finish reason, when it interrupts
            # a request for a newer one; a truncated answer must not be parsed or cached.
            raise LlmStreamInterrupted(f"stream ended without a finish reason ({model})")
        return ["".join(self._parts[index]) for index in sorted(self._parts)]


@dataclass(frozen=True)
class LlmAnswer:
    texts: list[str]
    cached: bool
    elapsed_ms: float


def _connection(settings: Settings) -> dict[str, Any]:
    return {
        "base_url": settings.llm.base_url,
        "api_key": settings.llm.api_key.get_secret_value(),
        "timeout": settings.llm.timeout_s,
    }


class _AnswerCache:
    """What the blocking and the async client share: answers cached under one key for
    (model, sample, request). A worker and the CLI reuse each other's (in the Redis of
    KGQR_REDIS_URL, which a worker elsewhere is given); the proxy keeps its own in the
    caches' Redis (KGQR_CACHE_REDIS_URL), per caller (AsyncLlmClient.complete's scope)."""

    def __init__(self, settings: Settings, redis: Any | None) -> None:
        self.model = settings.llm.model
        self.sample = settings.llm.sample
        self._redis = redis
        self._outage = OutageNotice(log, "LLM answer cache unavailable: asking the LLM")

    def _key(self, request: LlmRequest) -> str:
        return request.cache_key(self.model, self.sample)

    @staticmethod
    def _cached(hit: bytes | None, started: float) -> LlmAnswer | None:
        """The cached answer, or None for a miss (a corrupt entry is one too)."""
        try:
            texts = json.loads(hit) if hit is not None else None
        except ValueError:
            return None
        if not isinstance(texts, list):
            return None
        return LlmAnswer(texts, True, (time.perf_counter() - started) * 1000)

    def _unavailable(self, exc: Exception) -> None:
        """The cache saves LLM time: an outage costs that time, never the answer (a Redis
        outage used to make every LLM rewrite fall back to the plain query)."""
        self._outage.tell(exc)


class LlmClient(_AnswerCache):
    """Blocking client for workers and the CLI; the proxy has an async twin over the same
    cache keys."""

    def __init__(self, settings: Settings, redis: Any | None = None) -> None:
        from openai import OpenAI

        super().__init__(settings, redis)
        self._client = OpenAI(**_connection(settings), max_retries=1)

    def complete(self, request: LlmRequest) -> LlmAnswer:
        started = time.perf_counter()
        key = self._key(request)
        if (cached := self._cached(self._get(key), started)) is not None:
            return cached
        # Streamed for the same reason as the async client: a timed-out (and retried)
        # request must not leave the server writing an answer nobody reads.
        answer = StreamedAnswer(request.n)
        arguments = request.openai_arguments(self.model)
        with self._client.chat.completions.create(**arguments, stream=True) as stream:
            for chunk in stream:
                answer.add(chunk)
        texts = answer.texts(self.model)
        if self._redis is not None:
            try:
                self._redis.set(key, json.dumps(texts), ex=CACHE_TTL_S)
            except Exception as exc:
                self._unavailable(exc)
        return LlmAnswer(texts, False, (time.perf_counter() - started) * 1000)

    def _get(self, key: str) -> bytes | None:
        if self._redis is None:
            return None
        try:
            return self._redis.get(key)  # type: ignore[no-any-return]
        except Exception as exc:
            self._unavailable(exc)
            return None


# Braces of an LLM answer tried as the start of its JSON object (prose may hold a few).
MAX_OBJECT_STARTS = 16


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in an LLM answer, tolerating prose or code fences around it,
    and an answer cut off by the token limit (see `_cut_off_object`).

    Only the first MAX_OBJECT_STARTS braces are tried: each try reads to the answer's end,
    so trying every brace of an answer cut off in a string full of them (which a query
    can ask the LLM for) took time quadratic in its length (0.5 s for 3,000 braces)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if start == -1:
            break
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            salvaged = _cut_off_object(text[start:])
            if salvaged is not None:
                return salvaged
            start = text.find("{", start + 1)
            continue
        return value if isinstance(value, dict) else None
    return None


def _cut_off_object(text: str) -> dict[str, Any] | None:
    """A JSON object that ends mid-way, closed after the last complete element of its
    deepest open list (or else after its own last complete member, or else after the last
    complete member of the deepest object that has one). A long answer that hits
    max_tokens then keeps the documents or entities it wrote in full and drops the one it
    was writing; without this, the search for a later object returned one of its inner
    objects, which has no list at all."""
    # Each open container's closing bracket and the position of its last direct comma.
    open_containers: list[tuple[str, int | None]] = []
    in_string = escaped = False
    for position, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            open_containers.append(("]" if char == "[" else "}", None))
        elif char in "]}":
            if not open_containers or open_containers[-1][0] != char or len(open_containers) == 1:
                return None  # malformed, or complete (so not cut off: the decoder judged it)
            open_containers.pop()
        elif char == "," and open_containers:
            open_containers[-1] = (open_containers[-1][0], position)
    with_comma = [depth for depth in reversed(range(len(open_containers)))
                  if open_containers[depth][1] is not None]  # fmt: skip
    in_a_list = [depth for depth in with_comma if open_containers[depth][0] == "]" or depth == 0]
    if not with_comma:
        return None
    # Else no list holds a complete element (one document, cut off deep in its relations):
    # keep that element's complete members rather than none of it.
    depth = (in_a_list or with_comma)[0]
    comma = open_containers[depth][1]
    closers = "".join(c for c, _ in reversed(open_containers[: depth + 1]))
    try:
        value = json.loads(text[:comma] + closers)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class AsyncLlmClient(_AnswerCache):
    """The proxy's client: same cache keys as LlmClient, and identical requests in flight
    at once share one LLM call (the rest await its answer)."""

    def __init__(self, settings: Settings, redis: Any | None = None) -> None:
        from openai import AsyncOpenAI

        super().__init__(settings, redis)
        # No client retries: a failing LLM must fall back fast, not stall a search.
        self._client = AsyncOpenAI(**_connection(settings), max_retries=0)
        # A stream's read timeout only bounds the gap between chunks; this bounds the whole.
        self._timeout_s = settings.llm.timeout_s
        self._in_flight: SingleFlight[list[str]] = SingleFlight()
        # A local LLM server answers one call at a time; more in flight only queue there,
        # where a rewrite that gives up cannot leave the queue. They queue here instead,
        # each caller in turn, and a rewrite whose budget ends while waiting (its wait_for
        # cancels) falls back.
        self._slots = FairSlots(settings.llm.max_concurrent)

    @property
    def waiting(self) -> int:
        return self._slots.waiting

    async def complete(self, request: LlmRequest, scope: str | None = None) -> LlmAnswer:
        """`scope`: whose answer this is (the caller's identity). Answers are cached and
        shared in flight only within a scope: a shared answer told a caller, through its
        explain's `cached_llm_calls` and its speed, that someone else had just asked the
        same thing."""
        started = time.perf_counter()
        key = self._key(request)
        if scope is not None:
            key = f"{key}:{hashlib.sha256(scope.encode()).hexdigest()[:32]}"
        if (cached := self._cached(await self._get(key), started)) is not None:
            return cached
        owner = scope or ""
        texts, shared = await self._in_flight.run(key, lambda: self._answer(key, request, owner))
        return LlmAnswer(list(texts), shared, (time.perf_counter() - started) * 1000)

    async def _answer(self, key: str, request: LlmRequest, owner: str) -> list[str]:
        """The LLM's answer once a slot is free for `owner`, cached in Redis."""
        async with self._slots.slot(owner):
            async with asyncio.timeout(self._timeout_s):
                texts = await self._streamed_texts(request)
        if self._redis is not None:
            try:
                await self._redis.set(key, json.dumps(texts), ex=CACHE_TTL_S)
            except Exception as exc:
                self._unavailable(exc)
        return texts

    async def _get(self, key: str) -> bytes | None:
        if self._redis is None:
            return None
        try:
            return await self._redis.get(key)  # type: ignore[no-any-return]
        except Exception as exc:
            self._unavailable(exc)
            return None

    async def _streamed_texts(self, request: LlmRequest) -> list[str]:
        """Streamed so that a caller giving up (a rewrite timeout cancels this coroutine)
        closes the connection and the server stops generating: a non-streamed request keeps
        a local llama.cpp server busy for its whole answer, and every search behind it
        waiting, long after nobody wants it."""
        answer = StreamedAnswer(request.n)
        arguments = request.openai_arguments(self.model)
        async with await self._client.chat.completions.create(**arguments, stream=True) as stream:
            async for chunk in stream:
                answer.add(chunk)
        return answer.texts(self.model)

    async def close(self) -> None:
        await self._client.close()


@dataclass(frozen=True)
class CallerLlm:
    """The proxy's LLM as one caller uses it: every answer cached in that caller's scope."""

    client: AsyncLlmClient
    caller: str

    async def complete(self, request: LlmRequest) -> LlmAnswer:
        return await self.client.complete(request, scope=self.caller)
