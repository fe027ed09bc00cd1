"""Bulk requests the engine will take, so one large record costs itself and not its chunk.

A chunk's documents went to OpenSearch as one bulk request. One 60 MB document (its text
is indexed twice, as `text` and `body`) made that request larger than the engine's
`http.max_content_length` (100 MB by default, 10 MB on small managed clusters): the engine
answered 413 for the whole request and the chunk failed with every good record in it.
Requests are now cut by size, and one the engine still refuses as too large is halved
until the record that is too large on its own is found; that record alone gets a 413 item
result, which the writers set aside like any other refused record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

# The smallest limit common clusters set (managed small instances); 256 ordinary records
# with their vectors take 3-5 MB, so a normal chunk still goes as one request.
BULK_MAX_BYTES = 10 * 1024 * 1024
TOO_LARGE = 413


Operation = tuple[dict[str, Any], dict[str, Any] | None]  # (action, source; None: a delete)


def bulk_results(
    client: Any, operations: Sequence[Operation], max_bytes: int = BULK_MAX_BYTES
) -> list[dict[str, Any]]:
    """Each (action, source) operation's result in order, as the engine's bulk answer has
    it (`status`, and `error` when refused); an operation too large to send even alone
    gets status 413 and an error saying so."""
    return [result for _, result in bulk_items(client, operations, max_bytes)]


def bulk_items(
    client: Any,
    operations: Sequence[Operation],
    max_bytes: int = BULK_MAX_BYTES,
    timeout: int | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Each operation's (verb, result) in order, sent as bulk_results sends them: the
    graph copy's versioned writes and deletes read a 404 as "gone already" for a delete
    only, and went as one request of up to 2,000 node documents, which a 10 MB
    `http.max_content_length` refused for the whole chunk, on every re-run."""
    lines = [
        json.dumps(action).encode() + b"\n"
        + (json.dumps(source).encode() + b"\n" if source is not None else b"")
        for action, source in operations
    ]  # fmt: skip
    items: list[tuple[str, dict[str, Any]]] = []
    for part in _parts(lines, max_bytes):
        items += _send(client, part, timeout)
    return items


def _parts(lines: list[bytes], max_bytes: int) -> Iterator[list[bytes]]:
    part: list[bytes] = []
    size = 0
    for line in lines:
        if part and size + len(line) > max_bytes:
            yield part
            part, size = [], 0
        part.append(line)
        size += len(line)
    if part:
        yield part


def _send(client: Any, lines: list[bytes], timeout: int | None) -> list[tuple[str, dict[str, Any]]]:
    from opensearchpy.exceptions import TransportError

    try:
        sent = {"timeout": timeout} if timeout is not None else {}
        response = client.bulk(body=b"".join(lines), **sent)
    except TransportError as exc:
        if exc.status_code != TOO_LARGE:
            raise
        if len(lines) > 1:
            half = len(lines) // 2
            return _send(client, lines[:half], timeout) + _send(client, lines[half:], timeout)
        megabytes = len(lines[0]) / 1e6
        reason = (
            f"{megabytes:.1f} MB as indexed is more than the engine accepts in one request "
            "(http.max_content_length): shorten the record, or raise that limit"
        )
        verb = next(iter(json.loads(lines[0].split(b"\n", 1)[0])))
        return [(verb, {"status": TOO_LARGE, "error": {"type": "too_large", "reason": reason}})]
    return [next(iter(item.items())) for item in response["items"]]
