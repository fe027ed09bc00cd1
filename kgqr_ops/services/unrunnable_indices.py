"""A local node with a k-NN index it cannot run: naming the index, and the way out.

The engine guard refuses new faiss / nmslib mappings, and fails the shards of any such
index made before it (the node stays up, the index goes red) instead of letting the node
die while it recovers the index, as it otherwise would on every start. `services up` names
those indices when the node stays red. The way out is deleting them: this node can never
serve them (it cannot even close them, as closing replays the documents their translog
holds), and the documents were never searchable here. To keep them, a node with native
k-NN libraries (a full OpenSearch distribution) can open the data folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.opensearch_guard import unrunnable_fields

if TYPE_CHECKING:
    from kgqr_ops.services.opensearch_node import OpenSearchNode

DELETE_COMMAND = "kgqr services delete-unrunnable-indices"


def unrunnable_indices(node: OpenSearchNode) -> dict[str, list[str]]:
    """Each index whose mapping the node cannot run, with the fields at fault."""
    mappings = node.call("GET", "/_mapping?expand_wildcards=all", timeout_s=30) or {}
    settings = node.call("GET", "/_settings?flat_settings=true", timeout_s=30) or {}
    found = {}
    for index, body in mappings.items():
        flat = settings.get(index, {}).get("settings", {})
        knn = str(flat.get("index.knn", "false")).lower() == "true"
        fields = unrunnable_fields(body.get("mappings", {}), knn)
        if fields:
            found[index] = fields
    return found


def red_because_of_unrunnable(node: OpenSearchNode) -> str | None:
    """While the node answers but is red: why, if it is a k-NN index it cannot run."""
    health = node.get("/_cluster/health")
    if not health or health.get("status") != "red":
        return None
    found = unrunnable_indices(node)
    if not found:
        return None
    named = "; ".join(f"{index}: {', '.join(fields)}" for index, fields in found.items())
    return (
        f"is red: these indices map vectors on an engine this node has no native library "
        f"for (the k-NN plugin on Maven Central has none), so their shards cannot open: "
        f"{named}. Way out: `{DELETE_COMMAND}` deletes them (this node can never serve them), "
        'then map vectors with "engine": "lucene".'
    )


def delete_unrunnable(
    node: OpenSearchNode, confirm: Callable[[dict[str, list[str]]], bool]
) -> dict[str, list[str]]:
    """Delete every index the node cannot run, once `confirm` agrees (starting the node if
    needed); the indices deleted."""
    if node.get("/") is None:
        with contextlib.suppress(ServiceError):  # it may stay red: that is why we are here
            node.up()
    if node.get("/") is None:
        raise ServiceError(node.name, "is not running; start it with `kgqr services up`")
    found = unrunnable_indices(node)
    if not found or not confirm(found):
        return {}
    for index in found:
        if node.call("DELETE", f"/{index}", 60) is None:
            raise ServiceError(node.name, f"could not delete index {index}")
    return found
