"""A throwaway multi-node OpenSearch cluster on ports and data folders of its own, for the
node-loss tests and the soak benchmark: formed afresh, removed afterwards, never the
cluster `kgqr services up` runs."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kgqr_core.settings import Settings
from kgqr_ops.services.opensearch_cluster import members
from kgqr_ops.services.opensearch_node import OpenSearchNode


@contextmanager
def scratch_cluster(
    settings: Settings, name: str, nodes: int, http_port: int, extra_http_base: int,
    transport_base: int, heap_mb: int = 512,
) -> Iterator[list[OpenSearchNode]]:  # fmt: skip
    """`nodes` nodes, node 1 on `http_port`; node 1 forms the cluster and the others join
    it in parallel."""
    small = settings.replaced({"opensearch_heap_mb": heap_mb})
    cluster = members(name, f"kgqr-{name}", nodes, http_port, extra_http_base, transport_base,
                      OpenSearchNode.data_root(settings))  # fmt: skip
    started = [OpenSearchNode(small, member) for member in cluster]
    for node in started:
        node.down()
        shutil.rmtree(node.data_dir, ignore_errors=True)
    started[0].up()
    joining = [threading.Thread(target=node.up) for node in started[1:]]
    for thread in joining:
        thread.start()
    for thread in joining:
        thread.join(timeout=300)
    try:
        yield started
    finally:
        for node in reversed(started):
            node.down()
            shutil.rmtree(node.data_dir, ignore_errors=True)


def kill(node: OpenSearchNode) -> None:
    """SIGKILL to the node's process group: the JVM, not only its launcher."""
    pid = node.process.pid()
    if pid is None:
        raise RuntimeError(f"{node.name} is not running")
    os.killpg(pid, signal.SIGKILL)
