"""The engine's refusal of a search deeper than an index's `index.max_result_window`.

A team may lower the window (500 is common where deep paging must be refused); every
search kgqr makes of such an index, ingest's pages and the proxy's ids lookups alike, must
then ask within it. The engine's 400 names the window, and reading it there needs no
right to the index's settings.
"""

from __future__ import annotations

import re

_REFUSED = re.compile(
    r"Result window is too large, from \+ size must be less than or equal to: \[(\d+)\]"
)


def window_in(message: str) -> int | None:
    """The window an engine error names, if it is the window's refusal."""
    found = _REFUSED.search(message)
    return int(found.group(1)) if found else None
