"""What the engine's nodes have installed, read with kgqr's own account."""

from __future__ import annotations

import logging

import httpx

log = logging.getLogger(__name__)

NEURAL_SEARCH = "opensearch-neural-search"


async def has_neural_search(http: httpx.AsyncClient) -> bool:
    """Whether every node has neural search (its hybrid query and normalization pipeline).
    Unknown counts as yes: the common case, and a failing hybrid search falls back anyway."""
    plugins = await nodes_plugins(http)
    if plugins is None:
        return True
    return all(NEURAL_SEARCH in names for names in plugins.values())


async def nodes_plugins(http: httpx.AsyncClient) -> dict[str, set[str]] | None:
    """Each node's plugins by name, from `_nodes/plugins` (kgqr's account may read the
    nodes, and not `_cat/plugins`, which also needs the cluster state: every team's
    mappings); None when they could not be read (logged)."""
    try:
        answer = await http.get(
            "/_nodes/plugins",
            # The node's name too: a node with no plugin would be left out of the answer.
            params={"filter_path": "nodes.*.name,nodes.*.plugins.name"},
        )
        payload = answer.json() if answer.status_code == 200 else None
        error = answer.text[:300]
    except (httpx.HTTPError, ValueError) as exc:
        payload, error = None, str(exc)
    nodes = payload.get("nodes") if isinstance(payload, dict) else None
    if isinstance(nodes, dict) and nodes:
        return {
            node_id: {plugin.get("name") for plugin in (node or {}).get("plugins") or []}
            for node_id, node in nodes.items()
        }
    log.warning(
        "the nodes' plugins were not read; assuming neural search",
        extra={"kgqr": {"error": error}},
    )
    return None
