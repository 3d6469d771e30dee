"""The consistency unit of memstream: a graph node and its vector, written and read as one.

Strategy (README "Graph and vectors stay consistent"):

- A node and its vector are one idempotent unit keyed by (cube id, node id). Both
  writes are upserts, so a replayed or redelivered event rewrites the same unit.
- Writes validate everything first (vector dimension, cube of every node), then
  go graph -> vector. Each step is retried with exponential backoff (bounded
  attempts); if a step still fails, ``write`` raises ``StoreError`` and the stage
  retries or dead-letters the event, whose redelivery completes the unit.
- Between the two steps a node exists without a vector: graph reads (keys, tags,
  subgraphs) see it, vector search does not yet. The reverse never lasts: deletes
  go vector -> graph, so a vector is gone before its node.
- Readers never get a vector hit whose node is missing. ``search`` joins vector
  hits with graph nodes and drops hits whose node is missing or whose node (the
  source of truth) no longer matches the status, types or filters; it fetches
  more candidates while hits are dropped, up to a bounded depth.
- Status changes go graph -> vector; the join hides the window in between.
- Capacity eviction (``evict_oldest``) is a delete: vectors first, retried.
- ``complete`` finishes the units of given nodes after a crash (the add stage calls it on
  a redelivery); ``repair`` finds what a crash can leave behind in a whole cube.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import TypeVar

from memstream.sinks.filtering import matches_all, vector_filter_supported
from memstream.sinks.ports import GraphStore, StoreError, VectorQuery, VectorRecord, VectorStore
from memstream.sinks.query import MemoryQuery
from memstream.topics.models import Edge, EdgeType, MemoryItem, MemoryType, Status, UsageRecord

log = logging.getLogger("memstream.sinks")
T = TypeVar("T")
EmbedNodes = Callable[[Sequence[MemoryItem]], Awaitable[Sequence[Sequence[float]]]]
Sleep = Callable[[float], Awaitable[None]]


def vector_record(item: MemoryItem, vector: Sequence[float]) -> VectorRecord:
    """The vector-side copy of the metadata that vector filters need."""
    meta = item.metadata
    return VectorRecord(
        id=item.id,
        cube_id=meta.cube_id,
        user_id=meta.user_id,
        memory_type=meta.memory_type,
        status=meta.status,
        vector=vector,
        key=meta.key,
        tags=meta.tags,
        session_id=meta.session_id,
        hierarchy_level=meta.hierarchy_level,
        type=meta.type,
        updated_at=meta.updated_at.isoformat(timespec="microseconds"),
    )


def _same_metadata(stored: VectorRecord, expected: VectorRecord) -> bool:
    fields = ("user_id", "memory_type", "status", "key", "tags", "session_id")
    more = ("hierarchy_level", "type", "updated_at")
    return all(getattr(stored, f) == getattr(expected, f) for f in fields + more)


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` found in one cube, and whether it fixed it."""

    cube_id: str
    nodes_without_vectors: tuple[str, ...]
    vectors_without_nodes: tuple[str, ...]
    stale_vectors: tuple[str, ...]  # vector metadata differs from the node's
    fixed: bool

    @property
    def consistent(self) -> bool:
        return not (self.nodes_without_vectors or self.vectors_without_nodes or self.stale_vectors)


class MemoryStore:
    """Graph + vectors behind one interface that keeps them consistent (see module doc)."""

    def __init__(
        self,
        graph: GraphStore,
        vectors: VectorStore,
        *,
        attempts: int = 4,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        max_fetch: int = 1000,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if attempts < 1:
            raise StoreError("attempts must be at least 1")
        self.graph = graph
        self.vectors = vectors
        self.query = MemoryQuery(graph, vectors)  # what stages read through
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._max_fetch = max_fetch
        self._sleep = sleep

    async def _retry(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        delay = self._backoff_s
        for attempt in range(1, self._attempts + 1):
            try:
                return await op()
            except Exception as exc:
                if attempt == self._attempts:
                    raise StoreError(f"{what} failed after {attempt} attempts: {exc}") from exc
                log.warning("%s failed (attempt %d/%d): %s", what, attempt, self._attempts, exc)
                await self._sleep(delay)
                delay = min(delay * 2, self._max_backoff_s)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writes ------------------------------------------------------------------------

    async def write(self, items_with_vectors: Sequence[tuple[MemoryItem, Sequence[float]]]) -> None:
        """Upsert nodes with their vectors: graph first, then vectors (idempotent, retried)."""
        by_cube: dict[str, dict[str, tuple[MemoryItem, Sequence[float]]]] = {}
        for item, vector in items_with_vectors:
            if len(vector) != self.vectors.dim:
                raise StoreError(
                    f"vector of {item.id!r} has {len(vector)} dimensions, "
                    f"the vector store {self.vectors.dim}"
                )
            by_cube.setdefault(item.metadata.cube_id, {})[item.id] = (item, vector)
        for cube_id, units in by_cube.items():
            nodes = [item for item, _ in units.values()]
            records = [vector_record(item, vector) for item, vector in units.values()]
            await self._retry(
                f"graph upsert of {len(nodes)} nodes in {cube_id}",
                partial(self.graph.upsert_nodes, cube_id, nodes),
            )
            await self._retry(
                f"vector upsert of {len(records)} records in {cube_id}",
                partial(self.vectors.upsert, records),
            )

    async def delete(self, cube_id: str, ids: Sequence[str]) -> int:
        """Delete units (vectors first, then nodes with their edges); returns nodes deleted."""
        if not ids:
            return 0
        await self._retry(f"vector delete in {cube_id}", lambda: self.vectors.delete(cube_id, ids))
        return await self._retry(
            f"graph delete in {cube_id}", lambda: self.graph.delete_nodes(cube_id, ids)
        )

    async def evict_oldest(self, cube_id: str, memory_type: MemoryType, keep: int) -> list[str]:
        """Delete the activated nodes of a type beyond the newest ``keep`` (FIFO by updated_at,
        ties: the smaller id goes first); returns their ids.

        Vectors go first, then nodes, each retried: a crash in between leaves nodes without
        vectors (never a vector search hit without a node), and the same call again, on the
        redelivered input, picks the same oldest nodes and finishes the job."""
        victims = await self.over_capacity(cube_id, memory_type, keep)
        if victims:
            await self.delete(cube_id, victims)
        return victims

    async def over_capacity(self, cube_id: str, memory_type: MemoryType, keep: int) -> list[str]:
        """The ids ``evict_oldest`` would delete, oldest last; nothing is deleted (a stage
        announces the eviction first and deletes once the announcement is sent)."""
        if keep < 0:
            raise StoreError(f"keep must be >= 0, got {keep}")
        # ids only, sorted by the graph: a full cube is checked after every batch, and reading
        # its 1,500 facts whole each time was a sixth of the worker's event loop
        return await self._retry(f"{memory_type} of {cube_id} beyond {keep}",
                                 lambda: self.graph.beyond_capacity(cube_id, memory_type, keep))

    async def complete(self, cube_id: str, ids: Sequence[str], embed: EmbedNodes) -> list[str]:
        """Finish units a crash left half-written; the graph (the source of truth) is not
        touched. Among ``ids``, a node without a vector, or whose vector's metadata differs
        from the node's (the node was rewritten, its vector not yet: its text may have
        changed too), gets its vector from ``embed``. Returns the ids fixed."""
        nodes = {n.id: n for n in await self.graph.get_nodes(cube_id, ids)}
        if not nodes:
            return []
        records = {r.id: r for r in await self.vectors.get(cube_id, list(nodes))}
        broken = [n for i, n in nodes.items()
                  if i not in records or not _same_metadata(records[i], vector_record(n, ()))]
        if not broken:
            return []
        fresh = [vector_record(n, v) for n, v in zip(broken, await embed(broken), strict=True)]
        await self._retry(f"vector completion in {cube_id}", lambda: self.vectors.upsert(fresh))
        return [n.id for n in broken]

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> list[str]:
        """Change the status of existing nodes in both stores; returns the ids changed.

        Only the status changes (``updated_at`` stays: capacity FIFO orders by it).
        """
        nodes = await self.graph.get_nodes(cube_id, ids)
        changed = [n.evolve(status=status) for n in nodes if n.metadata.status != status]
        if changed:
            await self._retry(
                f"graph status update in {cube_id}",
                lambda: self.graph.upsert_nodes(cube_id, changed),
            )
        changed_ids = [n.id for n in changed]
        # Vectors of every requested node, so a half-applied earlier call is completed too.
        present = [n.id for n in nodes]
        await self._retry(
            f"vector status update in {cube_id}",
            lambda: self.vectors.set_status(cube_id, present, status),
        )
        return changed_ids

    async def update_node(self, cube_id: str, node: MemoryItem) -> bool:
        """Replace an existing node's text-free fields (key, tags, status, …): graph first,
        then the vector's metadata (the embedding is kept, so the text must not change: use
        ``write`` with a new vector for that). False when the node does not exist."""
        if not await self._retry(f"graph update of {node.id} in {cube_id}",
                                 lambda: self.graph.update_node(cube_id, node)):
            return False
        stored = await self._retry(f"vector read of {node.id} in {cube_id}",
                                   lambda: self.vectors.get(cube_id, [node.id]))
        if stored and not _same_metadata(stored[0], vector_record(node, ())):
            fresh = vector_record(node, stored[0].vector)
            await self._retry(f"vector metadata of {node.id} in {cube_id}",
                              lambda: self.vectors.upsert([fresh]))
        return True

    async def put_nodes(self, cube_id: str, nodes: Sequence[MemoryItem]) -> None:
        """Rewrite nodes whose embedding stays as it is (a flag, a status, an expired node's
        audit record): graph first, then the metadata of those vectors that exist (retried)."""
        if not nodes:
            return
        await self._retry(f"graph upsert in {cube_id}",
                          lambda: self.graph.upsert_nodes(cube_id, nodes))
        stored = {r.id: r for r in await self._retry(
            f"vector read in {cube_id}", lambda: self.vectors.get(cube_id, [n.id for n in nodes]))}
        fresh = [vector_record(n, stored[n.id].vector) for n in nodes if n.id in stored
                 and not _same_metadata(stored[n.id], vector_record(n, ()))]
        if fresh:
            await self._retry(f"vector metadata in {cube_id}", lambda: self.vectors.upsert(fresh))

    async def drop_vectors(self, cube_id: str, ids: Sequence[str]) -> None:
        """Delete the vectors of nodes that stay in the graph (an expired node keeps only its
        audit record, which vector search must never return)."""
        if ids:
            await self._retry(f"vector delete in {cube_id}",
                              lambda: self.vectors.delete(cube_id, ids))

    async def add_edges(self, cube_id: str, edges: Sequence[Edge]) -> None:
        """MERGE edges between existing nodes (idempotent, retried)."""
        if edges:
            await self._retry(f"edges in {cube_id}", lambda: self.graph.add_edges(cube_id, edges))

    async def record_answer(self, cube_id: str, key: str, answer: str) -> None:
        """Keep an answer (JSON) to one of the cube's questions under ``key``, beside the
        model's journal, so a redelivery reads it instead of asking again (retried)."""
        await self._retry(f"answer in {cube_id}",
                          lambda: self.graph.record_llm_answer(cube_id, key, answer))

    async def drop_answers(self, cube_id: str, keys: Sequence[str]) -> None:
        """Forget answers kept with ``record_answer`` once no redelivery needs them."""
        if keys:
            await self._retry(f"answers dropped in {cube_id}",
                              lambda: self.graph.drop_llm_answers(cube_id, keys))

    async def delete_edge(self, cube_id: str, source: str, target: str, type: EdgeType) -> bool:
        return await self._retry(f"edge delete in {cube_id}",
                                 lambda: self.graph.delete_edge(cube_id, source, target, type))

    async def redirect_edges(
        self, cube_id: str, from_ids: Sequence[str], to_id: str, exclude: Sequence[EdgeType]
    ) -> int:
        """Move edges of ``from_ids`` (except ``exclude`` types) onto ``to_id`` (retried)."""
        return await self._retry(
            f"edge redirect onto {to_id} in {cube_id}",
            lambda: self.graph.redirect_edges(cube_id, from_ids, to_id, exclude))

    async def record_usage(
        self, cube_id: str, uses: Mapping[str, Sequence[UsageRecord]], keep: int,
        seen: Sequence[MemoryItem] = (),
    ) -> int:
        """Append usage records to existing nodes (graph only: usage is not in the vector's
        metadata); returns how many were updated."""
        return await self._retry(
            f"usage of {len(uses)} nodes in {cube_id}",
            lambda: self.graph.record_usage(cube_id, uses, keep, seen))

    async def mark_used(self, cube_id: str, at: datetime) -> None:
        """Note the cube's latest search (which cubes a starting worker warms)."""
        await self._retry(f"last use of {cube_id}", lambda: self.graph.mark_used(cube_id, at))

    async def clear_cube(self, cube_id: str) -> tuple[int, int]:
        """Erase a cube from both stores; returns (nodes, vectors) deleted."""
        vectors = await self._retry(
            f"vector clear of {cube_id}", lambda: self.vectors.clear_cube(cube_id)
        )
        nodes = await self._retry(
            f"graph clear of {cube_id}", lambda: self.graph.clear_cube(cube_id)
        )
        return nodes, vectors

    # -- reads -------------------------------------------------------------------------

    async def get(
        self, cube_id: str, ids: Sequence[str]
    ) -> list[tuple[MemoryItem, list[float] | None]]:
        """Nodes among ``ids`` (in order) with their vectors (None while a vector is missing)."""
        nodes = await self.graph.get_nodes(cube_id, ids)
        records = await self.vectors.get(cube_id, [n.id for n in nodes])
        vectors = {r.id: list(r.vector) for r in records}
        return [(n, vectors.get(n.id)) for n in nodes]

    async def search(
        self, cube_id: str, query: VectorQuery, min_score: float | None = None
    ) -> list[tuple[MemoryItem, float]]:
        """Top-k nodes by cosine similarity, joined with the graph (see module doc); the
        query's filters may name what only the graph holds. With ``min_score``, only those
        scoring at least that (the rest are never read from the graph: a new fact's conflict
        candidates are usually none)."""
        top_k, filters, status = query.top_k, query.filters, query.status
        if top_k <= 0:
            return []
        pushed = [f for f in filters if vector_filter_supported(f)]
        fetch = top_k if len(pushed) == len(filters) else top_k * 4
        allowed = None if query.memory_types is None else set(query.memory_types)
        while True:
            fetch = min(fetch, max(self._max_fetch, top_k))
            hits = await self.vectors.search(cube_id, replace(query, top_k=fetch, filters=pushed))
            scored = hits if min_score is None else [h for h in hits if h.score >= min_score]
            if not scored:
                return []
            nodes = {n.id: n for n in await self.graph.get_nodes(cube_id, [h.id for h in scored])}
            found: list[tuple[MemoryItem, float]] = []
            for hit in scored:
                node = nodes.get(hit.id)
                if node is None:
                    continue  # a half-written or half-deleted unit: never returned
                meta = node.metadata
                if status is not None and meta.status != status:
                    continue
                if allowed is not None and meta.memory_type not in allowed:
                    continue
                if matches_all(node, filters):
                    found.append((node, hit.score))
                if len(found) == top_k:
                    return found
            if len(scored) < fetch or fetch >= self._max_fetch:
                return found  # read all there is, or all scoring enough
            fetch *= 4

    # -- repair ------------------------------------------------------------------------

    async def repair(
        self, cube_id: str, fix: bool = False, embed: EmbedNodes | None = None
    ) -> RepairReport:
        """Compare graph and vectors of a cube; with ``fix``, make them agree.

        Fixing deletes vectors without nodes, rewrites stale vector metadata from the
        node (keeping the vector), and re-embeds nodes without vectors when ``embed``
        is given (otherwise those are only reported).
        """
        graph = await self.graph.export_cube(cube_id)
        nodes = {n.id: n for n in graph.nodes}
        vector_ids = set(await self.vectors.list_ids(cube_id))
        records = {
            r.id: r for r in await self.vectors.get(cube_id, sorted(vector_ids & nodes.keys()))
        }
        missing = sorted(nodes.keys() - records.keys())
        orphans = sorted(vector_ids - nodes.keys())
        stale = sorted(
            i
            for i, r in records.items()
            if not _same_metadata(r, vector_record(nodes[i], r.vector))
        )
        if fix:
            if orphans:
                await self._retry(
                    f"orphan vector delete in {cube_id}",
                    lambda: self.vectors.delete(cube_id, orphans),
                )
            if stale:
                fresh = [vector_record(nodes[i], records[i].vector) for i in stale]
                await self._retry(
                    f"stale vector rewrite in {cube_id}", lambda: self.vectors.upsert(fresh)
                )
            if missing and embed is not None:
                items = [nodes[i] for i in missing]
                vectors = await embed(items)
                await self.write(list(zip(items, vectors, strict=True)))
        return RepairReport(
            cube_id=cube_id,
            nodes_without_vectors=tuple(missing),
            vectors_without_nodes=tuple(orphans),
            stale_vectors=tuple(stale),
            fixed=fix and (not missing or embed is not None),
        )
