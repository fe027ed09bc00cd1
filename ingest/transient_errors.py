"""Which failures are worth retrying: the store or the LLM is down, busy, or pushing back."""

from __future__ import annotations

from ingest.opensearch_writer import TransientBulkError

RETRY_STATUSES = {429, 502, 503, 504}


def _broker_down() -> tuple[type[BaseException], ...]:
    import kombu.exceptions
    import redis.exceptions

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
            kombu.exceptions.OperationalError)  # fmt: skip


# What Redis as broker and job store raises while it restarts: waited out, not raised;
# BROKER_ERRORS with the socket's own errors, which a restart raises too.
BROKER_DOWN = _broker_down()
BROKER_ERRORS: tuple[type[BaseException], ...] = (*BROKER_DOWN, OSError)


def is_transient(exc: BaseException) -> bool:
    import neo4j.exceptions as neo4j_errors
    import openai
    import opensearchpy.exceptions as os_errors
    import redis.exceptions as redis_errors

    if isinstance(exc, TransientBulkError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, os_errors.ConnectionError):  # includes ConnectionTimeout
        return True
    if isinstance(exc, os_errors.TransportError):
        return exc.status_code in RETRY_STATUSES
    if isinstance(
        exc,
        neo4j_errors.ServiceUnavailable | neo4j_errors.SessionExpired | neo4j_errors.TransientError,
    ):
        return True
    if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
        return True
    return isinstance(
        exc,
        openai.APIConnectionError | openai.RateLimitError | openai.InternalServerError,
    )
