"""The read-only query port stages use: graph and vector reads, never a write.

Stages change memory only through ``MemoryStore`` (the consistency unit: ordering, retries,
graph and vector together); what they read goes through ``MemoryQuery``, so no stage holds a
handle that could write one store behind the other's back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from memstream.sinks.ports import (
    CubeRows,
    Direction,
    Filter,
    FilterField,
    GraphStore,
    GroupCount,
    TagNeighbor,
    VectorHit,
    VectorQuery,
    VectorRecord,
    VectorStore,
)
from memstream.topics.models import (
    CubeGraph,
    Edge,
    EdgeType,
    MemoryItem,
    MemoryType,
    Status,
    Subgraph,
)


class MemoryQuery:
    """Reads of one graph store and one vector store (see ``sinks.ports`` for each)."""

    def __init__(self, graph: GraphStore, vectors: VectorStore) -> None:
        self._graph = graph
        self._vectors = vectors

    # -- graph -------------------------------------------------------------------------

    async def get_node(self, cube_id: str, node_id: str) -> MemoryItem | None:
        return await self._graph.get_node(cube_id, node_id)

    async def get_nodes(self, cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        return await self._graph.get_nodes(cube_id, ids)

    async def recorded_answer(self, cube_id: str, key: str) -> str | None:
        """An answer recorded under ``key`` (``MemoryStore.record_answer``), if any."""
        return await self._graph.llm_answer(cube_id, key)

    async def all_of_type(
        self, cube_id: str, memory_type: MemoryType, status: Status | None = "activated",
        skip: int = 0, limit: int | None = None,
    ) -> list[MemoryItem]:
        return await self._graph.all_of_type(cube_id, memory_type, status, skip=skip,
                                             limit=limit)

    async def find_nodes(
        self, cube_id: str, filters: Sequence[Filter] = (), limit: int | None = None
    ) -> list[MemoryItem]:
        return await self._graph.find_nodes(cube_id, filters, limit)

    async def nodes_by_tags(
        self, cube_id: str, tags: Sequence[str], filters: Sequence[Filter] = (),
        min_overlap: int = 1, limit: int = 20,
    ) -> list[MemoryItem]:
        return await self._graph.nodes_by_tags(cube_id, tags, filters, min_overlap, limit)

    async def count_by(
        self, cube_id: str, fields: Sequence[FilterField], filters: Sequence[Filter] = ()
    ) -> list[GroupCount]:
        return await self._graph.count_by(cube_id, fields, filters)

    async def count_by_type(
        self, cube_id: str, status: Status | None = "activated"
    ) -> dict[str, int]:
        return await self._graph.count_by_type(cube_id, status)

    async def keyword_search(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[MemoryItem, float]]:
        return await self._graph.keyword_search(cube_id, text, limit, memory_types, filters)

    async def keyword_ids(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[str, float]]:
        return await self._graph.keyword_ids(cube_id, text, limit, memory_types, filters)

    async def neighbors_by_tags(
        self, cube_id: str, tags: Sequence[str], min_overlap: int = 1,
        exclude_ids: Sequence[str] = (), limit: int = 20,
    ) -> list[TagNeighbor]:
        return await self._graph.neighbors_by_tags(cube_id, tags, min_overlap, exclude_ids, limit)

    async def subgraph(
        self, cube_id: str, center_id: str, depth: int = 2, center_status: Status = "activated"
    ) -> Subgraph:
        return await self._graph.subgraph(cube_id, center_id, depth, center_status)

    async def edges_of(
        self, cube_id: str, node_id: str, types: Sequence[EdgeType] | None = None,
        direction: Direction = "any",
    ) -> list[Edge]:
        return await self._graph.edges_of(cube_id, node_id, types, direction)

    async def edges_from(
        self, cube_id: str, ids: Sequence[str], types: Sequence[EdgeType]
    ) -> list[Edge]:
        return await self._graph.edges_from(cube_id, ids, types)

    async def edge_exists(
        self, cube_id: str, source: str, target: str, type: EdgeType, direction: Direction = "out"
    ) -> bool:
        return await self._graph.edge_exists(cube_id, source, target, type, direction)

    async def missing_edges(self, cube_id: str, edges: Sequence[Edge]) -> list[Edge]:
        return await self._graph.missing_edges(cube_id, edges)

    async def children(self, cube_id: str, node_id: str) -> list[MemoryItem]:
        return await self._graph.children(cube_id, node_id)

    async def optimization_candidates(
        self, cube_id: str, memory_type: MemoryType, limit: int = 1000
    ) -> list[MemoryItem]:
        return await self._graph.optimization_candidates(cube_id, memory_type, limit)

    async def export_cube(self, cube_id: str) -> CubeGraph:
        return await self._graph.export_cube(cube_id)

    async def list_cubes(self) -> list[str]:
        return await self._graph.list_cubes()

    async def recent_cubes(self, limit: int) -> list[str]:
        return await self._graph.recent_cubes(limit)

    # -- vectors -----------------------------------------------------------------------

    async def vectors(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]:
        """The stored vectors (with their metadata) of those ``ids`` that have one."""
        return await self._vectors.get(cube_id, ids)

    async def vector_rows(self, cube_id: str, ids: Sequence[str]) -> CubeRows:
        """``vectors`` with the vectors apart, as one float32 matrix (row i: record i's): a
        store that holds them so (the in-memory cache) hands them over without building 384
        Python floats per record, which a search then turned back into an array."""
        rows = getattr(self._vectors, "get_rows", None)
        if rows is not None:
            found: CubeRows = await rows(cube_id, ids)
            return found
        return CubeRows.of_records(await self._vectors.get(cube_id, ids), self._vectors.dim)

    async def vector_search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        """Raw nearest vectors (not joined with the graph: ``MemoryStore.search`` is)."""
        return await self._vectors.search(cube_id, query)


class NodeReads:
    """The nodes of one cube that one search reads, each read from the graph once: turn
    ranking (the statements of its excerpts) and the materializing of hits (the statements
    ranked) read mostly the same nodes, at the same time, and reading a node is most of what
    a search costs the worker (the graph's reply parsed, then the model validated)."""

    def __init__(self, query: MemoryQuery, cube_id: str) -> None:
        self._query, self._cube_id = query, cube_id
        self._reads: dict[str, asyncio.Future[dict[str, MemoryItem]]] = {}

    async def get(self, ids: Sequence[str]) -> list[MemoryItem]:
        """``MemoryQuery.get_nodes`` of the cube: the nodes of ``ids`` that exist, in order."""
        wanted = list(dict.fromkeys(ids))
        if new := [i for i in wanted if i not in self._reads]:
            read = asyncio.ensure_future(self._read(new))
            # taken here if no caller is left to take it (a search that failed meanwhile)
            read.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._reads.update(dict.fromkeys(new, read))
        found: dict[str, MemoryItem] = {}
        for batch in await asyncio.gather(*{id(f): f for f in map(self._reads.get, wanted)
                                            if f is not None}.values()):
            found.update(batch)
        return [found[i] for i in wanted if i in found]

    async def _read(self, ids: list[str]) -> dict[str, MemoryItem]:
        return {n.id: n for n in await self._query.get_nodes(self._cube_id, ids)}
