"""Which in-memory graph copy the proxy may serve, and reading copies from Neo4j.

A copy is current while the knowledge base's graph revision in Redis
(kgqr_core/graph_version.py: a counter raised by every ingest chunk and by dropping the KB,
with the epoch each raise sets anew) is the revision it was read at. The proxy looks at it
at most every
KGQR_GRAPH_SNAPSHOT_CHECK_S per KB. Until a current copy is loaded (in a worker thread
with its own Neo4j session, while searches go on) expansions are read from Neo4j, so no
search waits for a load and none reads a graph older than the proxy's last look. The
processes of a machine share one copy (graph/shared_copies.py): one reads Neo4j, the
others map what it wrote.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

import anyio

from kgqr_core import connections, graph_version
from kgqr_core.settings import Settings
from query_rewriter import metrics
from query_rewriter.graph.in_memory import (
    COUNT_RELATIONS,
    NODES,
    RELATIONSHIPS,
    GraphSnapshot,
)
from query_rewriter.graph.projection import ProjectedGraph
from query_rewriter.graph.shared_copies import LOCK_WAIT_S, SharedCopies
from query_rewriter.graph.store import Neighbours, Neo4jGraph

log = logging.getLogger("kgqr.graph")
RETRY_S = 30.0  # after a failed load (Neo4j down): Neo4j answers, or the walk falls back


def load_snapshot(driver: Any, kb: str, version: int, max_relations: int) -> GraphSnapshot | None:
    """The KB's graph as read now (None: more than `max_relations` relationships). The
    relationships are streamed into the arrays, not held as a million records. Each read
    is bounded on the server as other processes' wait for it is (LOCK_WAIT_S): a read
    stuck in Neo4j held its thread, and this KB's copy, for good."""
    from neo4j import Query

    def bounded(text: str) -> Query:
        return Query(text, timeout=LOCK_WAIT_S)

    with driver.session(default_access_mode="READ") as session:
        counted = session.run(bounded(COUNT_RELATIONS), kb=kb).single(strict=True)
        if counted["relations"] > max_relations:
            return None
        nodes = [tuple(record.values()) for record in session.run(bounded(NODES), kb=kb)]
        relationships = (
            tuple(record.values()) for record in session.run(bounded(RELATIONSHIPS), kb=kb)
        )
        return GraphSnapshot.build(version, nodes, relationships)


LOAD_THREADS = 8  # graph copies loaded (read, or waited for) at once by one process


@dataclass
class _KnownGraph:
    snapshot: GraphSnapshot | None = None
    snapshot_at: graph_version.Revision | None = None  # the revision `snapshot` was read at
    revision: graph_version.Revision | None = None  # at the last look; None: Redis silent
    looked_at: float = float("-inf")
    too_large_at: graph_version.Revision | None = None  # the revision found too large to copy
    retry_at: float = float("-inf")


class GraphSnapshots:
    def __init__(self, settings: Settings, redis: Any) -> None:
        self._settings = settings
        self._redis = redis
        self._known: dict[str, _KnownGraph] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._removing: set[asyncio.Task[None]] = set()
        self._shared = SharedCopies.of_machine(settings)
        # Loads read for seconds to minutes (or wait on another process's, up to 10 min):
        # in the worker threads every other off-loop step shares (a query's embedding, a
        # large answer), forty KBs' loads at once held them all. (A narrower bound on the
        # Neo4j reads alone was taken under a KB's copy lock, which other processes wait on.)
        self._load_threads = anyio.CapacityLimiter(LOAD_THREADS)

    async def revision(self, kb: str) -> graph_version.Revision | None:
        """The KB's graph revision as of the last look (looked at again once
        KGQR_GRAPH_SNAPSHOT_CHECK_S has passed); None while Redis does not answer."""
        known = self._known.setdefault(kb, _KnownGraph())
        now = time.monotonic()
        if now - known.looked_at >= self._settings.graph.snapshot_check_s:
            known.looked_at = now
            try:
                known.revision = await graph_version.revision(self._redis, kb)
            except Exception as exc:  # no way to tell a copy is current: Neo4j answers
                log.warning("graph version of %s unreadable (%s): expanding in Neo4j", kb, exc)
                known.revision = None
        return known.revision

    async def current(self, kb: str) -> GraphSnapshot | None:
        """The KB's copy if it is current; else None, and a load starts if none runs."""
        if self._settings.graph.snapshot_max_relations <= 0:
            return None
        revision = await self.revision(kb)
        if revision is None:
            return None
        known = self._known.get(kb)
        if known is None:  # forgotten (its KB dropped) while Redis was asked
            return None
        if known.snapshot is not None and known.snapshot_at == revision:
            return known.snapshot
        loadable = known.too_large_at != revision and time.monotonic() >= known.retry_at
        if loadable and kb not in self._loading:
            self._loading[kb] = asyncio.create_task(self._load(kb, known, revision))
        return None

    async def preload(self, names: str, every_kb: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """Start reading the copies of `names` (KGQR_GRAPH_SNAPSHOT_PRELOAD: a comma-separated
        list, or `*` for what `every_kb` lists); the knowledge bases whose loads started.
        Never raises: a proxy that cannot tell which copies to read at start reads each on
        first use, as it would without preloading. (A dropped KB keeps its graph version, so
        `*` is the KBs that exist, not the versions Redis holds.)"""
        wanted = {name.strip() for name in names.split(",")} - {""}
        if not wanted:
            return []
        try:
            listed: set[str] | None = set(await every_kb())
        except Exception as exc:
            if "*" in wanted:
                log.warning("graph copies not preloaded (%s): each is read on first use", exc)
                return []
            listed = None  # the names given are read as given
        if "*" in wanted:
            wanted = listed or set()
        elif listed is not None and (unknown := sorted(wanted - listed)):
            # A typo would copy an empty graph in silence and leave the KB meant unread.
            log.warning(
                "KGQR_GRAPH_SNAPSHOT_PRELOAD names %s, which kgqr-meta does not list: "
                "not preloaded",
                ", ".join(unknown),
            )
            wanted -= set(unknown)
        started = []
        for kb in sorted(wanted):
            if await self.revision(kb) is None:  # Redis down: one timeout, not one per KB
                break  # (version() said why)
            await self.current(kb)
            if kb in self._loading:  # (a load's task first runs at the next await)
                started.append(kb)
        if started:
            log.info("reading the graph copies of %s", ", ".join(started))
        return started

    async def _load(self, kb: str, known: _KnownGraph, revision: graph_version.Revision) -> None:
        limit = self._settings.graph.snapshot_max_relations
        started = time.perf_counter()
        shared = self._shared
        version = revision.number

        def from_neo4j() -> GraphSnapshot | None:
            with connections.neo4j_driver(self._settings) as driver:
                return load_snapshot(driver, kb, version, limit)

        def read() -> tuple[GraphSnapshot | None, bool]:
            if shared is None:
                return from_neo4j(), False
            snapshot, mapped = shared.map_or_build(kb, revision.epoch, version, from_neo4j)
            if snapshot is not None and snapshot.relationship_count > limit:
                return None, mapped  # written by a process allowed larger copies
            return snapshot, mapped

        try:
            snapshot, mapped = await anyio.to_thread.run_sync(
                read, abandon_on_cancel=True, limiter=self._load_threads
            )
        except Exception as exc:
            known.retry_at = time.monotonic() + RETRY_S
            metrics.GRAPH_SNAPSHOT_LOADS.labels("failed").inc()
            log.warning("graph of %s not copied (%s): Neo4j expands it", kb, exc)
            return
        finally:
            del self._loading[kb]
        if snapshot is None:
            known.too_large_at = revision
            metrics.GRAPH_SNAPSHOT_LOADS.labels("too_large").inc()
            log.info("graph of %s has over %d relationships: Neo4j expands it", kb, limit)
            return
        known.snapshot, known.snapshot_at = snapshot, revision
        metrics.GRAPH_SNAPSHOT_LOADS.labels("mapped" if mapped else "loaded").inc()
        self._count_held()
        log.info(
            "graph of %s %s: %d nodes, %d relationships, version %d, %.1f s",
            kb, "mapped from this machine's copy" if mapped else "copied from Neo4j",
            len(snapshot.ids), snapshot.relationship_count, version,
            time.perf_counter() - started,
        )  # fmt: skip

    def forget(self, kbs: Collection[str]) -> None:
        """Let go of the copies of knowledge bases that are gone (dropped). A copy is
        replaced only when its KB is searched again, which a dropped one never is: its
        arrays stayed in memory, or mapped from files its drop removed, holding their disk
        space, for as long as the process ran. Their files go too, since the drop removes
        them only on the machine it runs on and a proxy's machine may be another."""
        for kb in kbs:
            self._known.pop(kb, None)
            if self._shared is not None:
                load = self._loading.get(kb)
                removal = asyncio.create_task(_remove_files(self._shared, kb, load))
                self._removing.add(removal)
                removal.add_done_callback(self._removing.discard)
        self._count_held()

    def _count_held(self) -> None:
        metrics.GRAPH_SNAPSHOT_RELATIONSHIPS.set(
            sum(k.snapshot.relationship_count for k in self._known.values() if k.snapshot)
        )

    async def settle(self) -> None:
        """Until the loads and file removals started so far finish (a test, a bench)."""
        while self._loading or self._removing:
            await asyncio.gather(*self._loading.values(), *self._removing, return_exceptions=True)


async def _remove_files(shared: SharedCopies, kb: str, load: asyncio.Task[None] | None) -> None:
    """After this process's load of the KB, if one runs, so it does not write its copy
    back; in a thread, since a large copy takes the disk's time to remove."""
    if load is not None:
        await asyncio.gather(load, return_exceptions=True)
    await anyio.to_thread.run_sync(shared.remove, kb)
    log.info("graph copy files of %s removed: kgqr-meta no longer lists it", kb)


class SnapshotGraph(Neo4jGraph):
    """Neo4jGraph whose one- and two-hop expansions come from the KB's current in-memory
    copy where there is one, else from its copy in OpenSearch (`projection`, where it is
    complete); every other read goes to Neo4j."""

    def __init__(
        self, driver: Any, snapshots: GraphSnapshots, projection: ProjectedGraph | None = None
    ) -> None:
        super().__init__(driver)
        self.snapshots = snapshots
        self.projection = projection

    async def neighbours(
        self,
        kb: str,
        node_ids: list[str],
        hops: int = 2,
        cap: int = 50,
        with_names: bool = False,
    ) -> Neighbours:
        snapshot = await self.snapshots.current(kb) if hops <= 2 else None
        if snapshot is not None:
            metrics.GRAPH_READS.labels("snapshot").inc()
            return snapshot.neighbours(node_ids, hops, cap)
        if self.projection is not None and not with_names:
            projected = await self.projection.neighbours(kb, node_ids, hops, cap)
            if projected is not None:
                metrics.GRAPH_READS.labels("opensearch").inc()
                return projected
        metrics.GRAPH_READS.labels("neo4j").inc()
        return await super().neighbours(kb, node_ids, hops, cap, with_names)

    async def revision(self, kb: str) -> graph_version.Revision | None:
        return await self.snapshots.revision(kb)
