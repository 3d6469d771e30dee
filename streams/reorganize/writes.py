"""What the optimizer's event handlers share: announcing, finishing derived nodes, writing
edges onto the nodes that hold them now."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np

from memstream.streams.embed.nodes import node_vectors
from memstream.streams.reorganize import asof
from memstream.streams.reorganize.clustering import centrality
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id
from memstream.topics.models import LINEAGE_EDGE_TYPES, Edge, EdgeType, MemoryItem
from memstream.topics.registry import MEMORY_UPDATES

log = logging.getLogger("memstream.reorganize")
STAGE = "reorganize"
EDGE_OF: dict[str, EdgeType] = {"CAUSE": "CAUSE", "CONDITION": "CONDITION",
                                "RELATE": "RELATE_TO", "CONFLICT": "CONFLICT"}


def written_by(deps: Deps) -> Literal["model", "rules"]:
    """Who writes a derived node's text: the ``rules`` stand-in is no model, and the scheduler
    keeps what it writes out of working memory."""
    return "rules" if deps.llm.name == "rules" else "model"


def update(event: ReorganizeEvent, deps: Deps, action: str, node: MemoryItem | None = None,
           edges: Sequence[Edge] = (), **kw: Any) -> Outgoing:
    """A memory.updates event; its id is derived from what it announces (replays dedupe)."""
    what = node.id if node is not None else ",".join(f"{e.source}>{e.type}>{e.target}"
                                                    for e in edges)
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("reorganize", action, what), user_id=event.user_id,
        cube_id=event.cube_id, occurred_at=deps.clock(), action=action,  # type: ignore[arg-type]
        stage=STAGE, node_id=node.id if node else None, node=node, edges=tuple(edges),
        cause_event_id=event.event_id, **kw))


async def complete(deps: Deps, cube: str, ids: Sequence[str]) -> None:
    """Finish derived nodes an earlier attempt left half-written (a node without its vector):
    a redelivery finds the node and would otherwise never write its vector."""
    await deps.store.complete(cube, ids, partial(node_vectors, deps.embedder))


async def write_edges(deps: Deps, cube: str, edges: Sequence[Edge]) -> None:
    """Write edges (MERGE: idempotent); a self-loop left by two merged ends is not written.

    The add stage runs beside the optimizer: an end it merged away after the edges were
    decided, and before they were written, would keep them on the archived node (the merge
    moved its other edges already), where a replay, whose merges come first, never puts
    them. Such an end's edges are moved on to the node that holds its edges now, as the merge
    moved the rest."""
    if real := [e for e in edges if e.source != e.target]:
        await deps.store.add_edges(cube, real)
        await settle(deps, cube, {e.source for e in real} | {e.target for e in real})


async def settle(deps: Deps, cube: str, ids: Collection[str]) -> None:
    """Move the moving edges of each merged-away node of ``ids`` onto its holder."""
    for node in await deps.query.get_nodes(cube, sorted(ids)):
        if node.metadata.status == "archived" and (holder := await _holder(deps, node)):
            await deps.store.redirect_edges(cube, [node.id], holder,
                                            exclude=sorted(LINEAGE_EDGE_TYPES))


async def holder_of(deps: Deps, cube: str, node_id: str) -> str | None:
    """The live end of ``node_id``'s merges (None if it was not merged, or the chain is
    longer than ``asof.MAX_CHAIN``)."""
    found = await deps.query.get_nodes(cube, [node_id])
    return await _holder(deps, found[0]) if found else None


async def _holder(deps: Deps, node: MemoryItem) -> str | None:
    # as of the node's own position, the merges that followed it lead to its holder now
    live = await asof.live_at(deps, node.metadata.cube_id, node, asof.position(node),
                              strictly_before=False)
    return live.holder if live is not None and live.holder != node.id else None


def moved(edge: Edge, holders: dict[str, str]) -> Edge:
    """``edge`` on the nodes that hold its ends' edges now (a merge moved them there)."""
    return edge.model_copy(update={"source": holders.get(edge.source, edge.source),
                                   "target": holders.get(edge.target, edge.target)})


async def centrality_of(deps: Deps, cube: str, members: Sequence[MemoryItem]) -> list[float] | None:
    """Each member's cosine to the group's centroid; None when a vector is missing."""
    records = {r.id: r.vector for r in await deps.query.vectors(cube, [m.id for m in members])}
    if any(m.id not in records for m in members):
        return None
    rows = np.asarray([records[m.id] for m in members], dtype=np.float64)
    return centrality(rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12))
