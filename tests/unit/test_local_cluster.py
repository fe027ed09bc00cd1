"""`kgqr services up --nodes N`: the nodes a cluster is made of, their ports, and the
options that make them one cluster (no process is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgqr_core.settings import Settings
from kgqr_ops.services.opensearch_cluster import members
from kgqr_ops.services.opensearch_node import OpenSearchNode
from kgqr_ops.services.registry import local_services, remembered_nodes


def test_three_nodes_share_seeds_and_node_one_bootstraps(tmp_path: Path) -> None:
    nodes = members("faults", "kgqr-faults", 3, 9271, 9280, 9371, tmp_path)
    assert [(n.service, n.http_port) for n in nodes] == [
        ("faults", 9271), ("faults-2", 9282), ("faults-3", 9283)]  # fmt: skip
    options = " ".join(nodes[2].options())
    assert "discovery.seed_hosts=127.0.0.1:9371,127.0.0.1:9372,127.0.0.1:9373" in options
    assert "transport.port=9373" in options and "node.name=faults-3" in options
    assert "cluster.initial_cluster_manager_nodes=faults" in options
    single = members("solo", "kgqr-solo", 1, 9200, 9260, 9300, tmp_path)[0]
    assert single.options() == ["-E", "discovery.type=single-node", "-E", "cluster.name=kgqr-solo"]
    with pytest.raises(ValueError, match="1 to 5"):
        members("x", "x", 6, 1, 1, 1, tmp_path)


def test_the_node_count_is_remembered_and_every_node_is_a_service(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert remembered_nodes(settings).opensearch.nodes == 1
    three = remembered_nodes(settings, 3)
    assert remembered_nodes(settings).opensearch.nodes == 3  # a later `status` or `down`
    nodes = [s for s in local_services(three, ("opensearch",)) if isinstance(s, OpenSearchNode)]
    assert [(n.name, n.port) for n in nodes] == [
        ("opensearch", 9200), ("opensearch-2", 9262), ("opensearch-3", 9263)]  # fmt: skip
    assert len({n.data_dir for n in nodes}) == 3
