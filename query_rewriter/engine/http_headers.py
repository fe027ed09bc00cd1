"""Headers that belong to one HTTP connection, not to the request: never copied onward,
and never part of who a caller is (RFC 9110 7.6.1)."""

from __future__ import annotations

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
     "upgrade"}
)  # fmt: skip
