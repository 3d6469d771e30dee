"""A per-cube in-memory index in front of a VectorStore, for single-writer stores.

Milvus Lite is one process per file, so the worker that owns the file sees every
write: an index of a cube's vectors kept in numpy (loaded behind its first use, updated
on each write) stays exact, and searches a 2,000-vector cube in well under a
millisecond, where Lite takes 6-80 ms depending on how its segments were sealed.
The inner store stays the durable copy; every write goes to it first. The least
recently used cubes leave beyond ``max_cubes`` cubes or ``max_vectors`` vectors
(``sinks/lru.py``); an evicted cube is read from the inner store again on its next use.

A cube is loaded at its second use, not its first: when it is used again ``load_after_s``
or more after its first miss (calls within that time are one use: a search asks a cube
several times). Loading ~1,200 vectors takes Lite ~0.8 s of the worker's CPU, in slices
the next searches wait behind, and a cube searched once (the long tail of a deployment's
cubes) would pay it for nothing (docs/benchmarks.md, "searches at 100,000 turns").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

import numpy as np

from memstream.sinks.lru import LRU
from memstream.sinks.ports import CubeRows, Pause, VectorHit, VectorQuery, VectorRecord, VectorStore
from memstream.sinks.vector.expr import query_vector, record_answers, search_expression
from memstream.topics.models import Status

T = TypeVar("T")
LOAD_YIELD_S = 0.25  # the longest a cache load waits for callers' requests before a slice


def _rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 rows as stored, and the inverse of each one's norm (cosine, as the COSINE
    metric of the inner store; a zero row scores 0)."""
    rows = vectors.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1)
    return rows, (1 / np.where(norms == 0, 1, norms)).astype(np.float32)


@dataclass
class _CubeIndex:
    """One cube's records, and their rows stacked into a matrix for search.

    A record is held without its vector, which is its float32 row (a view into the matrix
    once stacked), and put back together when read. A vector costs ~2.3 KB at 384
    dimensions (the row, the record's strings, their places in the dicts), where a tuple of
    Python floats in its record cost 14 KB; and no vector is a list of floats for the cyclic
    collector to walk (9,000 such lists once made a full collection take 50-150 ms). A
    write costs one row, and the next search restacks rows (a copy, ~0.5 ms at 2,000).
    """

    records: dict[str, VectorRecord] = field(default_factory=dict)  # vector ()
    row: dict[str, np.ndarray] = field(default_factory=dict)  # id -> float32 row as stored
    ids: list[str] = field(default_factory=list)
    matrix: np.ndarray | None = None  # rows follow ``ids``; None when stale
    inverse_norms: np.ndarray | None = None
    # per (types, status) asked: which rows have them; emptied by every change
    masks: dict[tuple[frozenset[str] | None, str | None], np.ndarray] = field(
        default_factory=dict)

    @classmethod
    def of(cls, rows: CubeRows) -> _CubeIndex:
        """An index of a cube's rows as read (an id read twice: its last record)."""
        last = {r.id: k for k, r in enumerate(rows.records)}
        index = cls(records={i: replace(rows.records[k], vector=()) for i, k in last.items()})
        index.ids = list(last)
        if index.ids:
            same = len(last) == len(rows.records)
            index._stacked(rows.vectors if same else rows.vectors[list(last.values())])
        return index

    def __len__(self) -> int:
        return len(self.records)

    def _stacked(self, matrix: np.ndarray) -> np.ndarray:
        self.matrix, self.inverse_norms = _rows(matrix)
        self.row = dict(zip(self.ids, self.matrix, strict=True))  # views into the matrix
        return self.matrix

    def record(self, node_id: str) -> VectorRecord:
        """The record with its vector, as the inner store returns it."""
        return replace(self.records[node_id], vector=tuple(self.row[node_id].tolist()))

    def put(self, record: VectorRecord, stored: np.ndarray) -> None:
        self.records[record.id] = replace(record, vector=())
        self.row[record.id] = stored
        self.matrix = None
        self.masks.clear()

    def drop(self, node_id: str) -> None:
        if self.records.pop(node_id, None) is not None:
            self.row.pop(node_id, None)
            self.matrix = None
            self.masks.clear()

    def put_all(self, records: Sequence[VectorRecord]) -> None:
        for record in records:  # stored as float32, like the inner store does
            self.put(record, np.asarray(record.vector, dtype=np.float32))

    def drop_all(self, ids: Sequence[str]) -> None:
        for node_id in ids:
            self.drop(node_id)

    def clear(self) -> None:
        self.records.clear()
        self.row.clear()
        self.matrix = None
        self.masks.clear()

    def mark(self, ids: Sequence[str], status: Status) -> None:
        for node_id in ids:
            if (record := self.records.get(node_id)) is not None:
                self.records[node_id] = replace(record, status=status)
        self.masks.clear()

    def having(self, memory_types: Sequence[str] | None, status: str | None) -> np.ndarray:
        """Which rows (in ``rows()`` order) are of those types and that status (None: any),
        as the search expression selects them; kept until the index changes."""
        key = (None if memory_types is None else frozenset(memory_types), status)
        found = self.masks.get(key)
        if found is None:
            types = key[0]
            found = self.masks[key] = np.fromiter(
                ((types is None or r.memory_type in types)
                 and (status is None or r.status == status)
                 for r in map(self.records.__getitem__, self.ids)),
                dtype=bool, count=len(self.ids))
        return found

    def rows(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Ids, their rows and the inverse of each row's norm."""
        if self.matrix is None:
            self.ids = list(self.records)
            if not self.ids:
                empty = np.empty((0, 0), dtype=np.float32)
                return self.ids, empty, empty
            self._stacked(np.stack([self.row[i] for i in self.ids]))
        assert self.matrix is not None and self.inverse_norms is not None  # noqa: S101
        return self.ids, self.matrix, self.inverse_norms


class CachedVectorStore:
    """The VectorStore port over ``inner``, with exact in-memory search per cached cube."""

    def __init__(self, inner: VectorStore, max_vectors: int = 100_000, max_cubes: int = 1_000,
                 wait_for_load: bool = False, load_after_s: float = 1.0) -> None:
        self.inner = inner
        self.max_vectors = max_vectors
        self.max_cubes = max_cubes
        self.wait_for_load = wait_for_load  # a miss waits for the load instead of falling back
        self.load_after_s = load_after_s  # a miss loads the cube if missed this long before
        self._cubes: LRU[str, _CubeIndex] = LRU(max_cubes, max_weight=max_vectors, weigh=len)
        self._missed: LRU[str, float] = LRU(max_cubes)  # cube -> when it was first missed
        self._loading: dict[str, asyncio.Task[None]] = {}
        # per cube loading now, its writes since the load began, to apply to what it read
        self._pending: dict[str, list[Callable[[_CubeIndex], None]]] = {}
        self._one_load = asyncio.Lock()
        self._calls = 0  # callers' requests to the inner store in flight (loads aside)
        self._quiet = asyncio.Event()  # set while none is
        self._quiet.set()

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

    def _cached(self, cube_id: str, load: bool = False) -> _CubeIndex | None:
        """The cube's index if loaded; otherwise start loading it in the background if this
        is its second use (or ``load``).

        A miss never waits for the load (1,200 vectors take ~300 ms to read from Milvus
        Lite): callers use the inner store meanwhile, and go first: the load reads the
        cube in slices (``all_rows``) and before each waits until no caller's request is
        in flight (at most ``LOAD_YIELD_S``, so a busy store still loads).
        """
        index = self._cubes.get(cube_id)
        if index is not None:
            return index
        if cube_id not in self._loading and (load or self._used_again(cube_id)):
            self._missed.pop(cube_id)
            self._pending[cube_id] = []
            self._loading[cube_id] = asyncio.create_task(self._load(cube_id))
        return None

    def _used_again(self, cube_id: str) -> bool:
        """Whether the cube was first missed ``load_after_s`` or more ago (remembered for the
        ``max_cubes`` cubes missed last); a first miss is remembered."""
        if self.load_after_s <= 0:
            return True
        now = time.monotonic()
        first = self._missed.get(cube_id)
        if first is None:
            self._missed.put(cube_id, now)
            return False
        return now - first >= self.load_after_s

    async def _load(self, cube_id: str) -> None:
        """Read the cube, then apply to what was read every write made since the load
        began, in order: a slice read before a write misses it, one read after holds it
        already, and each write leaves the same index applied once or twice."""
        try:
            async with self._one_load:  # Lite answers one request at a time: no queue
                rows = await self.inner.all_rows(cube_id, self._after_callers)
            index = _CubeIndex.of(rows)
            for write in self._pending[cube_id]:
                write(index)
            self._cubes.put(cube_id, index)
        finally:
            self._loading.pop(cube_id, None)
            self._pending.pop(cube_id, None)

    async def _after_callers(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), LOAD_YIELD_S)

    async def _through(self, call: Awaitable[T]) -> T:
        """A caller's request to the inner store: loads wait while it is in flight."""
        self._calls += 1
        self._quiet.clear()
        try:
            return await call
        finally:
            self._calls -= 1
            if not self._calls:
                self._quiet.set()

    def loaded(self, cube_id: str) -> bool:
        """Whether the cube's vectors are held in memory now."""
        return cube_id in self._cubes

    @property
    def held(self) -> tuple[int, int]:
        """Cubes and vectors held in memory now."""
        return len(self._cubes), self._cubes.weight

    async def warm(self, cube_id: str) -> _CubeIndex | None:
        """Load a cube now (tests, benchmarks, start-up warming)."""
        if self._cached(cube_id, load=True) is None and (
                task := self._loading.get(cube_id)) is not None:
            await task
        return self._cubes.peek(cube_id)

    async def _lookup(self, cube_id: str) -> _CubeIndex | None:
        return await self.warm(cube_id) if self.wait_for_load else self._cached(cube_id)

    def _wrote(self, cube_id: str, write: Callable[[_CubeIndex], None]) -> None:
        """A write the inner store made, applied to the cube's index if held (or kept for
        the load under way)."""
        if (pending := self._pending.get(cube_id)) is not None:
            pending.append(write)
        if (index := self._cubes.peek(cube_id)) is not None:
            write(index)
            self._cubes.reweigh(cube_id)

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        await self._through(self.inner.upsert(records))
        by_cube: dict[str, list[VectorRecord]] = {}
        for record in records:
            by_cube.setdefault(record.cube_id, []).append(record)
        for cube_id, mine in by_cube.items():
            self._wrote(cube_id, partial(_CubeIndex.put_all, records=mine))

    async def delete(self, cube_id: str, ids: Sequence[str]) -> None:
        await self._through(self.inner.delete(cube_id, ids))
        self._wrote(cube_id, partial(_CubeIndex.drop_all, ids=list(ids)))

    async def get(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]:
        if (index := await self._lookup(cube_id)) is None:
            return await self._through(self.inner.get(cube_id, ids))
        return [index.record(i) for i in dict.fromkeys(ids) if i in index.records]

    async def get_rows(self, cube_id: str, ids: Sequence[str]) -> CubeRows:
        """``get``, the vectors apart (``CubeRows``): rows of the cube's matrix as held."""
        if (index := await self._lookup(cube_id)) is None:
            return CubeRows.of_records(await self._through(self.inner.get(cube_id, ids)),
                                       self.dim)
        found = [i for i in dict.fromkeys(ids) if i in index.records]
        if not found:
            return CubeRows.empty(self.dim)
        return CubeRows([index.records[i] for i in found], np.stack([index.row[i] for i in found]))

    async def all_records(self, cube_id: str) -> list[VectorRecord]:
        if (index := await self._lookup(cube_id)) is None:
            return await self._through(self.inner.all_records(cube_id))
        return [index.record(i) for i in index.records]

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        if (index := await self._lookup(cube_id)) is None:
            return await self._through(self.inner.all_rows(cube_id, between))
        ids, matrix, _ = index.rows()
        if not ids:
            return CubeRows.empty(self.dim)
        return CubeRows([index.records[i] for i in ids], matrix.copy())

    async def list_ids(self, cube_id: str) -> list[str]:
        if (index := await self._lookup(cube_id)) is None:
            return await self._through(self.inner.list_ids(cube_id))
        return sorted(index.records)

    async def count(self, cube_id: str | None = None) -> int:
        if cube_id is None:
            return await self._through(self.inner.count(None))
        if (index := await self._lookup(cube_id)) is None:
            return await self._through(self.inner.count(cube_id))
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
            return await self._through(self.inner.search(cube_id, query))
        ids, matrix, inverse_norms = index.rows()
        if not ids:
            return []
        rows = np.flatnonzero(index.having(query.memory_types, query.status))
        scores = ((matrix @ target) * inverse_norms)[rows]
        hits: list[VectorHit] = []
        for at in np.argsort(-scores, kind="stable"):  # ties: in the order of the rows
            record = index.records[ids[rows[at]]]
            if not query.filters or record_answers(record, query):
                hits.append(VectorHit(record.id, float(scores[at]), index.record(record.id)
                                      if query.with_vectors else record))
                if len(hits) == query.top_k:
                    break
        return hits

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> None:
        await self._through(self.inner.set_status(cube_id, ids, status))
        self._wrote(cube_id, partial(_CubeIndex.mark, ids=list(ids), status=status))

    async def clear_cube(self, cube_id: str) -> int:
        removed = await self._through(self.inner.clear_cube(cube_id))
        self._wrote(cube_id, _CubeIndex.clear)
        self._cubes.pop(cube_id)
        return removed
