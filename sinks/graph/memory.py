"""An in-memory GraphStore: a test double that passes the same contract suite as the Cypher
adapters (FalkorDB, Neo4j).

Shipped so that stage logic (and users' own tests) run without a graph server. Filters are
refused by the same compiler as the Cypher adapters (``sinks.graph.cypher.compile_filters``) and
evaluated by ``sinks.filtering``; orderings and tie-breaks are those of ``sinks.graph.cypher``;
keyword search scores BM25 over the words ``sinks.graph.fulltext`` indexes.

    store = InMemoryGraphStore()
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime

from memstream.security.access import CubeAccess
from memstream.sinks.filtering import field_value, matches_all
from memstream.sinks.graph import cypher, fulltext
from memstream.sinks.log_refs import InMemoryLogRefs
from memstream.sinks.ports import (
    FILTER_FIELDS,
    TIME_FIELDS,
    Direction,
    Filter,
    FilterField,
    GroupCount,
    StoreError,
    TagNeighbor,
)
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

_EdgeKey = tuple[str, str, str]
_BM25_K1 = 1.2
_BM25_B = 0.75


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _newest_first(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    """``ORDER BY n.updated_at DESC, n.id`` (times compared as instants)."""
    by_id = sorted(items, key=lambda n: n.id)
    return sorted(by_id, key=lambda n: n.metadata.updated_at, reverse=True)


def _oldest_created_first(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    return sorted(items, key=lambda n: (n.metadata.created_at, n.id))


def _checked(filters: Sequence[Filter]) -> Sequence[Filter]:
    """Refuse what the Cypher adapters refuse, before any node is looked at."""
    cypher.compile_filters(filters, cypher.FALKORDB)
    return filters


class InMemoryGraphStore(InMemoryLogRefs):
    """The GraphStore port over dicts: per cube, nodes by id and edges by (source, target,
    type). Models are frozen, so they are stored and returned as given."""

    def __init__(self) -> None:
        self._nodes: dict[str, dict[str, MemoryItem]] = {}
        self._edges: dict[str, dict[_EdgeKey, Edge]] = {}
        self._access: dict[str, CubeAccess] = {}
        self._spend: dict[str, tuple[str, dict[str, int]]] = {}  # cube -> (period, calls)
        self._answers: dict[str, dict[str, str]] = {}  # cube -> call -> answer
        self._used: dict[str, datetime] = {}  # cube -> its last search (``mark_used``)

    async def ensure_schema(self) -> None:
        """Nothing to create."""

    async def close(self) -> None:
        """Nothing to release."""

    # -- helpers ------------------------------------------------------------------------

    def _cube(self, cube_id: str) -> dict[str, MemoryItem]:
        return self._nodes.get(cube_id, {})

    def _cube_edges(self, cube_id: str) -> dict[_EdgeKey, Edge]:
        return self._edges.get(cube_id, {})

    @staticmethod
    def _own(cube_id: str, node: MemoryItem) -> MemoryItem:
        if node.metadata.cube_id != cube_id:
            raise StoreError(
                f"node {node.id!r} belongs to cube {node.metadata.cube_id!r}, not {cube_id!r}"
            )
        return node

    def _select(
        self, cube_id: str, keep: Callable[[MemoryItem], bool]
    ) -> list[MemoryItem]:
        return [n for n in self._cube(cube_id).values() if keep(n)]

    def _drop_nodes(self, cube_id: str, ids: Iterable[str]) -> int:
        nodes, edges = self._cube(cube_id), self._cube_edges(cube_id)
        gone = {i for i in ids if nodes.pop(i, None) is not None}
        for key in [k for k in edges if k[0] in gone or k[1] in gone]:
            del edges[key]
        if not nodes:
            self._nodes.pop(cube_id, None)
            self._edges.pop(cube_id, None)
        return len(gone)

    # -- nodes --------------------------------------------------------------------------

    async def upsert_nodes(self, cube_id: str, nodes: Sequence[MemoryItem]) -> None:
        checked = [self._own(cube_id, n) for n in nodes]  # refuse the batch before writing
        if checked:
            cube = self._nodes.setdefault(cube_id, {})
            cube.update((n.id, n) for n in checked)

    async def update_node(self, cube_id: str, node: MemoryItem) -> bool:
        self._own(cube_id, node)
        cube = self._cube(cube_id)
        if node.id not in cube:
            return False
        cube[node.id] = node
        return True

    async def record_usage(
        self, cube_id: str, uses: Mapping[str, Sequence[UsageRecord]], keep: int,
        seen: Sequence[MemoryItem] = (),
    ) -> int:
        cube = self._cube(cube_id)
        wanted = [i for i, records in uses.items() if records]  # keys: unique already
        asked = set(wanted)
        known = {n.id: n for n in seen if n.id in asked}
        updated = 0
        for node_id, as_seen in known.items():  # compare-and-set on the history as seen
            current = cube.get(node_id)
            if current is not None and current.metadata.status == "expired":
                wanted.remove(node_id)  # a tombstone: no use lands on it (sinks/graph/cypher.py)
                continue
            if current is not None and current.metadata.usage == as_seen.metadata.usage:
                usage = (*current.metadata.usage, *uses[node_id])[-keep:]
                cube[node_id] = current.evolve(usage=usage)
                updated += 1
                wanted.remove(node_id)
        if not wanted:
            return updated
        for node in await self.get_nodes(cube_id, wanted):
            if (current := cube.get(node.id)) is not None and current.metadata.status != "expired":
                cube[node.id] = current.evolve(
                    usage=(*node.metadata.usage, *uses[node.id])[-keep:])
                updated += 1
        return updated

    async def delete_nodes(self, cube_id: str, ids: Sequence[str]) -> int:
        return self._drop_nodes(cube_id, _unique(ids))

    async def get_node(self, cube_id: str, node_id: str) -> MemoryItem | None:
        return self._cube(cube_id).get(node_id)

    async def get_nodes(self, cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        cube = self._cube(cube_id)
        return [cube[i] for i in _unique(ids) if i in cube]

    # -- edges --------------------------------------------------------------------------

    async def add_edges(self, cube_id: str, edges: Sequence[Edge]) -> None:
        nodes = self._cube(cube_id)
        for e in edges:
            cypher.edge_type(e.type)
            if e.source in nodes and e.target in nodes:
                self._edges.setdefault(cube_id, {})[(e.source, e.target, e.type)] = e

    async def delete_edge(self, cube_id: str, source: str, target: str, type: EdgeType) -> bool:
        return self._cube_edges(cube_id).pop((source, target, type), None) is not None

    async def edge_exists(
        self, cube_id: str, source: str, target: str, type: EdgeType, direction: Direction = "out"
    ) -> bool:
        edges = self._cube_edges(cube_id)
        out, back = (source, target, type) in edges, (target, source, type) in edges
        match direction:
            case "out":
                return out
            case "in":
                return back
            case "any":
                return out or back
        raise StoreError(f"unknown direction {direction!r}")

    async def missing_edges(self, cube_id: str, edges: Sequence[Edge]) -> list[Edge]:
        present = self._cube_edges(cube_id)
        return [e for e in edges if (e.source, e.target, e.type) not in present]

    async def edges_of(
        self,
        cube_id: str,
        node_id: str,
        types: Sequence[EdgeType] | None = None,
        direction: Direction = "any",
    ) -> list[Edge]:
        wanted = None if types is None else {cypher.edge_type(t) for t in types}
        found = []
        for (source, target, type_), e in self._cube_edges(cube_id).items():
            touches = (direction != "in" and source == node_id) or (
                direction != "out" and target == node_id
            )
            if touches and (wanted is None or type_ in wanted):
                found.append(e)
        return sorted(found, key=lambda e: (e.source, e.target, e.type))

    async def edges_from(
        self, cube_id: str, ids: Sequence[str], types: Sequence[EdgeType]
    ) -> list[Edge]:
        sources, wanted = set(ids), {cypher.edge_type(t) for t in types}
        return [e for key, e in sorted(self._cube_edges(cube_id).items())
                if key[0] in sources and key[2] in wanted]

    async def children(self, cube_id: str, node_id: str) -> list[MemoryItem]:
        nodes = self._cube(cube_id)
        kids = [nodes[t] for (s, t, ty) in self._cube_edges(cube_id) if s == node_id
                and ty == "PARENT"]
        return _oldest_created_first(kids)

    async def redirect_edges(
        self, cube_id: str, from_ids: Sequence[str], to_id: str, exclude: Sequence[EdgeType]
    ) -> int:
        """Edges whose other end is ``to_id`` or another merged node stay (no self-loops)."""
        sources = {i for i in _unique(from_ids) if i != to_id}
        skip = {cypher.edge_type(t) for t in exclude}
        edges = self._cube_edges(cube_id)
        if not sources or to_id not in self._cube(cube_id):
            return 0
        moved = 0
        for (source, target, type_), e in list(edges.items()):
            if type_ in skip:
                continue
            if source in sources and target not in sources and target != to_id:
                new = e.model_copy(update={"source": to_id})
            elif target in sources and source not in sources and source != to_id:
                new = e.model_copy(update={"target": to_id})
            else:
                continue
            del edges[(source, target, type_)]
            edges[(new.source, new.target, new.type)] = new
            moved += 1
        return moved

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
        wanted, skip, least = set(tags), set(exclude_ids), max(int(min_overlap), 1)
        found = []
        for n in _newest_first(self._cube(cube_id).values()):
            meta = n.metadata
            if (meta.status != "activated" or n.id in skip or meta.type == "reasoning"
                    or meta.memory_type in ("WorkingMemory", "EpisodicMemory")):
                continue
            overlap = sum(1 for t in meta.tags if t in wanted)
            if overlap >= least:
                found.append(TagNeighbor(n, overlap))
        found.sort(key=lambda t: -t.overlap)  # stable: newest first, then id, within a tie
        return found[:limit]

    async def subgraph(
        self, cube_id: str, center_id: str, depth: int = 2, center_status: Status = "activated"
    ) -> Subgraph:
        """Every edge on a path of at most ``depth`` hops from the center (undirected)."""
        edges: list[Edge] = []
        if depth > 0:
            if isinstance(depth, bool) or not isinstance(depth, int) or depth > 5:
                raise StoreError(f"depth must be an integer in [1, 5], got {depth!r}")
            all_edges = list(self._cube_edges(cube_id).values())
            dist, frontier = {center_id: 0}, [center_id]
            for hop in range(1, depth + 1):
                nxt = []
                for e in all_edges:
                    for a, b in ((e.source, e.target), (e.target, e.source)):
                        if a in frontier and b not in dist:
                            dist[b] = hop
                            nxt.append(b)
                frontier = nxt
            edges = sorted(
                (e for e in all_edges
                 if min(dist.get(e.source, depth), dist.get(e.target, depth)) < depth),
                key=lambda e: (e.source, e.target, e.type),
            )
        others = sorted(({e.source for e in edges} | {e.target for e in edges}) - {center_id})
        nodes = await self.get_nodes(cube_id, [center_id, *others])
        if not nodes or nodes[0].id != center_id or nodes[0].metadata.status != center_status:
            return Subgraph(core_id=None)
        return Subgraph(core_id=center_id, nodes=tuple(nodes), edges=tuple(edges))

    async def find_nodes(
        self, cube_id: str, filters: Sequence[Filter] = (), limit: int | None = None
    ) -> list[MemoryItem]:
        _checked(filters)
        if limit is not None and limit <= 0:
            return []
        found = _newest_first(self._select(cube_id, lambda n: matches_all(n, filters)))
        return found if limit is None else found[:limit]

    async def nodes_by_tags(
        self, cube_id: str, tags: Sequence[str], filters: Sequence[Filter] = (),
        min_overlap: int = 1, limit: int = 20,
    ) -> list[MemoryItem]:
        _checked(filters)
        wanted = set(tags)
        if not wanted or limit <= 0:
            return []

        def rank(n: MemoryItem) -> tuple[int, datetime, str]:
            return (len(wanted.intersection(n.metadata.tags)), n.metadata.updated_at, n.id)

        found = self._select(cube_id, lambda n: matches_all(n, filters)
                             and len(wanted.intersection(n.metadata.tags)) >= max(min_overlap, 1))
        return sorted(found, key=rank, reverse=True)[:limit]

    async def keyword_ids(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[str, float]]:
        return [(n.id, s) for n, s in await self.keyword_search(cube_id, text, limit,
                                                                memory_types, filters)]

    async def keyword_search(
        self, cube_id: str, text: str, limit: int,
        memory_types: Sequence[MemoryType], filters: Sequence[Filter] = (),
    ) -> list[tuple[MemoryItem, float]]:
        """BM25 (k1 1.2, b 0.75) over the cube's indexed words; ties by id."""
        terms = fulltext.query_terms(text)
        _checked(filters)
        if not terms or limit <= 0 or not memory_types:
            return []
        key = cypher.cube_key(cube_id)
        docs = {
            n.id: Counter(fulltext.indexed_text(key, [n.memory, n.metadata.key,
                                                      *n.metadata.tags]).split()[1:])
            for n in self._cube(cube_id).values()
        }
        if not docs:
            return []
        average = sum(sum(d.values()) for d in docs.values()) / len(docs) or 1.0
        types = set(memory_types)
        scored = []
        for n in self._select(cube_id, lambda n: n.metadata.status == "activated"
                              and n.metadata.memory_type in types and matches_all(n, filters)):
            doc, length, score = docs[n.id], sum(docs[n.id].values()), 0.0
            for term in terms:
                if (tf := doc[term]) == 0:
                    continue
                df = sum(1 for d in docs.values() if term in d)
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * length / average)
                score += idf * tf * (_BM25_K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((n, score))
        scored.sort(key=lambda pair: (-pair[1], pair[0].id))
        return scored[:limit]

    async def count_by(
        self, cube_id: str, fields: Sequence[FilterField], filters: Sequence[Filter] = ()
    ) -> list[GroupCount]:
        if not fields:
            raise StoreError("count_by needs at least one field")
        for name in fields:
            if name not in FILTER_FIELDS:
                raise StoreError(f"unknown field {name!r}")
        _checked(filters)
        counts: Counter[tuple[object, ...]] = Counter()
        for n in self._select(cube_id, lambda n: matches_all(n, filters)):
            rows: list[tuple[object, ...]] = [()]
            for name in fields:
                value = field_value(n, name)
                if name in cypher.LIST_FIELDS:
                    rows = [(*r, v) for r in rows for v in value]
                else:
                    if name in TIME_FIELDS and isinstance(value, datetime):
                        value = value.astimezone(UTC)
                    rows = [(*r, value) for r in rows]
            counts.update(rows)
        groups = [GroupCount(dict(zip(fields, k, strict=True)), c) for k, c in counts.items()]
        return sorted(groups, key=lambda g: (-g.count, [repr(v) for v in g.values.values()]))

    async def count_by_type(
        self, cube_id: str, status: Status | None = "activated"
    ) -> dict[str, int]:
        chosen = self._select(cube_id, lambda n: status is None or n.metadata.status == status)
        return dict(Counter(n.metadata.memory_type for n in chosen))

    async def all_of_type(
        self, cube_id: str, memory_type: MemoryType, status: Status | None = "activated",
        skip: int = 0, limit: int | None = None,
    ) -> list[MemoryItem]:
        if skip < 0 or (limit is not None and limit < 0):
            raise StoreError(f"a page needs skip >= 0 and limit >= 0, got {skip} and {limit}")
        nodes = _newest_first(self._select(cube_id, lambda n: n.metadata.memory_type == memory_type
                                           and (status is None or n.metadata.status == status)))
        return nodes[skip:None if limit is None else skip + limit]

    async def remove_oldest(self, cube_id: str, memory_type: MemoryType, keep: int) -> list[str]:
        """FIFO by updated_at: keep the newest ``keep`` (ties: the smaller id goes first)."""
        removed = await self.beyond_capacity(cube_id, memory_type, keep)
        self._drop_nodes(cube_id, removed)
        return removed

    async def beyond_capacity(self, cube_id: str, memory_type: MemoryType,
                              keep: int) -> list[str]:
        if keep < 0:
            raise StoreError(f"keep must be >= 0, got {keep}")
        chosen = self._select(cube_id, lambda n: n.metadata.memory_type == memory_type
                              and n.metadata.status == "activated")
        ordered = sorted(chosen, key=lambda n: (n.metadata.updated_at, n.id), reverse=True)
        return [n.id for n in ordered[keep:]]

    async def optimization_candidates(
        self, cube_id: str, memory_type: MemoryType, limit: int = 1000
    ) -> list[MemoryItem]:
        if memory_type == "WorkingMemory" or limit <= 0:
            return []
        parented = {t for (_, t, ty) in self._cube_edges(cube_id) if ty == "PARENT"}
        chosen = self._select(cube_id, lambda n: n.metadata.memory_type == memory_type
                              and n.metadata.status == "activated" and n.id not in parented)
        return _oldest_created_first(chosen)[:limit]

    # -- whole cubes --------------------------------------------------------------------

    async def export_cube(self, cube_id: str) -> CubeGraph:
        nodes = tuple(sorted(self._cube(cube_id).values(), key=lambda n: n.id))
        edges = tuple(self._cube_edges(cube_id)[k] for k in sorted(self._cube_edges(cube_id)))
        return CubeGraph(cube_id=cube_id, nodes=nodes, edges=edges)

    async def import_cube(self, graph: CubeGraph) -> None:
        """Upsert the nodes, then merge the edges (existing cube content is kept)."""
        await self.upsert_nodes(graph.cube_id, graph.nodes)
        await self.add_edges(graph.cube_id, graph.edges)

    async def clear_cube(self, cube_id: str) -> int:
        self._edges.pop(cube_id, None)
        self._answers.pop(cube_id, None)
        self._used.pop(cube_id, None)
        return len(self._nodes.pop(cube_id, {}))

    async def list_cubes(self) -> list[str]:
        return sorted(c for c, nodes in self._nodes.items() if nodes)

    async def recent_cubes(self, limit: int) -> list[str]:
        last = {c: max(n.metadata.updated_at for n in nodes.values())
                for c, nodes in self._nodes.items() if nodes}
        last = {c: max(t, self._used.get(c, t)) for c, t in last.items()}
        return sorted(last, key=lambda c: (-last[c].timestamp(), c))[:max(limit, 0)]

    async def mark_used(self, cube_id: str, at: datetime) -> None:
        if self._nodes.get(cube_id):
            self._used[cube_id] = at

    async def get_cube_access(self, cube_id: str) -> CubeAccess | None:
        return self._access.get(cube_id)

    async def set_cube_access(self, access: CubeAccess) -> None:
        self._access[access.cube_id] = access

    async def llm_spend(self, cube_id: str, period: str) -> dict[str, int]:
        held = self._spend.get(cube_id)
        if held is None or held[0] != period:
            self._spend[cube_id] = (period, {})
        return dict(self._spend[cube_id][1])

    async def record_llm_spend(self, cube_id: str, period: str, call: str, tokens: int) -> None:
        held = self._spend.get(cube_id)
        if held is None or held[0] != period:
            held = self._spend[cube_id] = (period, {})
        held[1][call] = tokens

    async def llm_answer(self, cube_id: str, call: str) -> str | None:
        return self._answers.get(cube_id, {}).get(call)

    async def record_llm_answer(self, cube_id: str, call: str, answer: str) -> None:
        self._answers.setdefault(cube_id, {})[call] = answer

    async def drop_llm_answers(self, cube_id: str, calls: Sequence[str]) -> None:
        held = self._answers.get(cube_id, {})
        for call in calls:
            held.pop(call, None)
