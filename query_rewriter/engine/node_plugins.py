"""What the engine's nodes have installed, read with kgqr's own account."""

from __future__ import annotations

import logging
from typing import Any

import httpx

log = logging.getLogger(__name__)

NEURAL_SEARCH = "opensearch-neural-search"


async def has_neural_search(http: httpx.AsyncClient) -> bool:
    """Whether every node has neural search (its hybrid query and normalization pipeline).
    Unknown counts as yes: the common case, and a failing hybrid search falls back anyway."""
    nodes = await _nodes_plugins(http)
    if nodes is None:
        return True
    return all(
        any(plugin.get("name") == NEURAL_SEARCH for plugin in node.get("plugins", []))
        for node in nodes.values()
    )


async def _nodes_plugins(http: httpx.AsyncClient) -> dict[str, Any] | None:
    """Each node's plugins, from `_nodes/plugins`: kgqr's account may read the nodes, and
    not `_cat/plugins`, which also needs the cluster state (every team's mappings)."""
    try:
        answer = await http.get("/_nodes/plugins", params={"filter_path": "nodes.*.plugins.name"})
        nodes = answer.json().get("nodes") if answer.status_code == 200 else None
        error = answer.text[:300]
    except (httpx.HTTPError, ValueError) as exc:
        nodes, error = None, str(exc)
    if isinstance(nodes, dict) and nodes:
        return nodes
    log.warning(
        "the nodes' plugins were not read; assuming neural search",
        extra={"kgqr": {"error": error}},
    )
    return None
