"""What the log says came before: the optimizer's view of a cube as of one position.

The add stage runs ahead of the optimizer, by a varying amount, and a crash replays part
of either. So the optimizer never decides from "what is in the store now": a node's
candidates are the facts that precede it in the log, with the status they had at that
point. A fact's position is ``(updated_at, id)``: ``updated_at`` comes from its input
event (``occurred_at``, plus the item's index), so it is the same in every run; a fused
node keeps the newer statement's id and time, i.e. the position of the item that caused
the merge. A fact archived by a later merge was still live at an earlier position: it is
judged as it was, and what is written lands on the node that holds its edges now (the
merge moved its edges there, and would have moved this one too). Summaries record the
position they were made at (``created_at``), so a run knows which ``PARENT`` edges are
older than itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstream.sinks.ports import Filter, VectorQuery
from memstream.streams.runtime.stage import Deps
from memstream.topics.models import MemoryItem, MemoryType, StoredMemoryType

Position = tuple[datetime, str]
FACT_TYPES: list[StoredMemoryType] = ["LongTermMemory", "UserMemory"]
MAX_CHAIN = 16  # merges followed from an archived fact to the node that holds its edges


def position(node: MemoryItem) -> Position:
    return (node.metadata.updated_at, node.id)


def fact_filters(at: datetime) -> list[Filter]:
    """Facts (not summaries, not inferences, not working copies) not newer than ``at``."""
    return [Filter("memory_type", "in", FACT_TYPES), Filter("hierarchy_level", "=", "fact"),
            Filter("type", "!=", "reasoning"), Filter("status", "in", ["activated", "archived"]),
            Filter("updated_at", "<=", at)]


@dataclass(frozen=True)
class Live:
    """A fact as it was at some position, and the node that holds its edges now."""

    node: MemoryItem
    holder: str


async def live_at(deps: Deps, cube: str, node: MemoryItem, at: Position,
                  strictly_before: bool = True) -> Live | None:
    """``node`` as of ``at``: None if it comes later (or, with ``strictly_before``, is ``at``
    itself) or was merged away at or before ``at``."""
    return (await live_many(deps, cube, [node], at, strictly_before))[0]


async def live_many(deps: Deps, cube: str, nodes: Sequence[MemoryItem], at: Position,
                    strictly_before: bool = True) -> list[Live | None]:
    """``live_at`` of each of ``nodes``, in their order. Archived facts follow their merges
    together, one read of edges and one of nodes per step of the longest chain."""
    result: list[Live | None] = [None] * len(nodes)
    walking: dict[int, MemoryItem] = {}  # index in nodes → the node its chain has reached
    for i, node in enumerate(nodes):
        here = position(node)
        if here > at or (strictly_before and here == at):
            continue
        if node.metadata.status == "activated":
            result[i] = Live(node, node.id)
        elif node.metadata.status == "archived":
            walking[i] = node
    for _ in range(MAX_CHAIN):
        if not walking:
            break
        merged: dict[str, str] = {}
        for edge in await deps.query.edges_from(
                cube, sorted({c.id for c in walking.values()}), ["MERGED_TO"]):
            merged[edge.source] = min(merged.get(edge.source, edge.target), edge.target)
        found = {n.id: n for n in await deps.query.get_nodes(cube, sorted(set(merged.values())))}
        following: dict[int, MemoryItem] = {}
        for i, current in walking.items():
            node = nodes[i]
            # no merge out of it: archived by other means (unused, a command), not merged
            if (target := found.get(merged.get(current.id, ""))) is None:
                continue
            if current is node and max(position(target), position(node)) <= at:
                continue  # merged away before ``at``
            if target.metadata.status == "activated":
                result[i] = Live(node, target.id)
            else:
                following[i] = target
        walking = following
    return result


async def live_facts(deps: Deps, cube: str, nodes: Iterable[MemoryItem], at: Position,
                     exclude: Sequence[str] = ()) -> list[Live]:
    """The facts among ``nodes`` live at ``at`` (strictly before it), latest first."""
    listed = [n for n in nodes if n.id not in exclude]
    live = [lv for lv in await live_many(deps, cube, listed, at) if lv is not None]
    return sorted(live, key=lambda lv: position(lv.node), reverse=True)


async def first_live(deps: Deps, cube: str, nodes: Sequence[MemoryItem], at: Position,
                     limit: int, exclude: Sequence[str] = ()) -> list[Live]:
    """The first ``limit`` of ``nodes`` (in the order given) live at ``at``, strictly before
    it: checked a slice at a time, so a long candidate list costs only what it takes."""
    listed = [n for n in nodes if n.id not in exclude]
    out: list[Live] = []
    start = 0
    while start < len(listed) and len(out) < limit:
        step = max(2 * (limit - len(out)), 4)
        out += [lv for lv in await live_many(deps, cube, listed[start:start + step], at)
                if lv is not None]
        start += step
    return out[:limit]


async def ranked_live(deps: Deps, cube: str, at: Position, limit: int, exclude: Sequence[str],
                      fetch: Callable[[int], Awaitable[list[MemoryItem]]],
                      rank: Callable[[MemoryItem], Any],
                      coarse: Callable[[MemoryItem], Any]) -> list[Live]:
    """The first ``limit`` live facts by ``rank`` (descending) among what ``fetch(k)`` reads:
    the store's first ``k`` by ``coarse``, a prefix of ``rank`` (it breaks ties differently).
    Reads a few more than needed, and more only while too few of them were live, so a long
    history costs what the answer needs, not the whole history."""
    k = max(4 * limit, 16)
    while True:
        found = sorted(await fetch(k), key=rank, reverse=True)
        complete = len(found) < k
        if not complete:  # what was not read ranks at most as the last read one by ``coarse``
            edge = min(coarse(n) for n in found)
            found = [n for n in found if coarse(n) > edge]
        live = await first_live(deps, cube, found, at, limit, exclude)
        if len(live) >= limit or complete:
            return live
        k *= 4


async def tag_neighbours(deps: Deps, node: MemoryItem, tags: Sequence[str], min_overlap: int,
                         limit: int) -> list[Live]:
    """Earlier live facts sharing at least ``min_overlap`` of ``tags``: most overlap first,
    then latest first."""
    if not tags or limit <= 0:
        return []
    cube, at = node.metadata.cube_id, position(node)
    wanted = set(tags)

    def overlap(n: MemoryItem) -> int:
        return len(wanted.intersection(n.metadata.tags))

    async def fetch(k: int) -> list[MemoryItem]:
        return await deps.query.nodes_by_tags(cube, sorted(wanted), fact_filters(at[0]),
                                              min_overlap, k)

    return await ranked_live(deps, cube, at, limit, [node.id], fetch,
                             rank=lambda n: (overlap(n), position(n)),
                             coarse=lambda n: (overlap(n), n.metadata.updated_at))


async def vector_neighbours(deps: Deps, node: MemoryItem, limit: int) -> list[Live]:
    """The earlier live facts most similar to ``node`` (by its stored vector)."""
    cube, at = node.metadata.cube_id, position(node)
    records = await deps.query.vectors(cube, [node.id])
    if not records or limit <= 0:
        return []
    fetch = limit + 1
    while True:
        hits = await deps.store.search(cube, VectorQuery(
            records[0].vector, fetch, memory_types=FACT_TYPES, status=None,
            filters=fact_filters(at[0])))
        live = await first_live(deps, cube, [n for n, _ in hits], at, limit, exclude=[node.id])
        if len(live) >= limit or len(hits) < fetch or fetch >= 8 * (limit + 1):
            return live
        fetch *= 2


async def predecessor(deps: Deps, node: MemoryItem) -> Live | None:
    """The session's latest live fact before ``node`` (for ``FOLLOWS``)."""
    session = node.metadata.session_id
    if not session:
        return None
    cube, at = node.metadata.cube_id, position(node)
    filters = [*fact_filters(at[0]), Filter("session_id", "=", session)]

    async def fetch(k: int) -> list[MemoryItem]:
        return await deps.query.find_nodes(cube, filters, limit=k)

    live = await ranked_live(deps, cube, at, 1, [node.id], fetch, rank=position,
                             coarse=lambda n: n.metadata.updated_at)
    return live[0] if live else None


async def optimization_candidates(deps: Deps, cube: str, memory_type: MemoryType,
                                  at: Position) -> list[MemoryItem]:
    """Facts of a type live at ``at`` with no parent made before ``at``, as they were then."""
    found = await deps.query.find_nodes(cube, [*fact_filters(at[0]),
                                               Filter("memory_type", "=", memory_type)])
    live = await live_facts(deps, cube, found, at)
    summaries = await deps.query.find_nodes(cube, [
        Filter("memory_type", "=", memory_type), Filter("hierarchy_level", "=", "concept"),
        Filter("created_at", "<", at[0])])
    parented: set[str] = set()
    for summary in summaries:
        parented.update(c.id for c in await deps.query.children(cube, summary.id))
    return sorted((lv.node for lv in live if lv.node.id not in parented), key=position)
