from __future__ import annotations

import neo4j.exceptions
import opensearchpy.exceptions
import pytest
import redis.exceptions

from ingest.opensearch_writer import TransientBulkError
from ingest.transient_errors import is_transient


@pytest.mark.parametrize(
    "exc",
    [
        opensearchpy.exceptions.ConnectionError("N/A", "refused", None),
        opensearchpy.exceptions.TransportError(429, "too many requests", {}),
        opensearchpy.exceptions.TransportError(503, "unavailable", {}),
        neo4j.exceptions.ServiceUnavailable("down"),
        redis.exceptions.ConnectionError("refused"),
        TransientBulkError("bulk item rejected with 429"),
        ConnectionRefusedError(),
    ],
)
def test_store_outages_and_pushback_are_retried(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        opensearchpy.exceptions.TransportError(400, "mapper_parsing_exception", {}),
        neo4j.exceptions.CypherSyntaxError("bad query"),
        ValueError("bug"),
    ],
)
def test_bugs_and_bad_requests_are_not_retried(exc: BaseException) -> None:
    assert not is_transient(exc)
