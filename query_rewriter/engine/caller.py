"""Who a request is for: the headers that may decide who it runs as, which kgqr sends with
every request it makes for the caller (engine/gateway.py) and resolves to an identity
(engine/identities.py).

kgqr never lends its own account to a caller: every request made for a caller carries the
caller's own credential headers, and a caller without any reaches OpenSearch without any
(a secured cluster answers 401). Only `KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT`, for clusters
without security, gives anonymous callers kgqr's account.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from kgqr_core.connections import basic_authorization, opensearch_basic_auth
from kgqr_core.settings import Settings
from query_rewriter.engine.http_headers import HOP_BY_HOP

# The security plugin's REST impersonation: who the request runs as, when the credentials'
# user may act as them.
IMPERSONATION_HEADER = "opendistro_security_impersonate_as"
# Headers by which OpenSearch's security plugin (or a proxy in front of it) commonly decides
# who a request runs as: HTTP basic / bearer, session cookies, client certificates
# forwarded by a TLS terminator, proxy authentication, the tenant a Dashboards user acts
# in, and the user impersonated. With those a deployment names (credential_headers), they
# say whether a caller is anonymous (`KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT` lends it kgqr's
# account) and who it is where OpenSearch names no user. Where it does, who a caller *is*
# is decided by every header (below), because the engine's authentication is configurable:
# a JWT in a header of the operator's naming, proxy auth's `x-proxy-ext-*` attributes, an
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


def credential_headers(settings: Settings) -> frozenset[str]:
    """KNOWN_CREDENTIAL_HEADERS and those a deployment's gateway also decides by
    (KGQR_PROXY_CREDENTIAL_HEADERS), lower-case."""
    configured = settings.proxy.credential_headers.split(",")
    return KNOWN_CREDENTIAL_HEADERS | {name.strip().lower() for name in configured if name.strip()}


def service_authorization(settings: Settings) -> str | None:
    """kgqr's own account as a Basic Authorization header value, or None without one."""
    credentials = opensearch_basic_auth(settings)
    return basic_authorization(*credentials) if credentials else None


# The key when neither KGQR_PROXY_IDENTITY_KEY nor kgqr's password is set.
_PROCESS_KEY = secrets.token_bytes(32)


def identity_key(settings: Settings) -> bytes:
    """What keys a caller's fingerprint: the configured key, else one derived from kgqr's
    own password (every proxy process of a deployment has it, a reader of Redis need
    not), else this process's own."""
    configured = settings.proxy.identity_key or settings.opensearch.password
    return _derived_key(configured.get_secret_value()) if configured else _PROCESS_KEY


@lru_cache(maxsize=4)
def _derived_key(secret: str) -> bytes:
    return hashlib.sha256(b"kgqr caller fingerprint\0" + secret.encode()).digest()


@dataclass(frozen=True)
class Caller:
    """The headers of one request that may decide who it runs as, as the caller sent
    them: every header but NOT_IDENTITY_HEADERS (a fixed list of credential headers left
    a custom JWT header out: such callers were resolved as anonymous and shared rewrites)."""

    credentials: tuple[tuple[str, str], ...] = field(repr=False)  # never in a log line
    key: bytes = field(default=b"", repr=False)
    credential_names: frozenset[str] = KNOWN_CREDENTIAL_HEADERS
    # It sent no credentials of its own (any it carries are kgqr's, lent): callers kgqr
    # cannot tell apart, whatever identity they resolve to.
    anonymous: bool = False

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], settings: Settings) -> Caller:
        named = credential_headers(settings)
        found = sorted(
            (name.lower(), value)
            for name, value in headers.items()
            if counts_for_identity(name.lower()) or name.lower() in named
        )
        # An empty one says nothing, and the front cannot tell it from none (nginx's
        # `$http_cookie` is "" either way): both lend alike. kgqr's own authorization, which
        # the front lends before kgqr would, is not the caller's.
        lending = settings.proxy.anonymous_uses_service_account
        lent = service_authorization(settings) if lending else None
        anonymous = not any(
            name in named and value.strip()
            and not (lent and name == "authorization" and value == lent)
            for name, value in found
        )  # fmt: skip
        if anonymous and lent and ("authorization", lent) not in found:
            found = sorted([*found, ("authorization", lent)])
        return cls(tuple(found), identity_key(settings), named, anonymous)

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.credentials)

    def fingerprint(self, only: Collection[str] | None = None) -> str:
        """A keyed hash of the identity headers (`only` those named, when given); a caller
        without any is "anonymous" in every process."""
        kept = [(k, v) for k, v in self.credentials if only is None or k in only]
        if not kept:
            return "anonymous"
        return hmac.new(self.key, json.dumps(kept).encode(), hashlib.sha256).hexdigest()[:32]

    def credential_fingerprint(self) -> str:
        """The identity where OpenSearch resolves none (no security plugin): what the
        credential headers say (the usual ones and the deployment's). Every header would key
        rewrites by client address too (X-Forwarded-For), on a cluster where every caller
        sees the same documents."""
        return self.fingerprint(self.credential_names)
