"""One search through a kgqr proxy with an explicit strategy and the explanation on."""

from __future__ import annotations

from typing import Any

import httpx


def explained_search(
    url: str,
    index: str,
    strategy: str,
    text: str,
    size: int = 3,
    params: dict[str, float] | None = None,
) -> httpx.Response:
    body: dict[str, Any] = {"query": {"match": {"text": text}}, "size": size}
    if params:
        body["ext"] = {"kgqr": {"params": params}}
    return httpx.post(
        f"{url}/{index}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json=body,
        timeout=600,
    )
