"""Every GraphStore method, written once on top of "run this Cypher" (``sinks.graph.cypher``).

``FalkorDBGraphStore`` and ``Neo4jGraphStore`` only say how to run a statement; the
port's behaviour (batching, ordering, mapping nodes to flat properties) lives here so the
two adapters cannot drift apart.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from memstream.security.access import CubeAccess
from memstream.sinks.graph import cypher, fulltext
from memstream.sinks.graph.props import (
    cube_params,
    edge_ends,
    group_value,
    many_params,
    node_params,
    node_row,
    pair_params,
    props_to_node,
    unique_edges,
    usage_json,
)
from memstream.sinks.log_refs import CypherLogRefs
from memstream.sinks.ports import (
    Direction,
    Filter,
    FilterField,
    GroupCount,
    StoreError,
    TagNeighbor,
)
from memstream.topics.models import (
    EDGE_TYPES,
    CubeGraph,
    Edge,
    EdgeType,
    MemoryItem,
    MemoryType,
    Status,
    Subgraph,
    UsageRecord,
)

Row = dict[str, Any]
Statement = tuple[str, Mapping[str, object]]
T = TypeVar("T")
DEFAULT_BATCH = 500


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class CypherGraphStore(CypherLogRefs, ABC):
    """GraphStore over a Cypher endpoint; subclasses implement the four runners below."""

    def __init__(self, dialect: cypher.Dialect, batch_size: int = DEFAULT_BATCH) -> None:
        if batch_size < 1:
            raise StoreError("batch_size must be at least 1")
        self.dialect = dialect
        self.batch_size = batch_size

    # -- what an adapter provides -------------------------------------------------------

    @abstractmethod
    async def _read(self, query: str, params: Mapping[str, object]) -> list[Row]: ...

    @abstractmethod
    async def _write(self, query: str, params: Mapping[str, object]) -> list[Row]: ...

    @abstractmethod
    async def _write_all(self, statements: Sequence[Statement]) -> list[list[Row]]:
        """Run statements in order, in one transaction where the backend has them."""

    @abstractmethod
    async def _schema(self, statement: str) -> None:
        """Run one DDL statement outside any data transaction."""

    @abstractmethod
    async def close(self) -> None: ...

    # -- schema -------------------------------------------------------------------------

    async def ensure_schema(self) -> None:
        existing: set[str] = set()
        if self.dialect.indexed_properties is not None:
            for row in await self._read(self.dialect.indexed_properties, {}):
                existing.update(row["properties"])
        for key, statement in self.dialect.schema:
            if key in existing:
                continue
            try:
                await self._schema(statement)
            except StoreError as exc:
                if "already indexed" not in str(exc):  # another worker won the race
                    raise

    # -- nodes --------------------------------------------------------------------------

    async def upsert_nodes(self, cube_id: str, nodes: Sequence[MemoryItem]) -> None:
        rows = [node_row(cube_id, self._own(cube_id, node)) for node in nodes]
        for batch in _chunks(rows, self.batch_size):
            await self._write(cypher.UPSERT_NODES, {"rows": list(batch)})

    async def update_node(self, cube_id: str, node: MemoryItem) -> bool:
        props = node_row(cube_id, self._own(cube_id, node))
        params = {**node_params(cube_id, node.id), "props": props}
        rows = await self._write(cypher.UPDATE_NODE, params)
        return bool(rows and rows[0]["updated"])

    async def record_usage(
        self, cube_id: str, uses: Mapping[str, Sequence[UsageRecord]], keep: int,
        seen: Sequence[MemoryItem] = (),
    ) -> int:
        wanted = [i for i, records in uses.items() if records]  # keys: unique already
        wanted_set = set(wanted)
        known = {n.id: n for n in seen if n.id in wanted_set}
        updated = 0
        if known:  # one write, no read: the histories as the caller saw them, if unchanged
            rows = [
                {"node_key": cypher.node_key(cube_id, n.id), "id": n.id,
                 "expected": usage_json(n.metadata.usage),
                 "usage": usage_json((*n.metadata.usage, *uses[n.id])[-keep:])}
                for n in known.values()
            ]
            result = await self._write(cypher.SET_USAGE_IF_UNCHANGED,
                                       {"cube_id": cube_id, "rows": rows})
            done = set(result[0]["updated"]) if result else set()
            updated += len(done)
            wanted = [i for i in wanted if i not in done]
        if not wanted:
            return updated
        rows = [
            {"node_key": cypher.node_key(cube_id, n.id), "id": n.id,
             "usage": usage_json((*n.metadata.usage, *uses[n.id])[-keep:])}
            for n in await self.get_nodes(cube_id, wanted)
        ]
        if not rows:
            return updated
        result = await self._write(cypher.SET_USAGE, {"cube_id": cube_id, "rows": rows})
        return updated + (int(result[0]["updated"]) if result else 0)

    async def delete_nodes(self, cube_id: str, ids: Sequence[str]) -> int:
        deleted = 0
        for batch in _chunks(_unique(ids), self.batch_size):
            rows = await self._write(cypher.DELETE_NODES, many_params(cube_id, batch))
            deleted += int(rows[0]["deleted"]) if rows else 0
        return deleted

    async def get_node(self, cube_id: str, node_id: str) -> MemoryItem | None:
        found = await self.get_nodes(cube_id, [node_id])
        return found[0] if found else None

    async def get_nodes(self, cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        wanted = _unique(ids)
        found: dict[str, MemoryItem] = {}
        for batch in _chunks(wanted, self.batch_size):
            rows = await self._read(cypher.GET_NODES, many_params(cube_id, batch))
            for row in rows:
                node = props_to_node(row["props"])
                found[node.id] = node
        return [found[i] for i in wanted if i in found]

    # -- edges --------------------------------------------------------------------------

    async def add_edges(self, cube_id: str, edges: Sequence[Edge]) -> None:
        by_type: dict[EdgeType, list[dict[str, object]]] = {}
        for e in edges:
            row = {**edge_ends(cube_id, e.source, e.target), "weight": e.weight, "reason": e.reason}
            by_type.setdefault(cypher.edge_type(e.type), []).append(row)
        for type_, rows in by_type.items():
            query = cypher.add_edges(type_)
            for batch in _chunks(rows, self.batch_size):
                await self._write(query, {"cube_id": cube_id, "rows": list(batch)})

    async def delete_edge(self, cube_id: str, source: str, target: str, type: EdgeType) -> bool:
        rows = await self._write(cypher.delete_edge(type), pair_params(cube_id, source, target))
        return bool(rows and rows[0]["deleted"])

    async def edge_exists(
        self, cube_id: str, source: str, target: str, type: EdgeType, direction: Direction = "out"
    ) -> bool:
        params = pair_params(cube_id, source, target)
        rows = await self._read(cypher.edge_exists(type, direction), params)
        return bool(rows and rows[0]["found"])

    async def missing_edges(self, cube_id: str, edges: Sequence[Edge]) -> list[Edge]:
        found: set[tuple[str, str, str]] = set()
        by_type: dict[EdgeType, list[dict[str, object]]] = {}
        for e in edges:
            by_type.setdefault(e.type, []).append(edge_ends(cube_id, e.source, e.target))
        for type_, rows in by_type.items():
            for batch in _chunks(rows, self.batch_size):
                hits = await self._read(cypher.existing_edges(type_),
                                        {"cube_id": cube_id, "rows": list(batch)})
                found.update((r["source"], r["target"], type_) for r in hits)
        return [e for e in edges if (e.source, e.target, e.type) not in found]

    async def edges_of(
        self,
        cube_id: str,
        node_id: str,
        types: Sequence[EdgeType] | None = None,
        direction: Direction = "any",
    ) -> list[Edge]:
        params = node_params(cube_id, node_id)
        if types is not None:
            params["types"] = [cypher.edge_type(t) for t in types]
        rows = await self._read(cypher.edges_of(direction, types is not None), params)
        return unique_edges(rows)

    async def edges_from(
        self, cube_id: str, ids: Sequence[str], types: Sequence[EdgeType]
    ) -> list[Edge]:
        wanted = [cypher.edge_type(t) for t in types]
        rows: list[Row] = []
        if wanted:
            for batch in _chunks(_unique(ids), self.batch_size):
                rows += await self._read(cypher.EDGES_FROM,
                                         {**many_params(cube_id, batch), "types": wanted})
        return unique_edges(rows)

    async def children(self, cube_id: str, node_id: str) -> list[MemoryItem]:
        rows = await self._read(cypher.CHILDREN, node_params(cube_id, node_id))
        return [props_to_node(r["props"]) for r in rows]

    async def redirect_edges(
        self, cube_id: str, from_ids: Sequence[str], to_id: str, exclude: Sequence[EdgeType]
    ) -> int:
        sources = [i for i in _unique(from_ids) if i != to_id]
        if not sources:
            return 0
        skip = {cypher.edge_type(t) for t in exclude}
        rows = await self._read(cypher.EDGE_TYPES_OF, many_params(cube_id, sources))
        present = {r["type"] for r in rows}
        types = [t for t in EDGE_TYPES if t in present and t not in skip]
        params = {**many_params(cube_id, sources), **node_params(cube_id, to_id)}
        statements: list[Statement] = [
            (cypher.redirect_edges(t, out), params) for t in types for out in (True, False)
        ]
        results = await self._write_all(statements)
        return sum(int(r[0]["moved"]) for r in results if r)

    # -- reads over a cube -------------------------------------------------------------

    async def neighbors_by_tags(
        self,
        cube_id: str,
        tags: Sequence[str],
        min_overlap: int = 1,
        exclude_ids: Sequence[str] = (),
        limit: int = 20,
    ) -> list[TagNeighbor]:
        if not tags or limit <= 0:
            return []
        params = {
            **cube_params(cube_id),
            "tags": _unique(tags),
            "min_overlap": max(int(min_overlap), 1),
            "exclude_ids": list(exclude_ids),
            "limit": int(limit),
        }
        rows = await self._read(cypher.NEIGHBORS_BY_TAGS, params)
        return [TagNeighbor(props_to_node(r["props"]), int(r["overlap"])) for r in rows]

    async def subgraph(
        self, cube_id: str, center_id: str, depth: int = 2, center_status: Status = "activated"
    ) -> Subgraph:
        # Two round trips: the edges, then every node with the center first (its status
        # decides; an unknown or differently-filed center costs one wasted edge read).
        rows = []
        if depth > 0:
            rows = await self._read(cypher.subgraph_edges(depth), node_params(cube_id, center_id))
        edges = unique_edges(rows)
        others = sorted(({e.source for e in edges} | {e.target for e in edges}) - {center_id})
        nodes = await self.get_nodes(cube_id, [center_id, *others])
        if not nodes or nodes[0].id != center_id or nodes[0].metadata.status != center_status:
            return Subgraph(core_id=None)
        return Subgraph(core_id=center_id, nodes=tuple(nodes), edges=tuple(edges))

    async def find_nodes(
        self, cube_id: str, filters: Sequence[Filter] = (), limit: int | None = None
    ) -> list[MemoryItem]:
        where, params = cypher.compile_filters(filters, self.dialect)
        params.update(cube_params(cube_id))
        if limit is not None:
            if limit <= 0:
                return []
            params["limit"] = int(limit)
        rows = await self._read(cypher.find_nodes(where, limit is not None), params)
        return [props_to_node(r["props"]) for r in rows]

    async def nodes_by_tags(
        self, cube_id: str, tags: Sequence[str], filters: Sequence[Filter] = (),
        min_overlap: int = 1, limit: int = 20,
    ) -> list[MemoryItem]:
        if not tags or limit <= 0:
            return []
        where, params = cypher.compile_filters(filters, self.dialect)
        params.update(cube_params(cube_id))
        params.update({"tags": _unique(tags), "min_overlap": max(int(min_overlap), 1),
                       "limit": int(limit)})
        rows = await self._read(cypher.nodes_by_tags(where), params)
        return [props_to_node(r["props"]) for r in rows]

    async def keyword_search(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[MemoryItem, float]]:
        rows = await self._keyword_rows(cypher.keyword_nodes, cube_id, text, limit,
                                        memory_types, filters)
        return [(props_to_node(r["props"]), float(r["score"])) for r in rows]

    async def keyword_ids(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[str, float]]:
        rows = await self._keyword_rows(cypher.keyword_ids, cube_id, text, limit,
                                        memory_types, filters)
        return [(str(r["id"]), float(r["score"])) for r in rows]

    async def _keyword_rows(
        self, query: Callable[[cypher.Dialect, str], str], cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter],
    ) -> list[Row]:
        terms = fulltext.query_terms(text)
        if not terms or limit <= 0 or not memory_types:
            return []
        where, params = cypher.compile_filters(filters, self.dialect)
        params.update(cube_params(cube_id))
        params.update({
            "text": fulltext.query_string(cypher.cube_key(cube_id), terms,
                                          self.dialect.fulltext_syntax),
            "memory_types": list(dict.fromkeys(memory_types)),
            "limit": int(limit),
        })
        return await self._read(query(self.dialect, where), params)

    async def count_by(
        self, cube_id: str, fields: Sequence[FilterField], filters: Sequence[Filter] = ()
    ) -> list[GroupCount]:
        where, params = cypher.compile_filters(filters, self.dialect)
        params.update(cube_params(cube_id))
        query, aliases = cypher.count_by(fields, where)
        rows = await self._read(query, params)
        groups = [
            GroupCount(
                {f: group_value(f, r[a]) for f, a in zip(fields, aliases, strict=True)},
                int(r["count"]),
            )
            for r in rows
        ]
        return sorted(groups, key=lambda g: (-g.count, [repr(v) for v in g.values.values()]))

    async def count_by_type(
        self, cube_id: str, status: Status | None = "activated"
    ) -> dict[str, int]:
        params = cube_params(cube_id)
        if status is not None:
            params["status"] = status
        rows = await self._read(cypher.count_by_type(status is not None), params)
        return {r["memory_type"]: int(r["count"]) for r in rows}

    async def all_of_type(
        self, cube_id: str, memory_type: MemoryType, status: Status | None = "activated",
        skip: int = 0, limit: int | None = None,
    ) -> list[MemoryItem]:
        params = {**cube_params(cube_id), "memory_type": memory_type}
        if status is not None:
            params["status"] = status
        query = cypher.all_of_type(status is not None)
        if skip or limit is not None:  # a page: the store sorts, only the page is sent back
            query += cypher.page(skip, limit)
        rows = await self._read(query, params)
        return [props_to_node(r["props"]) for r in rows]

    async def remove_oldest(self, cube_id: str, memory_type: MemoryType, keep: int) -> list[str]:
        if keep < 0:
            raise StoreError(f"keep must be >= 0, got {keep}")
        params = {**cube_params(cube_id), "memory_type": memory_type, "keep": int(keep)}
        rows = await self._write(cypher.REMOVE_OLDEST, params)
        return [r["removed"] for r in rows]

    async def beyond_capacity(self, cube_id: str, memory_type: MemoryType,
                              keep: int) -> list[str]:
        if keep < 0:
            raise StoreError(f"keep must be >= 0, got {keep}")
        params = {**cube_params(cube_id), "memory_type": memory_type, "keep": int(keep)}
        return [r["id"] for r in await self._read(cypher.BEYOND_CAPACITY, params)]

    async def optimization_candidates(
        self, cube_id: str, memory_type: MemoryType, limit: int = 1000
    ) -> list[MemoryItem]:
        if memory_type == "WorkingMemory" or limit <= 0:
            return []
        params = {**cube_params(cube_id), "memory_type": memory_type, "limit": int(limit)}
        rows = await self._read(cypher.OPTIMIZATION_CANDIDATES, params)
        return [props_to_node(r["props"]) for r in rows]

    # -- whole cubes --------------------------------------------------------------------

    async def export_cube(self, cube_id: str) -> CubeGraph:
        node_rows = await self._read(cypher.ALL_NODES, cube_params(cube_id))
        edge_rows = await self._read(cypher.CUBE_EDGES, cube_params(cube_id))
        nodes = tuple(props_to_node(r["props"]) for r in node_rows)
        return CubeGraph(cube_id=cube_id, nodes=nodes, edges=tuple(unique_edges(edge_rows)))

    async def import_cube(self, graph: CubeGraph) -> None:
        """Upsert the nodes, then MERGE the edges (existing cube content is kept)."""
        await self.upsert_nodes(graph.cube_id, graph.nodes)
        await self.add_edges(graph.cube_id, graph.edges)

    async def clear_cube(self, cube_id: str) -> int:
        total = 0
        while True:
            rows = await self._write(
                cypher.CLEAR_CUBE_BATCH, {**cube_params(cube_id), "batch": 10 * self.batch_size}
            )
            deleted = int(rows[0]["deleted"]) if rows else 0
            total += deleted
            if deleted == 0:
                await self._write(cypher.CLEAR_LLM_ANSWERS, {"cube_id": cube_id})
                await self._write(cypher.CLEAR_CUBE_USE, {"cube_id": cube_id})
                return total

    async def list_cubes(self) -> list[str]:
        rows = await self._read(cypher.LIST_CUBES, {})
        return [r["cube_id"] for r in rows if r["cube_id"] is not None]

    async def recent_cubes(self, limit: int) -> list[str]:
        if limit <= 0:
            return []
        rows = await self._read(cypher.RECENT_CUBES, {"limit": int(limit)})
        return [r["cube_id"] for r in rows]

    async def mark_used(self, cube_id: str, at: datetime) -> None:
        await self._write(cypher.MARK_CUBE_USED, {**cube_params(cube_id), "at": cypher.iso(at)})

    async def get_cube_access(self, cube_id: str) -> CubeAccess | None:
        rows = await self._read(cypher.GET_CUBE_ACCESS, {"cube_id": cube_id})
        if not rows:
            return None
        row = rows[0]
        return CubeAccess(cube_id=cube_id, owner=row["owner"],
                          readers=tuple(json.loads(row["readers"] or "[]")),
                          writers=tuple(json.loads(row["writers"] or "[]")))

    async def set_cube_access(self, access: CubeAccess) -> None:
        await self._write(cypher.SET_CUBE_ACCESS, {
            "cube_id": access.cube_id, "owner": access.owner,
            "readers": json.dumps(list(access.readers)),
            "writers": json.dumps(list(access.writers))})

    async def llm_spend(self, cube_id: str, period: str) -> dict[str, int]:
        params = {"cube_id": cube_id, "period": period}
        await self._write(cypher.DROP_OLD_LLM_SPEND, params)
        rows = await self._read(cypher.LLM_SPEND, params)
        return {r["call"]: int(r["tokens"]) for r in rows}

    async def record_llm_spend(self, cube_id: str, period: str, call: str, tokens: int) -> None:
        await self._write(cypher.RECORD_LLM_SPEND, {"cube_id": cube_id, "period": period,
                                                    "call": call, "tokens": tokens})

    async def llm_answer(self, cube_id: str, call: str) -> str | None:
        rows = await self._read(cypher.LLM_ANSWER, {"cube_id": cube_id, "call": call})
        return str(rows[0]["answer"]) if rows else None

    async def record_llm_answer(self, cube_id: str, call: str, answer: str) -> None:
        await self._write(cypher.RECORD_LLM_ANSWER, {"cube_id": cube_id, "call": call,
                                                     "answer": answer})

    async def drop_llm_answers(self, cube_id: str, calls: Sequence[str]) -> None:
        if calls:
            await self._write(cypher.DROP_LLM_ANSWERS, {"cube_id": cube_id,
                                                        "calls": list(calls)})

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _own(cube_id: str, node: MemoryItem) -> MemoryItem:
        if node.metadata.cube_id != cube_id:
            raise StoreError(
                f"node {node.id!r} belongs to cube {node.metadata.cube_id!r}, not {cube_id!r}"
            )
        return node
