"""Suspected contradictions kept side by side.

Without a model, the add stage never archives a memory because surface cues suggest the
new one contradicts it: it links the two with a ``CONFLICT`` edge (newer → older) and keeps
both activated. Search then shows the newer of two linked statements first, so what the
user said last is what an agent reads first, and the older one is still there to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import MemoryUpdate, ScoredMemory
from memstream.topics.ids import derived_event_id
from memstream.topics.models import Edge, EdgeType, MemoryItem
from memstream.topics.registry import MEMORY_UPDATES

NOTE_CHARS = 300


def guesses(deps: Deps) -> bool:
    """The ``rules`` stand-in judges by surface cues: its contradictions are suspicions."""
    return deps.llm.name == "rules"


def tag(node_id: str) -> str:
    """The head of an edge's reason that names the node whose adding wrote it."""
    return f"[{node_id}] "


async def recorded_edges(deps: Deps, cube_id: str, node_id: str,
                         edge_type: EdgeType) -> list[Edge]:
    """The ``edge_type`` edges out of ``node_id`` that adding it wrote (tagged with it), so a
    redelivery finds its own decisions."""
    edges = await deps.query.edges_of(cube_id, node_id, [edge_type], "out")
    return [e for e in edges if e.reason.startswith(tag(node_id))]


def conflict_edges(node: MemoryItem, suspected: Sequence[tuple[MemoryItem, str]]) -> list[Edge]:
    """``CONFLICT`` from the new node to each older one it seems to contradict; the reason is
    tagged with the node whose adding found it, so a redelivery finds its own edges."""
    return [Edge(source=node.id, target=old.id, type="CONFLICT",
                 reason=(tag(node.id) + f"suspected contradiction: {why}")[:NOTE_CHARS])
            for old, why in suspected]


async def recorded_conflicts(deps: Deps, cube_id: str, node_id: str) -> list[Edge]:
    """The ``CONFLICT`` edges written while adding ``node_id`` (none if it found none)."""
    return await recorded_edges(deps, cube_id, node_id, "CONFLICT")


def linked(edges: Sequence[Edge], base: dict[str, Any]) -> list[Outgoing]:
    """One ``linked`` update per edge, its id derived from the edge (replays dedupe)."""
    return [Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("conflict", e.source, e.target), action="linked",
        node_id=e.source, related_ids=(e.target,), edges=(e,),
        reason=e.reason.removeprefix(tag(e.source)), **base)) for e in edges]


async def newer_first(deps: Deps, cube_id: str,
                      ranked: list[ScoredMemory]) -> list[ScoredMemory]:
    """Of two returned memories linked by ``CONFLICT``, the newer one ranks just above the
    older (with its score, so scores stay sorted); one read of the edges among the hits."""
    ids = [_graph_id(s.item) for s in ranked]
    if len(ids) < 2:
        return ranked
    present = set(ids)
    edges = [e for e in await deps.query.edges_from(cube_id, ids, ["CONFLICT"])
             if e.target in present and e.source != e.target]
    if not edges:
        return ranked
    out = list(ranked)
    for edge in edges:
        pos = {_graph_id(s.item): i for i, s in enumerate(out)}
        first, second = sorted((pos[edge.source], pos[edge.target]))
        upper, lower = out[first], out[second]
        if _age(lower.item) <= _age(upper.item):
            continue  # the newer one is already above
        del out[second]
        out.insert(first, lower.model_copy(update={"score": upper.score}))
    return out


def _graph_id(item: MemoryItem) -> str:
    """A working-memory copy stands for its long-term node (the edges are the node's)."""
    return item.metadata.origin_id or item.id


def _age(item: MemoryItem) -> tuple[datetime, datetime]:
    md = item.metadata
    return (md.updated_at, md.created_at)
