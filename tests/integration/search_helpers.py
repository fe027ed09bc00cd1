"""One search through a kgqr proxy with an explicit strategy and the explanation on."""

from __future__ import annotations

import httpx


def explained_search(
    url: str, index: str, strategy: str, text: str, size: int = 3
) -> httpx.Response:
    return httpx.post(
        f"{url}/{index}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json={"query": {"match": {"text": text}}, "size": size},
        timeout=600,
    )
