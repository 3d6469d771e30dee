"""Typed ports of the storage layer. Every operation is scoped to one cube.

Stages depend on these protocols only; adapters (FalkorDB, Neo4j, Milvus) are
picked once in ``sinks.graph.factory`` / ``sinks.vector.factory``. A sink knows nothing of Kafka.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from memstream.history.log_index import LogRef, LogRefQuery
from memstream.security.access import CubeAccess
from memstream.topics.models import (
    CubeGraph,
    Edge,
    EdgeType,
    MemoryItem,
    MemoryType,
    Status,
    Subgraph,
    UsageRecord,
)

FilterOp = Literal["=", "!=", "in", "contains", "<", "<=", ">", ">="]
# Fields a filter may name. Anything else is rejected before a query is built,
# and values always travel as query parameters.
FilterField = Literal[
    "id",
    "memory",
    "user_id",
    "session_id",
    "memory_type",
    "status",
    "type",
    "key",
    "tags",
    "entities",
    "hierarchy_level",
    "source",
    "visibility",
    "confidence",
    "created_at",
    "updated_at",
    "memory_time",
    "frozen",
]
FILTER_FIELDS: frozenset[str] = frozenset(FilterField.__args__)  # type: ignore[attr-defined]
# Fields holding a time: a filter on one compares times (an ISO-8601 string with a timezone).
TIME_FIELDS: frozenset[str] = frozenset({"created_at", "updated_at", "memory_time"})
Direction = Literal["out", "in", "any"]


class StoreError(RuntimeError):
    """A store rejected an operation (bad filter, dimension mismatch, unreachable server)."""


class StoreUnavailable(StoreError):
    """The store could not be reached (connection refused or lost, server loading).

    An outage, not a bad event: a stage pauses and retries instead of dead-lettering."""


@dataclass(frozen=True, slots=True)
class Filter:
    """A metadata condition. ``contains`` tests list membership (tags, entities) or a substring."""

    field: FilterField
    op: FilterOp
    value: object

    def __post_init__(self) -> None:
        if self.field not in FILTER_FIELDS:
            raise StoreError(f"unknown filter field {self.field!r}")
        if self.op == "in" and not isinstance(self.value, list | tuple | set | frozenset):
            got = type(self.value).__name__
            raise StoreError(f"filter {self.field} 'in' needs a list, got {got}")


@dataclass(frozen=True, slots=True)
class TagNeighbor:
    node: MemoryItem
    overlap: int


@dataclass(frozen=True, slots=True)
class GroupCount:
    values: dict[str, object]
    count: int


@runtime_checkable
class GraphStore(Protocol):
    """The graph of memory nodes and typed edges."""

    async def ensure_schema(self) -> None:
        """Create indexes / constraints idempotently."""

    async def close(self) -> None: ...

    async def upsert_nodes(self, cube_id: str, nodes: Sequence[MemoryItem]) -> None:
        """Insert or replace nodes by id (batched, idempotent)."""

    async def update_node(self, cube_id: str, node: MemoryItem) -> bool:
        """Replace an existing node's text and metadata; False when it does not exist."""

    async def record_usage(
        self, cube_id: str, uses: Mapping[str, Sequence[UsageRecord]], keep: int,
        seen: Sequence[MemoryItem] = (),
    ) -> int:
        """Append each node's records (``uses``: node id -> records, oldest first) to the
        usage history of the existing ones (the newest ``keep`` kept), changing nothing else;
        returns how many nodes were updated. ``seen``: nodes as the caller last read them;
        where a history has not changed since, no read is needed (a changed one is read
        again: no use is ever lost)."""

    async def delete_nodes(self, cube_id: str, ids: Sequence[str]) -> int:
        """Delete nodes with their edges; returns how many existed."""

    async def get_node(self, cube_id: str, node_id: str) -> MemoryItem | None: ...

    async def get_nodes(self, cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        """Existing nodes among ``ids``, in the order given."""

    async def add_edges(self, cube_id: str, edges: Sequence[Edge]) -> None:
        """MERGE edges (idempotent: one edge per source, target and type)."""

    async def keyword_search(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[MemoryItem, float]]:
        """Full-text (BM25-style) recall: the cube's activated nodes of ``memory_types``
        sharing words with ``text`` (``sinks.graph.fulltext`` tokenizes both sides, Chinese
        segmented), best first, at most ``limit``; none when ``text`` has no words."""

    async def keyword_ids(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[str, float]]:
        """``keyword_search``'s ids and scores, in its order, without reading the nodes (a
        search reads only those it returns)."""
        ...

    async def delete_edge(self, cube_id: str, source: str, target: str, type: EdgeType) -> bool: ...

    async def edge_exists(
        self, cube_id: str, source: str, target: str, type: EdgeType, direction: Direction = "out"
    ) -> bool: ...

    async def missing_edges(self, cube_id: str, edges: Sequence[Edge]) -> list[Edge]:
        """Those of ``edges`` (source -[type]-> target) not in the cube, in the order given.
        One read per edge type, however many edges."""

    async def edges_of(
        self,
        cube_id: str,
        node_id: str,
        types: Sequence[EdgeType] | None = None,
        direction: Direction = "any",
    ) -> list[Edge]: ...

    async def edges_from(
        self, cube_id: str, ids: Sequence[str], types: Sequence[EdgeType]
    ) -> list[Edge]:
        """Edges of ``types`` going out of any of ``ids`` (to nodes of the cube), in
        (source, target, type) order: one read for many nodes, where ``edges_of`` takes one."""

    async def children(self, cube_id: str, node_id: str) -> list[MemoryItem]:
        """Targets of ``PARENT`` edges from ``node_id``."""

    async def redirect_edges(
        self, cube_id: str, from_ids: Sequence[str], to_id: str, exclude: Sequence[EdgeType]
    ) -> int:
        """Move edges of ``from_ids`` (except ``exclude`` types) onto ``to_id``; returns count."""

    async def neighbors_by_tags(
        self,
        cube_id: str,
        tags: Sequence[str],
        min_overlap: int = 1,
        exclude_ids: Sequence[str] = (),
        limit: int = 20,
    ) -> list[TagNeighbor]:
        """Activated non-WorkingMemory, non-reasoning nodes sharing tags, most overlap first."""

    async def subgraph(
        self, cube_id: str, center_id: str, depth: int = 2, center_status: Status = "activated"
    ) -> Subgraph:
        """The center and its neighbours up to ``depth``; empty if the center's status differs."""

    async def find_nodes(
        self, cube_id: str, filters: Sequence[Filter] = (), limit: int | None = None
    ) -> list[MemoryItem]: ...

    async def nodes_by_tags(
        self, cube_id: str, tags: Sequence[str], filters: Sequence[Filter] = (),
        min_overlap: int = 1, limit: int = 20,
    ) -> list[MemoryItem]:
        """Nodes matching ``filters`` that carry at least ``min_overlap`` of ``tags``: the
        most shared tags first, then the latest (``updated_at``, then ``id``, descending)."""

    async def count_by(
        self, cube_id: str, fields: Sequence[FilterField], filters: Sequence[Filter] = ()
    ) -> list[GroupCount]: ...

    async def count_by_type(
        self, cube_id: str, status: Status | None = "activated"
    ) -> dict[str, int]: ...

    async def all_of_type(
        self, cube_id: str, memory_type: MemoryType, status: Status | None = "activated",
        skip: int = 0, limit: int | None = None,
    ) -> list[MemoryItem]:
        """Nodes of a type, newest ``updated_at`` first (``skip`` and ``limit``: one page)."""

    async def remove_oldest(self, cube_id: str, memory_type: MemoryType, keep: int) -> list[str]:
        """Delete activated nodes of a type older than the newest ``keep`` (FIFO by updated_at)."""

    async def beyond_capacity(self, cube_id: str, memory_type: MemoryType,
                              keep: int) -> list[str]:
        """The ids ``remove_oldest`` would delete, newest first; nothing is deleted. Only the
        ids are read: a full cube checks this after every batch."""

    async def optimization_candidates(
        self, cube_id: str, memory_type: MemoryType, limit: int = 1000
    ) -> list[MemoryItem]:
        """Activated nodes of a (non-working) type without a PARENT edge pointing at them."""

    async def export_cube(self, cube_id: str) -> CubeGraph: ...

    async def import_cube(self, graph: CubeGraph) -> None: ...

    async def clear_cube(self, cube_id: str) -> int: ...

    async def list_cubes(self) -> list[str]: ...

    async def recent_cubes(self, limit: int) -> list[str]:
        """At most ``limit`` cubes holding memories, the most recently changed or searched
        first (by their newest node's ``updated_at`` or their last ``mark_used``)."""
        ...

    async def mark_used(self, cube_id: str, at: datetime) -> None:
        """Note that a search of the cube was answered at ``at`` (``recent_cubes``: a worker
        starting warms the cubes searched last, not only those changed last). A cube that
        holds no memory (erased meanwhile) is not noted."""
        ...

    async def get_cube_access(self, cube_id: str) -> CubeAccess | None:
        """The cube's access record (owner, shares), or None if it has none yet."""
        ...

    async def set_cube_access(self, access: CubeAccess) -> None:
        """Write the cube's access record (an upsert)."""
        ...

    async def llm_spend(self, cube_id: str, period: str) -> dict[str, int]:
        """LLM tokens the cube spent in ``period``, per call key; drops earlier periods."""
        ...

    async def record_llm_spend(self, cube_id: str, period: str, call: str, tokens: int) -> None:
        """Record (upsert) the tokens of one call of the cube in ``period``."""
        ...

    async def add_log_refs(self, refs: Sequence[LogRef]) -> None:
        """Record where records of a cube sit in the log (kept once per ref; no text)."""
        ...

    async def drop_log_refs(self, cube_id: str) -> int:
        """Forget where the cube's records sit (its erasure); returns how many refs."""
        ...

    async def log_refs(self, query: LogRefQuery) -> list[LogRef]:
        """The refs answering ``query``, in log order (a prefix query: matching node ids)."""
        ...

    async def llm_answer(self, cube_id: str, call: str) -> str | None:
        """The model's recorded answer (JSON) to the cube's question ``call``, if any."""
        ...

    async def record_llm_answer(self, cube_id: str, call: str, answer: str) -> None:
        """Record (upsert) the answer to one question; erased with the cube."""
        ...

    async def drop_llm_answers(self, cube_id: str, calls: Sequence[str]) -> None:
        """Forget the answers to these questions (those not on record: nothing)."""
        ...


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """A node's embedding plus the metadata that vector filters need."""

    id: str
    cube_id: str
    user_id: str
    memory_type: MemoryType
    status: Status
    vector: Sequence[float]
    key: str = ""
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    hierarchy_level: str = "fact"
    type: str = "fact"
    updated_at: str = ""  # ISO-8601 UTC


Pause = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CubeRows:
    """Every record of one cube with its vector apart: ``records[i]`` (its ``vector`` empty)
    has the float32 row ``vectors[i]`` as stored. A cache loads a cube this way: no vector
    becomes a list of Python floats (1,200 of them took 125 ms of the event loop)."""

    records: list[VectorRecord]
    vectors: np.ndarray  # (len(records), dim), float32

    @classmethod
    def empty(cls, dim: int) -> CubeRows:
        return cls([], np.empty((0, dim), np.float32))

    @classmethod
    def of_records(cls, records: Sequence[VectorRecord], dim: int) -> CubeRows:
        """Records that carry their vectors, the vectors taken apart."""
        vectors = np.asarray([r.vector for r in records], dtype=np.float32)
        return cls([replace(r, vector=()) for r in records], vectors.reshape(len(records), dim))

    @classmethod
    def joined(cls, parts: Sequence[CubeRows]) -> CubeRows:
        """Parts read one after another, as one (``parts`` not empty)."""
        if len(parts) == 1:
            return parts[0]
        return cls([r for p in parts for r in p.records],
                   np.concatenate([p.vectors for p in parts]))


@dataclass(frozen=True, slots=True)
class VectorHit:
    id: str
    score: float  # cosine similarity, higher is closer
    record: VectorRecord


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """A nearest-vector search within one cube: every store (and ``MemoryStore``) reads the
    same arguments, so a caller builds them once and a wrapper passes them on whole."""

    vector: Sequence[float]
    top_k: int
    memory_types: Sequence[MemoryType] | None = None  # None: any type; empty: none at all
    status: Status | None = "activated"  # None: any status
    filters: Sequence[Filter] = ()
    # False: the hits' records may come without their vectors (empty), for a search that
    # needs ids and scores only; a store that holds them in memory may still return them
    with_vectors: bool = True


@runtime_checkable
class VectorStore(Protocol):
    """Embeddings keyed by node id, searchable within a cube."""

    @property
    def dim(self) -> int: ...

    async def ensure_collection(self) -> None:
        """Create the collection if missing; raise StoreError when its dimension differs."""

    async def close(self) -> None: ...

    async def upsert(self, records: Sequence[VectorRecord]) -> None: ...

    async def delete(self, cube_id: str, ids: Sequence[str]) -> None: ...

    async def get(self, cube_id: str, ids: Sequence[str]) -> list[VectorRecord]: ...

    async def list_ids(self, cube_id: str) -> list[str]:
        """Every id with a vector in the cube (repair and dump find orphans with it)."""

    async def count(self, cube_id: str | None = None) -> int: ...

    async def all_records(self, cube_id: str) -> list[VectorRecord]:
        """Every record of one cube (with vectors)."""
        ...

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        """Every record of one cube, its vectors as one float32 matrix (cache loads). A
        store that reads a cube in several requests awaits ``between`` before each, so a
        caller can let other reads go first."""
        ...

    async def search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        """The ``query.top_k`` records of the cube closest to ``query.vector`` that pass its
        types, status and filters, closest first."""

    async def set_status(self, cube_id: str, ids: Sequence[str], status: Status) -> None: ...

    async def clear_cube(self, cube_id: str) -> int: ...
