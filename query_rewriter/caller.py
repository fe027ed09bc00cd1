"""Who a request is for: the credential headers kgqr must send on the caller's behalf, and
the identity OpenSearch resolves for them (what the rewrite cache is keyed by).

kgqr never lends its own account to a caller: every request made for a caller carries the
caller's own credential headers, and a caller without any reaches OpenSearch without any
(a secured cluster answers 401). Only `KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT`, for clusters
without security, gives anonymous callers kgqr's account.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from kgqr_core.connections import basic_authorization, opensearch_basic_auth
from kgqr_core.settings import Settings

# The security plugin's REST impersonation: who the request runs as, when the credentials'
# user may act as them.
IMPERSONATION_HEADER = "opendistro_security_impersonate_as"
# Headers by which OpenSearch's security plugin (or a proxy in front of it) decides who a
# request runs as: HTTP basic / bearer, session cookies, client certificates forwarded by a
# TLS terminator, proxy authentication, the tenant a Dashboards user acts in, and the user
# impersonated (without it, a rewrite's identity and graph evidence were the
# impersonator's while its searches ran as the user impersonated).
CREDENTIAL_HEADERS = frozenset(
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
    """The credential-bearing headers of one request, as the caller sent them."""

    credentials: tuple[tuple[str, str], ...]

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], settings: Settings) -> Caller:
        found = sorted(
            (name.lower(), value)
            for name, value in headers.items()
            if name.lower() in CREDENTIAL_HEADERS
        )
        if not found and settings.anonymous_uses_service_account:
            authorization = service_authorization(settings)
            if authorization:
                found = [("authorization", authorization)]
        return cls(tuple(found))

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.credentials)

    def fingerprint(self) -> str:
        """A hash of every credential header: the identity where OpenSearch resolves none."""
        raw = json.dumps(self.credentials or "anonymous").encode()
        return hashlib.sha256(raw).hexdigest()[:32]


class IdentityResolver:
    """The identity OpenSearch's security plugin resolves for a caller (user, backend roles,
    mapped roles, tenant), asked with the caller's credentials and kept for a short while.

    Two callers share a rewrite only when OpenSearch sees them as the same user with the
    same roles. Without the security plugin (authinfo 404s) or when it cannot be asked,
    the identity is the hash of the credential headers, which never merges two callers.
    None means OpenSearch refused the credentials (401): such a caller gets no rewrite,
    so it cannot spend kgqr's LLM or graph time.
    """

    def __init__(self, http: httpx.AsyncClient, ttl_s: float = IDENTITY_TTL_S) -> None:
        self._http = http
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[float, str | None]] = {}

    async def identity(self, caller: Caller) -> str | None:
        fingerprint = caller.fingerprint()
        cached = self._known.get(fingerprint)
        now = time.monotonic()
        if cached and cached[0] > now:
            return cached[1]
        resolved = await self._resolve(caller)
        identity = None if resolved == REFUSED else resolved or f"headers:{fingerprint}"
        if len(self._known) >= MAX_IDENTITIES:
            self._known = {k: v for k, v in self._known.items() if v[0] > now}
            if len(self._known) >= MAX_IDENTITIES:
                self._known.clear()
        self._known[fingerprint] = (now + self._ttl_s, identity)
        return identity

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
        digest = hashlib.sha256(json.dumps(who, sort_keys=True).encode()).hexdigest()[:32]
        return f"user:{digest}"
