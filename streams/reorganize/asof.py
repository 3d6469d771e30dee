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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memstream.sinks.ports import Filter
from memstream.streams.runtime import Deps
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
    here = position(node)
    if here > at or (strictly_before and here == at):
        return None
    if node.metadata.status == "activated":
        return Live(node, node.id)
    if node.metadata.status != "archived":
        return None
    current = node
    for _ in range(MAX_CHAIN):
        out = [e for e in await deps.query.edges_of(cube, current.id, ["MERGED_TO"], "out")
               if e.source == current.id]
        if not out:
            return None  # archived by other means (unused, a command): not a merge
        target = await deps.query.get_node(cube, sorted(out, key=lambda e: e.target)[0].target)
        if target is None:
            return None
        if current is node and max(position(target), here) <= at:
            return None  # merged away before ``at``
        if target.metadata.status == "activated":
            return Live(node, target.id)
        current = target
    return None


async def live_facts(deps: Deps, cube: str, nodes: Iterable[MemoryItem], at: Position,
                     exclude: Sequence[str] = ()) -> list[Live]:
    """The facts among ``nodes`` live at ``at`` (strictly before it), latest first."""
    out: list[Live] = []
    for node in nodes:
        if node.id in exclude:
            continue
        if (live := await live_at(deps, cube, node, at)) is not None:
            out.append(live)
    return sorted(out, key=lambda lv: position(lv.node), reverse=True)


async def tag_neighbours(deps: Deps, node: MemoryItem, tags: Sequence[str], min_overlap: int,
                         limit: int) -> list[Live]:
    """Earlier live facts sharing at least ``min_overlap`` of ``tags``: most overlap first,
    then latest first."""
    if not tags or limit <= 0:
        return []
    cube, at = node.metadata.cube_id, position(node)
    wanted = set(tags)
    found = await deps.query.find_nodes(
        cube, [*fact_filters(at[0]), Filter("tags", "in", sorted(wanted))])
    found = [n for n in found if len(wanted.intersection(n.metadata.tags)) >= min_overlap]
    live = await live_facts(deps, cube, found, at, exclude=[node.id])
    live.sort(key=lambda lv: (len(wanted.intersection(lv.node.metadata.tags)),
                              position(lv.node)), reverse=True)
    return live[:limit]


async def vector_neighbours(deps: Deps, node: MemoryItem, limit: int) -> list[Live]:
    """The earlier live facts most similar to ``node`` (by its stored vector)."""
    cube, at = node.metadata.cube_id, position(node)
    records = await deps.query.vectors(cube, [node.id])
    if not records or limit <= 0:
        return []
    fetch = limit + 1
    while True:
        hits = await deps.store.search(cube, records[0].vector, fetch, memory_types=FACT_TYPES,
                                       filters=fact_filters(at[0]), status=None)
        live = [lv for lv in await live_facts(deps, cube, (n for n, _ in hits), at,
                                              exclude=[node.id])]
        if len(live) >= limit or len(hits) < fetch or fetch >= 8 * (limit + 1):
            order = {n.id: i for i, (n, _) in enumerate(hits)}
            live.sort(key=lambda lv: order[lv.node.id])
            return live[:limit]
        fetch *= 2


async def predecessor(deps: Deps, node: MemoryItem) -> Live | None:
    """The session's latest live fact before ``node`` (for ``FOLLOWS``)."""
    session = node.metadata.session_id
    if not session:
        return None
    cube, at = node.metadata.cube_id, position(node)
    found = await deps.query.find_nodes(cube, [*fact_filters(at[0]),
                                               Filter("session_id", "=", session)])
    live = await live_facts(deps, cube, found, at, exclude=[node.id])
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
