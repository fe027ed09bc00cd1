"""The header line of one `_msearch` item, checked before kgqr builds a request from it.

kgqr sends an item it does not rewrite as its own `_search`, so the header's `index` ends
up in a URL path and its other keys in the query string. Unchecked, `{"index":
"victim/_delete_by_query#"}` became `POST /victim/_delete_by_query`. Only the keys
OpenSearch itself accepts in a header pass, index names are checked one by one (a list is
legal and becomes a comma-joined path), and values are written the way OpenSearch
parses them (`true`, not Python's `True`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from query_rewriter.engine.errors import RewriteRequestError

# What OpenSearch's MultiSearchRequest reads from a header line.
HEADER_KEYS = frozenset(
    {
        "index",
        "indices",
        "search_type",
        "preference",
        "routing",
        "request_cache",
        "allow_no_indices",
        "expand_wildcards",
        "ignore_unavailable",
        "ignore_throttled",
        "allow_partial_search_results",
        "ccs_minimize_roundtrips",
        "cancel_after_time_interval",
        "phase_took",
    }
)
# An index name, alias or pattern as a search may name it: OpenSearch's forbidden
# characters out (\ / ? " < > | space , #), wildcards and a leading "-" (exclusion) and a
# "cluster:" prefix in.
INDEX_NAME = re.compile(r'^[^\\/?"<>| ,#\x00-\x1f]+\Z')


@dataclass(frozen=True)
class MsearchHeader:
    """A checked header: the indices as a URL path segment (None: all) and the rest as
    query parameters."""

    indices: list[str] | None
    params: dict[str, str]

    @property
    def path(self) -> str:
        if not self.indices:
            return "/_search"
        return "/" + quote(",".join(self.indices), safe=",*:-_.+") + "/_search"

    @property
    def single_index(self) -> str | None:
        return self.indices[0] if self.indices and len(self.indices) == 1 else None


def _bad(reason: str) -> RewriteRequestError:
    return RewriteRequestError(400, "illegal_argument_exception", reason)


def _index_names(value: Any, line: int) -> list[str]:
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise _bad(f"msearch line {line}: [index] must be a string or a list of strings")
    for name in names:
        if not isinstance(name, str) or not INDEX_NAME.match(name) or name in (".", ".."):
            raise _bad(f"msearch line {line}: invalid index name [{name}]")
    return list(names)


def _param_value(value: Any, key: str, line: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise _bad(f"msearch line {line}: [{key}] has a value of an unsupported type")


def check_header(header: dict[str, Any], path_index: str | None, line: int) -> MsearchHeader:
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise _bad(f"msearch line {line}: key [{unknown[0]}] is not supported in the metadata")
    named = header.get("index", header.get("indices"))
    if named is not None:
        indices: list[str] | None = _index_names(named, line)
    elif path_index is not None:
        indices = _index_names(path_index, line)
    else:
        indices = None
    params = {
        key: _param_value(value, key, line)
        for key, value in header.items()
        if key not in ("index", "indices")
    }
    return MsearchHeader(indices, params)
