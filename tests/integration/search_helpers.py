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


def metric_sample(name: str, **labels: str) -> float:
    """A proxy metric's current value in this process (the proxies tests run are threads
    of it, so they share the registry): compare before and after, never absolute."""
    from query_rewriter.metrics import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0
