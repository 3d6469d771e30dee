"""An in-memory VectorStore: a test double that passes the same contract suite as Milvus.

Shipped so that stage logic (and users' own tests) run without a Milvus: exact cosine
top-k in numpy, the same validation and errors as the Milvus adapter (filters are checked
by ``sinks.vector.expr.search_expression``), and the same filter semantics (a missing
session is ``""``, a missing ``updated_at`` counts as epoch 0, ``in`` on tags is any overlap).
Ties in score are broken by node id, so results never depend on insertion order.

    server = InMemoryVectorServer()          # optional: share collections between stores
    store = InMemoryVectorStore(dim=384, server=server)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from memstream.sinks.ports import CubeRows, Pause, StoreError, VectorHit, VectorQuery, VectorRecord
from memstream.sinks.vector.expr import query_vector, record_answers, search_expression, to_micros
from memstream.topics.models import Status


@dataclass
class _Collection:
    dim: int
    cubes: dict[str, dict[str, VectorRecord]] = field(default_factory=dict)


@dataclass
class InMemoryVectorServer:
    """Collections by name, outliving the stores opened on them (as a Milvus server does):
    a second store on the same collection sees what the first wrote."""

    collections: dict[str, _Collection] = field(default_factory=dict)


def _stored(record: VectorRecord, dim: int) -> VectorRecord:
    """A validated copy as Milvus keeps it: float32 values, no session stored as None."""
    vec = np.asarray(record.vector, dtype=np.float32)
    if vec.shape != (dim,):
        raise StoreError(f"vector of {record.id!r} has shape {vec.shape}, expected ({dim},)")
    if not np.isfinite(vec).all() or not vec.any():
        raise StoreError(f"vector of {record.id!r} is zero or not finite")
    to_micros(record.updated_at)  # an unreadable time is refused at write, as by Milvus
    return replace(
        record,
        vector=[float(x) for x in vec],
        tags=tuple(record.tags),
        session_id=record.session_id or None,
    )


class InMemoryVectorStore:
    """The VectorStore port over a dict of cubes; state lives in ``server``."""

    def __init__(
        self, dim: int, collection: str = "memories", server: InMemoryVectorServer | None = None
    ) -> None:
        if dim <= 0:
            raise StoreError(f"vector dimension must be positive, got {dim}")
        self._dim = dim
        self._name = collection
        self._server = server if server is not None else InMemoryVectorServer()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def collection(self) -> str:
        return self._name

    def _collection(self) -> _Collection:
        found = self._server.collections.setdefault(self._name, _Collection(self._dim))
        if found.dim != self._dim:
            raise StoreError(
                f"collection {self._name} has dimension {found.dim} but the embedder produces "
                f"{self._dim}; use the embedder the collection was built with, or set a new "
                "vector.collection and re-embed the cubes (memstream dump, then load)"
            )
        return found

    def _cube(self, cube_id: str) -> dict[str, VectorRecord]:
        return self._collection().cubes.get(cube_id, {})

    async def ensure_collection(self) -> None:
        self._collection()

    async def close(self) -> None:
        """Nothing to release: the data stays in the server for the next store."""

    async def drop(self) -> None:
        """Drop the whole collection (as ``MilvusVectorStore.drop``)."""
        self._server.collections.pop(self._name, None)

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        cubes = self._collection().cubes
        stored = [_stored(r, self._dim) for r in records]  # validate everything first
        for record in stored:
            cubes.setdefault(record.cube_id, {})[record.id] = record

    async def delete(self, cube_id: str, ids: Sequence[str]) -> None:
        cube = self._cube(cube_id)
        for node_id in ids:
            cube.pop(node_id, None)

    async def get(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]:
        """Stored records among ``ids``, in the order given."""
        cube = self._cube(cube_id)
        return [cube[i] for i in dict.fromkeys(ids) if i in cube]

    async def list_ids(self, cube_id: str) -> list[str]:
        return sorted(self._cube(cube_id))

    async def count(self, cube_id: str | None = None) -> int:
        if cube_id is None:
            return sum(len(c) for c in self._collection().cubes.values())
        return len(self._cube(cube_id))

    async def all_records(self, cube_id: str) -> list[VectorRecord]:
        return list(self._cube(cube_id).values())

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        if between is not None:
            await between()
        return CubeRows.of_records(list(self._cube(cube_id).values()), self._dim)

    async def search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        """Exact top-k by cosine similarity (higher is closer), ties broken by id."""
        target = query_vector(query.vector, self._dim).astype(np.float64)
        # The same validation (and the same errors) as the Milvus expression builder.
        if search_expression(cube_id, query).empty or query.top_k <= 0:
            return []
        candidates = [r for r in self._cube(cube_id).values() if record_answers(r, query)]
        if not candidates:
            return []
        matrix = np.asarray([r.vector for r in candidates], dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(target))
        scores = (matrix @ target) / np.where(norms == 0, 1.0, norms)
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].id))
        return [
            VectorHit(candidates[i].id, float(scores[i]), candidates[i])
            for i in order[: query.top_k]
        ]

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> None:
        cube = self._cube(cube_id)
        for node_id in ids:
            if (record := cube.get(node_id)) is not None:
                cube[node_id] = replace(record, status=status)

    async def clear_cube(self, cube_id: str) -> int:
        return len(self._collection().cubes.pop(cube_id, {}))
