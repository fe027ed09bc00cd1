"""Local OpenSearch clusters of several nodes on loopback ports, from the same install.

Node 1 answers on the cluster's first HTTP port and is the address clients use (it
coordinates: a search or bulk request sent to it reaches every shard, wherever it lives).
When another node dies, node 1 keeps answering from the remaining copies (replicas are
`0-1` auto-expanded), so clients need not know every node. Losing node 1 itself is what a
load balancer or a multi-host client in front of a real cluster is for (docs/scaling.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAX_NODES = 5


@dataclass(frozen=True)
class ClusterMember:
    """One node of a local cluster: its process name, its ports, its data folder."""

    service: str
    cluster: str
    number: int  # 1-based
    http_ports: tuple[int, ...]
    transport_ports: tuple[int, ...]
    data_dir: Path
    bootstrap: str  # node 1's name: it forms a new cluster alone, the others join it

    @property
    def nodes(self) -> int:
        return len(self.http_ports)

    @property
    def http_port(self) -> int:
        return self.http_ports[self.number - 1]

    def options(self) -> list[str]:
        """The node's `-E` options: a one-node cluster of its own, or a member finding
        the others by their transport ports (node 1 bootstraps a new cluster)."""
        if self.nodes == 1:
            return ["-E", "discovery.type=single-node", "-E", f"cluster.name={self.cluster}"]
        seeds = ",".join(f"127.0.0.1:{port}" for port in self.transport_ports)
        return [
            "-E", f"cluster.name={self.cluster}",
            "-E", f"node.name={self.service}",
            "-E", f"transport.port={self.transport_ports[self.number - 1]}",
            "-E", f"discovery.seed_hosts={seeds}",
            "-E", f"cluster.initial_cluster_manager_nodes={self.bootstrap}",
        ]  # fmt: skip


def members(
    prefix: str,
    cluster: str,
    nodes: int,
    http_port: int,
    extra_http_base: int,
    transport_base: int,
    data_root: Path,
) -> list[ClusterMember]:
    """The nodes of a cluster: node 1 is `prefix` on `http_port` with data in
    `data_root/prefix`; node i is `prefix-i` on `extra_http_base + i`. Transport ports
    are `transport_base + i - 1`."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"a local cluster has 1 to {MAX_NODES} nodes, not {nodes}")
    names = [prefix, *(f"{prefix}-{i}" for i in range(2, nodes + 1))]
    http = (http_port, *(extra_http_base + i for i in range(2, nodes + 1)))
    transport = tuple(transport_base + i for i in range(nodes))
    return [
        ClusterMember(name, cluster, i, http, transport, data_root / name, names[0])
        for i, name in enumerate(names, start=1)
    ]
