"""Who a request is for: the credential headers kgqr must send on the caller's behalf, the
identity OpenSearch resolves for them (what the rewrite cache is keyed by), and whether
OpenSearch would run their search of an index at all.

kgqr never lends its own account to a caller: every request made for a caller carries the
caller's own credential headers, and a caller without any reaches OpenSearch without any
(a secured cluster answers 401). Only `KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT`, for clusters
without security, gives anonymous callers kgqr's account.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kgqr_core.connections import basic_authorization, opensearch_basic_auth
from kgqr_core.settings import Settings
from query_rewriter.engine.http_headers import HOP_BY_HOP

# The security plugin's REST impersonation: who the request runs as, when the credentials'
# user may act as them.
IMPERSONATION_HEADER = "opendistro_security_impersonate_as"
# Headers by which OpenSearch's security plugin (or a proxy in front of it) commonly decides
# who a request runs as: HTTP basic / bearer, session cookies, client certificates
# forwarded by a TLS terminator, proxy authentication, the tenant a Dashboards user acts
# in, and the user impersonated. Only `KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT` reads this
# list: a request with none of them is anonymous there. Who a caller *is* is decided by
# every header (below), because the engine's authentication is configurable: a JWT in a
# header of the operator's naming, proxy auth's `x-proxy-ext-*` attributes, an
# X-Forwarded-For it trusts.
KNOWN_CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "cookie",
        "x-ssl-client-cert",
        "x-client-cert",
        "ssl-client-cert",
        "x-forwarded-client-cert",
        "x-proxy-user",
        "x-proxy-roles",
        "x-forwarded-user",
        "securitytenant",
        "security_tenant",
        IMPERSONATION_HEADER,
    }
)
# Headers that never decide who a request runs as: the body's framing and format, what
# the client accepts, tracing ids (new on every request: counted as identity, each would
# cost an identity lookup), and hop-by-hop ones. Every other header the caller sent is
# sent with each request kgqr makes for them and is part of their identity, exactly as
# the engine sees the search itself.
NOT_IDENTITY_HEADERS = HOP_BY_HOP | frozenset(
    {
        "host",
        "expect",
        "content-length",
        "content-type",
        "content-encoding",
        "accept",
        "accept-encoding",
        "accept-language",
        "accept-charset",
        "user-agent",
        "cache-control",
        "pragma",
        "origin",
        "referer",
        "x-opaque-id",
        "traceparent",
        "tracestate",
        "baggage",
        "x-request-id",
        "x-correlation-id",
        "x-amzn-trace-id",
        "b3",
        "x-elastic-client-meta",
        "x-request-start",
        "newrelic",
    }
)
# Tracing systems' families of headers, new on every request.
NOT_IDENTITY_PREFIXES = ("x-b3-", "x-datadog-", "x-envoy-", "sentry-", "uber-trace-",
                         "uberctx-", "x-cloud-trace-", "x-newrelic-")  # fmt: skip


def counts_for_identity(name: str) -> bool:
    return name not in NOT_IDENTITY_HEADERS and not name.startswith(NOT_IDENTITY_PREFIXES)


AUTHINFO_PATH = "/_plugins/_security/authinfo"
IDENTITY_TTL_S = 30.0
MAX_IDENTITIES = 10_000
REFUSED = "refused"


def service_authorization(settings: Settings) -> str | None:
    """kgqr's own account as a Basic Authorization header value, or None without one."""
    credentials = opensearch_basic_auth(settings)
    return basic_authorization(*credentials) if credentials else None


@dataclass(frozen=True)
class Caller:
    """The headers of one request that may decide who it runs as, as the caller sent
    them: every header but NOT_IDENTITY_HEADERS (a fixed list of credential headers left
    a custom JWT header out: such callers were resolved as anonymous and shared rewrites)."""

    credentials: tuple[tuple[str, str], ...]

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], settings: Settings) -> Caller:
        found = sorted(
            (name.lower(), value)
            for name, value in headers.items()
            if counts_for_identity(name.lower())
        )
        anonymous = not any(name in KNOWN_CREDENTIAL_HEADERS for name, _ in found)
        if anonymous and settings.anonymous_uses_service_account:
            authorization = service_authorization(settings)
            if authorization:
                found = sorted([*found, ("authorization", authorization)])
        return cls(tuple(found))

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.credentials)

    def fingerprint(self, only: Collection[str] | None = None) -> str:
        """A hash of the identity headers (`only` those named, when given)."""
        kept = [(k, v) for k, v in self.credentials if only is None or k in only]
        raw = json.dumps(kept or "anonymous").encode()
        return hashlib.sha256(raw).hexdigest()[:32]

    def credential_fingerprint(self) -> str:
        """The identity where OpenSearch resolves none (no security plugin): what the usual
        credential headers say. Every header would key rewrites by client address too
        (X-Forwarded-For), on a cluster where every caller sees the same documents."""
        return self.fingerprint(KNOWN_CREDENTIAL_HEADERS)


class IdentityResolver:
    """What OpenSearch's security plugin says of a caller, asked with the caller's
    credentials and kept for a short while: the identity it resolves (user, backend roles,
    mapped roles, tenant), and whether it lets the caller search an index.

    Two callers share a rewrite only when OpenSearch sees them as the same user with the
    same roles. Without the security plugin (authinfo 404s) or when it cannot be asked,
    the identity is the hash of the credential headers, which never merges two callers.
    None means OpenSearch refused the credentials (401): such a caller gets no rewrite,
    so it cannot spend kgqr's LLM or graph time.
    """

    def __init__(self, http: httpx.AsyncClient, ttl_s: float = IDENTITY_TTL_S) -> None:
        self._http = http
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[float, Any]] = {}

    async def identity(self, caller: Caller) -> str | None:
        fingerprint = caller.fingerprint()

        async def resolved() -> str | None:
            found = await self._resolve(caller)
            if found == REFUSED:
                return None
            return found or f"headers:{caller.credential_fingerprint()}"

        identity: str | None = await self._remembered(fingerprint, resolved)
        return identity

    async def search_refused(self, caller: Caller, index: str) -> int | None:
        """The status with which OpenSearch refuses the caller's searches of `index` (403:
        no permission, 404: no such index), else None. A rewrite is work done for the
        caller (LLM calls, graph reads with kgqr's account, an explain of what they found),
        so it is done only for a search the engine would run: an authenticated caller who
        may not read the index got the LLM's expansion of their query beside the 403. An
        answer that says neither (an overloaded engine) lets the rewrite go on; its searches
        still run as the caller."""

        async def probed() -> int | None:
            try:
                response = await self._http.post(
                    f"/{index}/_search",
                    json={"size": 0, "track_total_hits": False, "query": {"match_none": {}}},
                    headers=caller.headers,
                )
            except httpx.HTTPError:
                return None
            return response.status_code if response.status_code in (401, 403, 404) else None

        # A missing index is asked about again: one made a moment later is rewritten at once.
        refused: int | None = await self._remembered(
            f"{caller.fingerprint()} {index}", probed, keep=lambda status: status != 404
        )
        return refused

    async def _remembered(
        self,
        key: str,
        ask: Callable[[], Awaitable[Any]],
        keep: Callable[[Any], bool] = lambda _: True,
    ) -> Any:
        cached = self._known.get(key)
        now = time.monotonic()
        if cached and cached[0] > now:
            return cached[1]
        answer = await ask()
        if not keep(answer):
            return answer
        if len(self._known) >= MAX_IDENTITIES:
            # The expired go first, then the oldest half: clearing them all let one caller
            # sending junk headers (each a new fingerprint) evict every other caller.
            self._known = {k: v for k, v in self._known.items() if v[0] > now}
            if len(self._known) >= MAX_IDENTITIES:
                self._known = dict(list(self._known.items())[MAX_IDENTITIES // 2 :])
        self._known[key] = (now + self._ttl_s, answer)
        return answer

    async def _resolve(self, caller: Caller) -> str | None:
        try:
            response = await self._http.get(AUTHINFO_PATH, headers=caller.headers)
            if response.status_code == 401:
                return REFUSED
            if response.status_code != 200:
                return None
            info = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(info, dict) or not info.get("user_name"):
            return None
        who = {
            "user": info.get("user_name"),
            "backend_roles": sorted(info.get("backend_roles") or []),
            "roles": sorted(info.get("roles") or []),
            "tenant": info.get("user_requested_tenant"),
        }
        if info.get("custom_attribute_names"):
            # Document-level security may read the user's attributes (`${attr.jwt.dept}`),
            # whose values authinfo does not tell: two JWTs of one user with different
            # claims are two identities, so neither is served the other's rewrite.
            who["attributes"] = sorted(info["custom_attribute_names"])
            who["credentials"] = caller.fingerprint(
                {name for name, _ in caller.credentials} - {"x-forwarded-for"}
            )
        digest = hashlib.sha256(json.dumps(who, sort_keys=True).encode()).hexdigest()[:32]
        return f"user:{digest}"


async def credentials_refused(
    identities: IdentityResolver, headers: Mapping[str, str], settings: Settings
) -> bool:
    """Whether the engine refuses the credentials in `headers` (the security plugin's
    401); False where it has no security or cannot be asked."""
    return await identities.identity(Caller.from_headers(headers, settings)) is None
