"""Which headers count as a caller's credentials, the opt-in for anonymous callers, and
what keeps two callers' identities apart (the rewrite cache is keyed by it)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

import httpx
import pytest
from pydantic import SecretStr

from kgqr_core.settings import Settings
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.errors import redact_addresses
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.engine.identities import IdentityResolver, shows_own_text

pytestmark = pytest.mark.unit
SERVICE = Settings.of({"opensearch_user": "kgqr", "opensearch_password": SecretStr("svc")})


def test_every_credential_header_is_kept_and_nothing_else() -> None:
    caller = Caller.from_headers(
        {
            "Authorization": "Basic YTpi",
            "Cookie": "security_authentication=x",
            "X-Proxy-User": "alice",
            "Content-Type": "application/json",
            "X-Opaque-Id": "trace-1",
        },
        SERVICE,
    )
    assert caller.headers == {
        "authorization": "Basic YTpi",
        "cookie": "security_authentication=x",
        "x-proxy-user": "alice",
    }


def test_an_anonymous_caller_gets_no_credentials_unless_opted_in() -> None:
    assert Caller.from_headers({"accept": "*/*"}, SERVICE).headers == {}
    lent = Caller.from_headers({}, SERVICE.replaced({"anonymous_uses_service_account": True}))
    assert lent.headers == {"authorization": "Basic " + base64.b64encode(b"kgqr:svc").decode()}


def test_a_caller_says_whether_it_sent_credentials_of_its_own() -> None:
    """Callers that did not are one to kgqr (no share of the rewrites is kept from them
    for another), however kgqr's account was lent: by kgqr, or by the front before it."""
    lending = SERVICE.replaced({"anonymous_uses_service_account": True})
    kgqrs = "Basic " + base64.b64encode(b"kgqr:svc").decode()
    assert Caller.from_headers({"accept": "*/*"}, SERVICE).anonymous
    assert Caller.from_headers({"cookie": " "}, SERVICE).anonymous
    assert Caller.from_headers({}, lending).anonymous
    lent_by_the_front = Caller.from_headers({"authorization": kgqrs}, lending)
    assert lent_by_the_front.anonymous and lent_by_the_front.headers == {"authorization": kgqrs}
    assert not Caller.from_headers({"authorization": "Basic YTpi"}, lending).anonymous
    assert not Caller.from_headers({"authorization": kgqrs}, SERVICE).anonymous  # not lent


def test_a_fingerprint_is_keyed_so_a_reader_of_redis_cannot_test_passwords_on_it() -> None:
    """Without a key, sha256 of `[["authorization", "Basic ..."]]` (a rewrite-cache key in
    Redis where the engine names no user) lets whoever reads Redis try passwords offline."""
    headers = {"authorization": "Basic YTpi"}
    unkeyed = hashlib.sha256(json.dumps([["authorization", "Basic YTpi"]]).encode())
    keyed = Caller.from_headers(headers, SERVICE).fingerprint()
    assert keyed != unkeyed.hexdigest()[:32]
    # Processes of one deployment agree (the key derives from kgqr's password)...
    assert Caller.from_headers(headers, SERVICE).fingerprint() == keyed
    other_password = Settings.of({"opensearch_user": "kgqr", "opensearch_password": SecretStr("x")})
    assert Caller.from_headers(headers, other_password).fingerprint() != keyed
    # ...or a key of its own, which wins.
    own_key = SERVICE.replaced({"proxy_identity_key": SecretStr("k")})
    assert Caller.from_headers(headers, own_key).fingerprint() not in (keyed, "anonymous")
    # Nobody's credentials in it: the same in every process, key or none.
    assert Caller.from_headers({}, own_key).fingerprint() == "anonymous"
    assert Caller.from_headers({}, Settings.of({})).fingerprint() == "anonymous"


def test_fingerprints_differ_for_any_credential_header() -> None:
    prints = {
        Caller.from_headers(headers, SERVICE).fingerprint()
        for headers in (
            {},
            {"authorization": "Basic YTpi"},
            {"authorization": "Basic YzpK"},
            {"cookie": "s=1"},
            {"cookie": "s=2"},
            {"x-ssl-client-cert": "CN=a"},
            {"authorization": "Basic YTpi", "securitytenant": "global"},
        )
    }
    assert len(prints) == 7


def _resolver(answers: dict[str, httpx.Response]) -> tuple[IdentityResolver, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        who = request.headers.get("authorization", "")
        asked.append(who)
        return answers.get(who, httpx.Response(401))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://os")

    class Sessions:
        def as_caller(self, caller: Caller, headers: object = None) -> EngineSession:
            return EngineSession(client, caller.headers)

    return IdentityResolver(Sessions()), asked


def test_identity_is_the_user_and_roles_opensearch_resolves() -> None:
    def info(user: str, roles: list[str]) -> httpx.Response:
        return httpx.Response(200, json={"user_name": user, "roles": roles, "backend_roles": []})

    resolver, asked = _resolver(
        {
            "Basic a1": info("alice", ["reader"]),
            "Basic a2": info("alice", ["reader"]),  # a second credential of the same user
            "Basic b": info("bob", ["reader"]),
            "Basic c": info("alice", ["reader", "admin"]),
        }
    )

    async def identities() -> list[str | None]:
        return [
            await resolver.identity(Caller.from_headers({"authorization": a}, SERVICE))
            for a in ("Basic a1", "Basic a2", "Basic b", "Basic c", "Basic a1", "Basic zzz")
        ]

    a1, a2, b, c, a1_again, refused = asyncio.run(identities())
    assert a1 == a2 == a1_again
    assert len({a1, b, c}) == 3
    assert refused is None  # 401: no rewrite for credentials OpenSearch refuses
    assert asked.count("Basic a1") == 1  # kept for a while, not asked on every search


def test_without_the_security_plugin_the_identity_is_the_credential_hash() -> None:
    resolver, _ = _resolver(
        {"Basic a": httpx.Response(404, json={}), "Basic b": httpx.Response(404, json={})}
    )

    async def both() -> tuple[str | None, str | None]:
        a = await resolver.identity(Caller.from_headers({"authorization": "Basic a"}, SERVICE))
        b = await resolver.identity(Caller.from_headers({"authorization": "Basic b"}, SERVICE))
        return a, b

    a, b = asyncio.run(both())
    assert a and b and a != b and a.startswith("headers:")


@pytest.mark.parametrize("status", [500, 503, 429, 403])
def test_when_the_engine_cannot_say_who_a_caller_is_no_two_callers_share_an_identity(
    status: int,
) -> None:
    """A token in a header of its own is no usual credential header: with authinfo
    failing, every such caller hashed as "anonymous" and was served the others' rewrites."""
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(status)), base_url="http://os"
    )

    class Sessions:
        def as_caller(self, caller: Caller, headers: object = None) -> EngineSession:
            return EngineSession(client, caller.headers)

    resolver = IdentityResolver(Sessions())

    async def identities() -> list[str | None]:
        return [
            await resolver.identity(Caller.from_headers({"x-team-token": token}, SERVICE))
            for token in ("alice's", "bob's")
        ]

    alice, bob = asyncio.run(identities())
    assert alice and bob and alice != bob


def test_a_search_the_engine_refuses_is_known_per_caller_and_index_for_a_while() -> None:
    resolver, asked = _resolver(
        {
            "Basic reader": httpx.Response(200, json={"hits": {"hits": []}}),
            "Basic outsider": httpx.Response(403, json={}),
            "Basic busy": httpx.Response(429, json={}),  # says nothing of permission
            "Basic early": httpx.Response(404, json={}),  # the KB is not ingested yet
        }
    )

    async def refusals() -> list[int | None]:
        return [
            await resolver.search_refused(Caller.from_headers({"authorization": a}, SERVICE), i)
            for a, i in (("Basic reader", "kb"), ("Basic outsider", "kb"), ("Basic busy", "kb"),
                         ("Basic reader", "kb"), ("Basic reader", "other"),
                         ("Basic early", "kb"), ("Basic early", "kb"))
        ]  # fmt: skip

    assert asyncio.run(refusals()) == [None, 403, None, None, None, 404, 404]
    assert asked.count("Basic reader") == 2  # once per index, then remembered
    assert asked.count("Basic early") == 2  # a missing index is asked about again


def test_whether_a_caller_reads_kgqrs_id_doc_values_as_ids_is_checked_and_kept() -> None:
    """A role that masks `id` reads hashes from its doc values, and one that hides it reads
    nothing: both get `_id` from the engine instead. An index the caller sees nothing of,
    or an error, says nothing, and is asked again."""

    def hit(doc_id: str, values: list[str] | None) -> httpx.Response:
        found = {"_id": doc_id, **({"fields": {"id": values}} if values is not None else {})}
        found["_source"] = {"title": "Heat", "body": "A film.", "text": "Heat\nA film."}
        return httpx.Response(200, json={"hits": {"hits": [found]}})

    resolver, asked = _resolver(
        {
            "Basic reader": hit("m1", ["m1"]),
            "Basic masked": hit("m1", ["9f86d081884c7d65"]),
            "Basic hidden": hit("m1", None),
            "Basic empty": httpx.Response(200, json={"hits": {"hits": []}}),
            "Basic busy": httpx.Response(429, json={}),
        }
    )

    async def reads() -> list[bool]:
        return [
            (await resolver.own_documents_as_read(
                Caller.from_headers({"authorization": a}, SERVICE), "kb")).ids
            for a in ("Basic reader", "Basic masked", "Basic hidden", "Basic empty", "Basic busy",
                      "Basic reader", "Basic masked", "Basic empty", "Basic busy")
        ]  # fmt: skip

    assert asyncio.run(reads()) == [True, False, False, False, False, True, False, False, False]
    assert asked.count("Basic reader") == asked.count("Basic masked") == 1  # then remembered
    assert asked.count("Basic empty") == asked.count("Basic busy") == 2


@pytest.mark.parametrize(
    ("shown", "sees"),
    [
        ({"title": "Heat", "body": "A film.", "text": "Heat\nA film."}, True),
        ({"title": "", "body": " A film. ", "text": "A film."}, True),
        ({"body": "A film.", "text": "Heat\nA film."}, True),  # the title hidden: in text
        ({"title": "Heat", "text": "Heat\nA film."}, False),  # the body hidden
        ({"title": "Heat", "body": "A film."}, False),  # the text hidden: unverifiable
        ({"title": "Heat", "body": "9f86d081", "text": "2c26b46b"}, False),  # both masked
        ({"title": "Heat", "body": "A film.", "text": "2c26b46b"}, False),  # text masked
        ({"title": "9f86d081", "body": "A film.", "text": "2c26b46b"}, False),
    ],
)
def test_a_caller_sees_kgqrs_text_only_where_its_parts_agree(
    shown: dict[str, str], sees: bool
) -> None:
    """Triples and entities state what a passage's text says: a role hiding or masking it
    must not read them. kgqr keeps nothing to compare with: a document's `text` is its
    title and body together, so where the fetch shows them agreeing, none was changed."""
    assert shows_own_text(shown) is sees


@pytest.mark.parametrize(
    "text",
    [
        "Client error '403 Forbidden' for url 'http://10.1.2.3:9200/kgqr-x/_search'",
        "Cannot connect to host opensearch.internal:9200 ssl:default",
        "Couldn't connect to [::1]:7687",
        "ConnectError: https://search.example.com/_search failed",
    ],
)
def test_addresses_are_redacted_from_client_visible_reasons(text: str) -> None:
    redacted = redact_addresses(text)
    for secret in ("10.1.2.3", "opensearch.internal", "::1", "search.example.com", "9200"):
        assert secret not in redacted
    assert "<address>" in redacted


def test_identity_is_resolved_with_every_header_the_engine_sees() -> None:
    """A JWT in a header of the operator's naming, proxy auth's attributes and a trusted
    X-Forwarded-For decide who a request runs as: each is sent and counted; the body's
    framing and tracing ids are not (a new trace id would cost an identity lookup)."""
    caller = Caller.from_headers(
        {
            "X-Kgqr-Jwt": "eyJ.a.b",
            "X-Proxy-Ext-Dept": "sales",
            "X-Forwarded-For": "10.0.0.7",
            "Content-Type": "application/json",
            "Traceparent": "00-1-2-01",
            "X-Opaque-Id": "trace-1",
            "User-Agent": "opensearch-py",
        },
        SERVICE,
    )
    assert caller.headers == {
        "x-kgqr-jwt": "eyJ.a.b",
        "x-proxy-ext-dept": "sales",
        "x-forwarded-for": "10.0.0.7",
    }
    other_token = Caller.from_headers({"X-Kgqr-Jwt": "eyJ.c.d"}, SERVICE)
    assert other_token.fingerprint() != caller.fingerprint()
    traced = Caller.from_headers({"X-Kgqr-Jwt": "eyJ.c.d", "Traceparent": "00-9-9-01"}, SERVICE)
    assert traced.fingerprint() == other_token.fingerprint()


def test_a_custom_token_header_is_not_anonymous_to_the_service_account_opt_in() -> None:
    lending = SERVICE.replaced({"anonymous_uses_service_account": True})
    assert "authorization" not in Caller.from_headers({"cookie": "s=1"}, lending).headers
    lent = Caller.from_headers({"x-forwarded-for": "10.0.0.7"}, lending).headers
    assert lent["x-forwarded-for"] == "10.0.0.7" and lent["authorization"].startswith("Basic ")
    # An empty credential header says nothing, and the nginx front cannot tell it from none:
    # both lend alike (kgqr kept it as credentials, the front lent the account).
    assert (
        Caller.from_headers({"cookie": " "}, lending).headers["authorization"].startswith("Basic ")
    )


def test_two_tokens_of_one_user_with_attributes_are_two_identities() -> None:
    """DLS may read a JWT's claims (`${attr.jwt.dept}`), which authinfo names but does
    not show: one user's two tokens must not share rewrites, a user without attributes
    keeps one identity across credentials."""

    def info(attributes: list[str]) -> httpx.Response:
        return httpx.Response(
            200, json={"user_name": "ann", "roles": ["r"], "custom_attribute_names": attributes}
        )

    resolver, _ = _resolver(
        {
            "Bearer sales": info(["attr.jwt.dept"]),
            "Bearer hr": info(["attr.jwt.dept"]),
            "Basic one": info([]),
            "Basic two": info([]),
        }
    )

    async def identities() -> list[str | None]:
        return [
            await resolver.identity(Caller.from_headers({"authorization": a}, SERVICE))
            for a in ("Bearer sales", "Bearer hr", "Basic one", "Basic two")
        ]

    sales, hr, one, two = asyncio.run(identities())
    assert sales != hr
    assert one == two


def test_without_the_security_plugin_a_callers_address_does_not_split_their_identity() -> None:
    """Every caller sees the same documents there: keyed by X-Forwarded-For (which kgqr
    now always writes), rewrites warmed from one address served no other."""
    resolver, _ = _resolver({"Basic a": httpx.Response(404, json={})})

    async def identities() -> list[str | None]:
        return [
            await resolver.identity(
                Caller.from_headers({"authorization": "Basic a", "x-forwarded-for": ip}, SERVICE)
            )
            for ip in ("10.0.0.1", "10.0.0.2")
        ]

    first, second = asyncio.run(identities())
    assert first == second and first is not None and first.startswith("headers:")
    traced = Caller.from_headers({"authorization": "Basic a", "x-datadog-trace-id": "1"}, SERVICE)
    assert traced.headers == {"authorization": "Basic a"}


def test_a_gateways_own_credential_header_keeps_callers_apart_without_security() -> None:
    """A gateway in front of OpenSearch that authorises by `x-api-key`: without the
    security plugin, two keys were one caller to the rewrite cache unless named."""
    keys = ("k-sales", "k-hr")

    def identities(settings: Settings) -> list[str | None]:
        resolver, _ = _resolver({"": httpx.Response(404, json={})})

        async def each() -> list[str | None]:
            return [
                await resolver.identity(Caller.from_headers({"x-api-key": key}, settings))
                for key in keys
            ]

        return asyncio.run(each())

    assert len(set(identities(SERVICE))) == 1  # what an unnamed gateway header gives
    named = SERVICE.replaced({"proxy_credential_headers": "X-Api-Key, x-tenant-token"})
    sales, hr = identities(named)
    assert sales != hr and sales is not None and sales.startswith("headers:")
    lending = named.replaced({"anonymous_uses_service_account": True})
    assert not Caller.from_headers({"x-api-key": "k-sales"}, lending).anonymous
    assert "authorization" not in Caller.from_headers({"x-api-key": "k"}, lending).headers


def test_a_credential_header_must_be_a_header_name() -> None:
    for bad in ("bad header", "x$y", "x.y", "x_y"):  # nginx would misread or drop them
        with pytest.raises(ValueError, match="not a header name"):
            Settings.of({"proxy_credential_headers": f"x-api-key, {bad}"})


def test_a_flood_of_new_callers_does_not_evict_every_known_one() -> None:
    """One caller sending junk headers makes a new fingerprint per request: the identity
    memory once cleared itself when full, and every other caller's lookups with it."""
    from query_rewriter.engine import identities

    resolver, asked = _resolver(
        {"Basic known": httpx.Response(200, json={"user_name": "k", "roles": []})}
    )

    async def flood() -> None:
        known = Caller.from_headers({"authorization": "Basic known"}, SERVICE)
        for n in range(identities.MAX_IDENTITIES - 1):
            await resolver.identity(Caller.from_headers({"x-junk": str(n)}, SERVICE))
        await resolver.identity(known)  # the last one in before the memory is full
        await resolver.identity(Caller.from_headers({"x-junk": "one more"}, SERVICE))
        await resolver.identity(known)

    asyncio.run(flood())
    assert asked.count("Basic known") == 1

    async def long_flood() -> None:  # a searching caller outlives a flood of any length
        known = Caller.from_headers({"authorization": "Basic known"}, SERVICE)
        await resolver.identity(known)
        for n in range(2 * identities.MAX_IDENTITIES):
            await resolver.identity(Caller.from_headers({"x-junk": f"again {n}"}, SERVICE))
            if n % 1_000 == 0:
                await resolver.identity(known)

    asyncio.run(long_flood())
    assert asked.count("Basic known") == 1
