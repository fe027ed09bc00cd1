"""How many hits one search of an index may return: its `index.max_result_window`.

A team may lower it (500 is common where deep paging must be refused); kgqr's jobs over an
attached index page with `search_after`, whose pages it bounds too, and their 1,000-hit
pages ended on the engine's 400. The window is read from the engine's own refusal of an
empty search: that needs only the read right a job has anyway, where the index's
settings need a monitor right the ingest account may lack.
"""

from __future__ import annotations

import re
from typing import Any

from opensearchpy.exceptions import RequestError

_WINDOW = re.compile(
    r"Result window is too large, from \+ size must be less than or equal to: \[(\d+)\]"
)


def page_size(client: Any, index: str, wanted: int) -> int:
    """`wanted`, or the index's window where that is smaller."""
    try:
        client.search(index=index, body={"size": wanted, "query": {"match_none": {}}})
    except RequestError as exc:
        window = _WINDOW.search(str(exc.info))
        if window is None:
            raise
        return max(1, min(wanted, int(window.group(1))))
    return wanted
