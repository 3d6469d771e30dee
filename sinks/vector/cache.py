"""A per-cube in-memory index in front of a VectorStore, for single-writer stores.

Milvus Lite is one process per file, so the worker that owns the file sees every
write: an index of a cube's vectors kept in numpy (loaded on first use, updated on
each write) stays exact, and searches a 2,000-vector cube in well under a
millisecond, where Lite takes 6-80 ms depending on how its segments were sealed.
The inner store stays the durable copy; every write goes to it first. Least
recently used cubes are evicted beyond ``max_vectors``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from memstream.sinks.ports import VectorHit, VectorQuery, VectorRecord, VectorStore
from memstream.sinks.vector.expr import query_vector, record_answers, search_expression
from memstream.topics.models import Status


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised float32 rows (cosine, as the COSINE metric of the inner store)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)


@dataclass
class _CubeIndex:
    """One cube's records, and their unit rows stacked into a matrix for search.

    Each record's row is kept on its own too, so a write costs one row and the next
    search restacks rows (a copy, ~0.5 ms at 2,000) rather than converting every
    record's tuple of floats again (~20 ms).
    """

    records: dict[str, VectorRecord] = field(default_factory=dict)
    unit: dict[str, np.ndarray] = field(default_factory=dict)  # id -> unit row
    ids: list[str] = field(default_factory=list)
    matrix: np.ndarray | None = None  # rows follow ``ids``; None when stale

    @classmethod
    def of(cls, records: Sequence[VectorRecord]) -> _CubeIndex:
        """An index with its matrix built (off the event loop: this converts every vector).
        Each vector is held as a tuple of floats, as ``upsert`` holds it: the collector
        stops tracking such a tuple once it has seen it, where it walks every float of a
        list in each full pass (the lists of 9,000 vectors made a worker's full
        collections take 50-150 ms, each one a stall of the searches under way)."""
        index = cls(records={r.id: r if isinstance(r.vector, tuple)
                             else replace(r, vector=tuple(r.vector)) for r in records})
        index.ids = list(index.records)
        if index.ids:
            vectors = np.asarray([index.records[i].vector for i in index.ids], dtype=np.float32)
            index._stacked(_unit_rows(vectors.reshape(len(index.ids), -1)))
        return index

    def _stacked(self, matrix: np.ndarray) -> np.ndarray:
        self.matrix = matrix
        self.unit = dict(zip(self.ids, matrix, strict=True))  # views into the matrix
        return matrix

    def put(self, record: VectorRecord, stored: np.ndarray) -> None:
        self.records[record.id] = record
        self.unit[record.id] = _unit_rows(stored.reshape(1, -1))[0]
        self.matrix = None

    def drop(self, node_id: str) -> None:
        if self.records.pop(node_id, None) is not None:
            self.unit.pop(node_id, None)
            self.matrix = None

    def rows(self) -> tuple[list[str], np.ndarray]:
        """Ids and their unit rows."""
        if self.matrix is not None:
            return self.ids, self.matrix
        self.ids = list(self.records)
        if not self.ids:
            return self.ids, np.empty((0, 0), dtype=np.float32)
        return self.ids, self._stacked(np.stack([self.unit[i] for i in self.ids]))


class CachedVectorStore:
    """The VectorStore port over ``inner``, with exact in-memory search per cached cube."""

    def __init__(
        self, inner: VectorStore, max_vectors: int = 200_000, wait_for_load: bool = False
    ) -> None:
        self.inner = inner
        self.max_vectors = max_vectors
        self.wait_for_load = wait_for_load  # a miss waits for the load instead of falling back
        self._cubes: OrderedDict[str, _CubeIndex] = OrderedDict()
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._writes: dict[str, int] = {}  # per-cube write counter: a load racing a write retries

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def ensure_collection(self) -> None:
        await self.inner.ensure_collection()

    async def close(self) -> None:
        for task in list(self._loading.values()):
            task.cancel()
        await asyncio.gather(*self._loading.values(), return_exceptions=True)
        self._cubes.clear()
        await self.inner.close()

    def _cached(self, cube_id: str) -> _CubeIndex | None:
        """The cube's index if loaded; otherwise start loading it in the background.

        A miss never waits for the load (a large cube takes a second or more to read from
        Milvus Lite): callers use the inner store meanwhile.
        """
        index = self._cubes.get(cube_id)
        if index is not None:
            self._cubes.move_to_end(cube_id)
            return index
        if cube_id not in self._loading:
            self._loading[cube_id] = asyncio.create_task(self._load(cube_id))
        return None

    async def _load(self, cube_id: str) -> None:
        try:
            for _ in range(5):
                before = self._writes.get(cube_id, 0)
                records = await self.inner.all_records(cube_id)
                index = await asyncio.to_thread(_CubeIndex.of, records)
                if self._writes.get(cube_id, 0) == before:  # no write raced the read
                    self._cubes[cube_id] = index
                    self._evict()
                    return
        finally:
            self._loading.pop(cube_id, None)

    def loaded(self, cube_id: str) -> bool:
        """Whether the cube's vectors are held in memory now."""
        return cube_id in self._cubes

    async def warm(self, cube_id: str) -> _CubeIndex | None:
        """Load a cube now (tests, benchmarks, start-up warming)."""
        if self._cached(cube_id) is None and (task := self._loading.get(cube_id)) is not None:
            await task
        return self._cubes.get(cube_id)

    async def _lookup(self, cube_id: str) -> _CubeIndex | None:
        return await self.warm(cube_id) if self.wait_for_load else self._cached(cube_id)

    def _wrote(self, cube_id: str) -> _CubeIndex | None:
        self._writes[cube_id] = self._writes.get(cube_id, 0) + 1
        return self._cubes.get(cube_id)

    def _evict(self) -> None:
        total = sum(len(c.records) for c in self._cubes.values())
        while total > self.max_vectors and len(self._cubes) > 1:
            _, oldest = self._cubes.popitem(last=False)
            total -= len(oldest.records)

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        await self.inner.upsert(records)
        for record in records:
            if (index := self._wrote(record.cube_id)) is not None:
                # stored as float32, like the inner store does
                stored = np.asarray(record.vector, dtype=np.float32)
                index.put(replace(record, vector=tuple(stored.tolist())), stored)

    async def delete(self, cube_id: str, ids: Sequence[str]) -> None:
        await self.inner.delete(cube_id, ids)
        if (index := self._wrote(cube_id)) is not None:
            for node_id in ids:
                index.drop(node_id)

    async def get(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]:
        if (index := await self._lookup(cube_id)) is None:
            return await self.inner.get(cube_id, ids)
        return [index.records[i] for i in dict.fromkeys(ids) if i in index.records]

    async def all_records(self, cube_id: str) -> list[VectorRecord]:
        if (index := await self._lookup(cube_id)) is None:
            return await self.inner.all_records(cube_id)
        return list(index.records.values())

    async def list_ids(self, cube_id: str) -> list[str]:
        if (index := await self._lookup(cube_id)) is None:
            return await self.inner.list_ids(cube_id)
        return sorted(index.records)

    async def count(self, cube_id: str | None = None) -> int:
        if cube_id is None:
            return await self.inner.count(None)
        if (index := await self._lookup(cube_id)) is None:
            return await self.inner.count(cube_id)
        return len(index.records)

    async def search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        target = query_vector(query.vector, self.dim)
        # The same validation (and the same errors) as the Milvus expression builder.
        search_expression(cube_id, query)
        norm = float(np.linalg.norm(target))
        target = target / norm if norm else target
        if query.top_k <= 0 or (query.memory_types is not None and not query.memory_types):
            return []
        if (index := await self._lookup(cube_id)) is None:
            return await self.inner.search(cube_id, query)
        ids, matrix = index.rows()
        if not ids:
            return []
        scores = matrix @ target
        hits: list[VectorHit] = []
        for row in np.argsort(-scores, kind="stable"):
            record = index.records[ids[row]]
            if record_answers(record, query):
                hits.append(VectorHit(record.id, float(scores[row]), record))
                if len(hits) == query.top_k:
                    break
        return hits

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> None:
        await self.inner.set_status(cube_id, ids, status)
        if (index := self._wrote(cube_id)) is not None:
            for node_id in ids:
                if (record := index.records.get(node_id)) is not None:
                    index.records[node_id] = replace(record, status=status)

    async def clear_cube(self, cube_id: str) -> int:
        removed = await self.inner.clear_cube(cube_id)
        self._wrote(cube_id)
        self._cubes.pop(cube_id, None)
        return removed
