"""What OpenSearch says of a caller, asked with the caller's own credentials: the identity
it resolves (what the rewrite cache is keyed by), and whether it would run their search of
an index at all."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from kgqr_core.settings import Settings
from plugin.field_map import OWN_ID_FIELD
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.gateway import EngineSession

AUTHINFO_PATH = "/_plugins/_security/authinfo"
IDENTITY_TTL_S = 30.0
MAX_IDENTITIES = 10_000
REFUSED = "refused"
NO_SECURITY = "no-security"  # authinfo 404s: the engine runs without the security plugin


# kgqr's own documents keep their title, their body and the two as one text.
OWN_TEXT_PARTS = ("title", "body", "text")


@dataclass(frozen=True)
class OwnDocumentsAsRead:
    """What a caller's fetch shows of kgqr's own documents. `ids`: the `id` doc values are
    their ids (a role may mask them, hashes, or hide them, nothing; the graph strategies
    then find no seed by them). `text`: the text their graph's facts were read from, as
    it was written (the triples and entities an LLM or OpenIE read in a passage state
    what it says: a role that hides or masks it must not read them in a rewrite)."""

    ids: bool
    text: bool


def shows_own_text(source: dict[str, Any]) -> bool:
    """Whether a fetch of one of kgqr's documents shows its title and body unchanged. Its
    `text` is written as title and body together: where the fetch shows it and the body
    as the one then holds the other, neither was hidden nor masked (a hash of each would
    not), without kgqr keeping anything to compare with. A hidden title is in `text` all
    the same."""
    title, body, text = (source.get(part) for part in OWN_TEXT_PARTS)
    if not isinstance(body, str) or not isinstance(text, str):
        return False
    if isinstance(title, str):
        return text == f"{title}\n{body}".strip()
    return text == body.strip() or text.endswith("\n" + body.rstrip())


class CallerSessions(Protocol):
    """What the resolver asks through (gateway.Engine): requests as one caller."""

    def as_caller(
        self, caller: Caller, headers: Mapping[str, str] | None = None
    ) -> EngineSession: ...


class IdentityResolver:
    """What OpenSearch's security plugin says of a caller, asked with the caller's
    credentials and kept for a short while: the identity it resolves (user, backend roles,
    mapped roles, tenant), and whether it lets the caller search an index.

    Two callers share a rewrite only when OpenSearch sees them as the same user with the
    same roles. Without the security plugin (authinfo 404s) the identity is the hash of the
    usual credential headers; when it cannot be asked, the hash of every header that may
    say who the caller is. Neither merges two callers.
    None means OpenSearch refused the credentials (401): such a caller gets no rewrite,
    so it cannot spend kgqr's LLM or graph time.
    """

    def __init__(self, engine: CallerSessions, ttl_s: float = IDENTITY_TTL_S) -> None:
        self._engine = engine
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[float, Any]] = {}

    async def identity(self, caller: Caller) -> str | None:
        fingerprint = caller.fingerprint()

        async def resolved() -> str | None:
            found = await self._resolve(caller)
            if found == REFUSED:
                return None
            if found == NO_SECURITY:
                return f"headers:{caller.credential_fingerprint()}"
            # Not told (a timeout, a 5xx, an answer without a user): every header that may
            # say who the caller is. The usual credential headers alone made every caller
            # whose token is in a header of its own one "anonymous" caller, sharing rewrites.
            return found or f"caller:{caller.fingerprint()}"

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
        status = await self._search_status(caller, index)
        return status if status in (401, 403, 404) else None

    async def may_search(self, caller: Caller, index: str) -> bool:
        """Whether the engine runs the caller's searches of `index`: only its yes is one
        (what kgqr read of its own index for them is shown on that alone)."""
        return await self._search_status(caller, index) == 200

    async def _search_status(self, caller: Caller, index: str) -> int | None:
        """The status of an empty search of `index` as the caller, kept a while; None when
        the engine could not be asked."""

        async def probed() -> int | None:
            try:
                response = await self._engine.as_caller(caller).send(
                    "POST",
                    f"/{index}/_search",
                    json={"size": 0, "track_total_hits": False, "query": {"match_none": {}}},
                )
            except httpx.HTTPError:
                return None
            return response.status_code

        # A missing index is asked about again: one made a moment later is rewritten at
        # once. An answer that says nothing of the caller (an overloaded engine) is kept
        # like the others: asked again on every search, it doubled the engine's load when
        # it could least take it (may_search reads it as a no).
        status: int | None = await self._remembered(
            f"{caller.fingerprint()} {index}", probed, keep=lambda status: status != 404
        )
        return status

    async def own_documents_as_read(self, caller: Caller, index: str) -> OwnDocumentsAsRead:
        """How the caller's fetch shows kgqr's own documents, checked on one document and
        kept a while (field-level security and masking are a role's, the same for every
        document it reads). An index with nothing the caller may read, or an answer that
        is not one, shows nothing, and is asked about again."""
        probe = {"size": 1, "_source": list(OWN_TEXT_PARTS), "docvalue_fields": [OWN_ID_FIELD],
                 "query": {"match_all": {}}}  # fmt: skip

        async def probed() -> OwnDocumentsAsRead | None:
            try:
                response = await self._engine.as_caller(caller).send(
                    "POST", f"/{index}/_search", json=probe
                )
                if response.status_code != 200:
                    return None
                hits = response.json()["hits"]["hits"]
                if not hits:
                    return None
                first = hits[0]
                ids = (first.get("fields") or {}).get(OWN_ID_FIELD) == [first["_id"]]
                return OwnDocumentsAsRead(ids, shows_own_text(first.get("_source") or {}))
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
                return None

        read: OwnDocumentsAsRead | None = await self._remembered(
            f"own {caller.fingerprint()} {index}", probed, keep=lambda found: found is not None
        )
        return read or OwnDocumentsAsRead(ids=False, text=False)

    async def _remembered(
        self,
        key: str,
        ask: Callable[[], Awaitable[Any]],
        keep: Callable[[Any], bool] = lambda _: True,
    ) -> Any:
        cached = self._known.get(key)
        now = time.monotonic()
        if cached and cached[0] > now:
            # Last in line again: a caller that keeps searching is the last evicted, behind
            # any flood of fingerprints seen once (junk headers, a new one per request).
            self._known[key] = self._known.pop(key)
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
            response = await self._engine.as_caller(caller).send("GET", AUTHINFO_PATH)
            if response.status_code == 401:
                return REFUSED
            if response.status_code == 404:
                return NO_SECURITY
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
