"""How many hits one search of an index may return (kgqr_core/result_window.py): ingest's
jobs over an attached index page with `search_after`, whose pages the window bounds too,
and their 1,000-hit pages ended on the engine's 400. The window is read from the engine's
refusal of an empty search.
"""

from __future__ import annotations

from typing import Any

from opensearchpy.exceptions import RequestError

from kgqr_core.result_window import window_in


def page_size(client: Any, index: str, wanted: int) -> int:
    """`wanted`, or the index's window where that is smaller."""
    try:
        client.search(index=index, body={"size": wanted, "query": {"match_none": {}}})
    except RequestError as exc:
        window = window_in(str(exc.info))
        if window is None:
            raise
        return max(1, min(wanted, window))
    return wanted
