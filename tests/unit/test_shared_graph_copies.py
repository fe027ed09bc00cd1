"""A graph copy written by one process and mapped by another answers as the one it was
built from; one process reads Neo4j while the others wait; older copies go."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kgqr_core.field_evidence import FieldEvidence
from query_rewriter.graph.in_memory import GraphSnapshot
from query_rewriter.graph.shared_copies import SharedCopies
from tests.unit.test_graph_snapshot import (
    BRAND_ACME,
    NODES,
    PASSAGE_NODES,
    PASSAGE_RELATIONSHIPS,
    RELATIONSHIPS,
    SHOP_NODES,
    SHOP_RELATIONSHIPS,
)


def never() -> GraphSnapshot:
    raise AssertionError("read from Neo4j although a copy was on disk")


def shared_and_built(
    tmp_path: Path, nodes: list[Any], relationships: list[Any]
) -> tuple[GraphSnapshot, GraphSnapshot]:
    built = GraphSnapshot.build(3, nodes, relationships)
    written, mapped = SharedCopies(tmp_path).map_or_build("kb", "ab12", 3, lambda: built)
    assert not mapped and written is not None
    again, mapped = SharedCopies(tmp_path).map_or_build("kb", "ab12", 3, never)
    assert mapped and again is not None
    return built, again


def test_a_mapped_copy_answers_every_expansion_as_the_built_one(tmp_path: Path) -> None:
    cases: list[tuple[list[Any], list[Any], str]] = [
        (NODES, RELATIONSHIPS, "m1"),
        (PASSAGE_NODES, PASSAGE_RELATIONSHIPS, "entity:acme"),
        (SHOP_NODES, SHOP_RELATIONSHIPS, "s1"),
    ]
    for nodes, relationships, seed in cases:
        built, mapped = shared_and_built(tmp_path / seed, nodes, relationships)
        assert isinstance(mapped.neighbour.base, np.memmap)  # pages shared, not copied
        assert mapped.version == 3 and mapped.relationship_count == built.relationship_count
        for graph in (built, mapped):
            hood = graph.neighbours([seed, "missing"], hops=2, cap=50)
            reach = hood.reach([seed, "missing"])
            answers = (
                [(p.id, p.relation_text(), p.name) for p in hood.paths()],
                hood.document_ids(), hood.bridged_documents(), hood.evidence_ids(),
                (reach.nodes, list(reach.sources), list(reach.targets)),
                [p.id for p in hood.without({"p2", BRAND_ACME}).paths()],
            )  # fmt: skip
            if graph is built:
                expected = answers
            else:
                assert answers == expected
    assert BRAND_ACME in expected[3] and isinstance(BRAND_ACME, FieldEvidence)


def test_one_process_reads_the_graph_while_the_others_wait_and_map_it(tmp_path: Path) -> None:
    reads: list[int] = []

    def slow_read() -> GraphSnapshot:
        reads.append(1)
        time.sleep(0.3)
        return GraphSnapshot.build(5, NODES, RELATIONSHIPS)

    answers: list[tuple] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(
                SharedCopies(tmp_path).map_or_build("kb", "ab12", 5, slow_read)
            )
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1
    assert sorted(mapped for _, mapped in answers) == [False, True, True]
    assert all(copy is not None and copy.version == 5 for copy, _ in answers)


def test_a_newer_version_or_a_new_epoch_removes_the_older_copies(tmp_path: Path) -> None:
    shared = SharedCopies(tmp_path)
    for version in (4, 6, 5):
        shared.map_or_build("kb", "ab12", version, lambda: GraphSnapshot.build(0, NODES, []))
    # 5 was written after 6 (a process that looked before the last ingest): 6 stays.
    assert sorted(p.name for p in (tmp_path / "kb").iterdir() if not p.name.startswith(".")) == [
        "ab12-5", "ab12-6",
    ]  # fmt: skip
    # Redis lost its data: a new epoch, its counter from 0 again.
    shared.map_or_build("kb", "cd34", 1, lambda: GraphSnapshot.build(1, NODES, RELATIONSHIPS))
    assert [p.name for p in (tmp_path / "kb").iterdir() if not p.name.startswith(".")] == ["cd34-1"]


def test_what_a_crashed_writer_left_half_written_goes_with_the_next_write(
    tmp_path: Path,
) -> None:
    left = tmp_path / "kb" / ".ab12-3.999.partial"
    left.mkdir(parents=True)
    SharedCopies(tmp_path).map_or_build("kb", "ab12", 4, lambda: GraphSnapshot.build(4, NODES, []))
    assert not left.exists()


def test_a_torn_copy_is_read_again_not_served(tmp_path: Path) -> None:
    shared = SharedCopies(tmp_path)
    shared.map_or_build("kb", "ab12", 2, lambda: GraphSnapshot.build(2, NODES, RELATIONSHIPS))
    (shared.folder("kb", "ab12", 2) / "neighbour.npy").write_bytes(b"not an array")
    copy, mapped = shared.map_or_build(
        "kb", "ab12", 2, lambda: GraphSnapshot.build(2, NODES, RELATIONSHIPS)
    )
    assert not mapped and copy is not None and copy.relationship_count == 5
    assert SharedCopies(tmp_path).map_or_build("kb", "ab12", 2, never)[1]


def test_an_empty_graph_and_a_graph_too_large_to_copy(tmp_path: Path) -> None:
    shared = SharedCopies(tmp_path)
    shared.map_or_build("empty", "ab12", 0, lambda: GraphSnapshot.build(0, [], []))
    empty, mapped = SharedCopies(tmp_path).map_or_build("empty", "ab12", 0, never)
    assert mapped and empty is not None and empty.neighbours(["x"], 2, 50).paths() == []
    assert shared.map_or_build("big", "ab12", 1, lambda: None) == (None, False)
    assert not shared.folder("big", "ab12", 1).exists()


def test_a_folder_that_cannot_be_written_leaves_each_process_its_own_copy(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    copy, mapped = SharedCopies(tmp_path / "a-file").map_or_build(
        "kb", "ab12", 1, lambda: GraphSnapshot.build(1, NODES, RELATIONSHIPS)
    )
    assert not mapped and copy is not None and copy.relationship_count == 5


@pytest.mark.parametrize(("kb", "epoch"), [("../etc", "ab12"), ("kb", "../x"), ("KB", "ab")])
def test_a_name_that_is_no_kb_or_epoch_names_no_folder(tmp_path: Path, kb: str, epoch: str) -> None:
    with pytest.raises(ValueError, match="no graph copy folder"):
        SharedCopies(tmp_path).map_or_build(kb, epoch, 1, never)


def test_a_process_waits_for_anothers_write_only_so_long(tmp_path: Path) -> None:
    """A writer stuck on a Neo4j that stopped answering held every other process's
    loading thread on the lock for good."""
    import fcntl

    (tmp_path / "kb").mkdir()
    with open(tmp_path / "kb" / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="writing the graph copy of kb"):
            SharedCopies(tmp_path).map_or_build("kb", "ab12", 5, never, wait_s=0.3)
        assert 0.3 <= time.monotonic() - started < 5
