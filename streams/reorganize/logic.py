"""Optimizer, event side: what one reorganize event does to a cube's graph.

``add`` (one event per chunk): ``FOLLOWS`` in session time order, then, in one model call
for all the event's facts (``organize``), relations with bounded neighbours, an inferred
``reasoning`` node for CAUSE/CONDITION pairs and a concept node when a group shares tags.
``remove``: delete with edges. ``merge``: the add stage's resolution. ``end``: optimize the
cube now. Every id is deterministic and every edge a MERGE, so a replayed event changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memstream.kafka import tracing
from memstream.streams.core.lifecycle import refused
from memstream.streams.core.merge import apply, resolve
from memstream.streams.reorganize import asof
from memstream.streams.reorganize.organize import New, organize
from memstream.streams.reorganize.writes import STAGE, moved, update, write_edges
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id
from memstream.topics.models import Edge
from memstream.topics.registry import MEMORY_UPDATES

__all__ = ["STAGE", "follows", "on_add", "on_merge", "on_remove"]

log = logging.getLogger("memstream.reorganize")


async def follows(event: ReorganizeEvent, deps: Deps, this: asof.Live,
                  writes: list[Edge]) -> list[Outgoing]:
    """``FOLLOWS`` from the session's latest earlier fact to this one (time order); the edge
    to write (on the nodes holding its ends) goes to ``writes``."""
    before = await asof.predecessor(deps, this.node)
    if before is None:
        return []
    edge = Edge(source=before.node.id, target=this.node.id, type="FOLLOWS")
    writes.append(moved(edge, {edge.source: before.holder, edge.target: this.holder}))
    return [update(event, deps, "linked", edges=[edge],
                   reason=f"session {this.node.metadata.session_id} order")]


async def on_add(events: ReorganizeEvent | Sequence[ReorganizeEvent],
                 deps: Deps) -> list[Outgoing]:
    """Consecutive add events of one cube: each node as it was when the log added it (it may
    have been merged since), organized together (one model call for them all)."""
    batch = [events] if isinstance(events, ReorganizeEvent) else list(events)
    lives: list[New] = []
    out: list[Outgoing] = []
    edges: list[Edge] = []  # written together: one store call instead of one per fact
    for event in batch:
        for node in await deps.query.get_nodes(event.cube_id, event.node_ids):
            if node.metadata.memory_type == "WorkingMemory" \
                    or node.metadata.type == "reasoning" \
                    or node.metadata.hierarchy_level != "fact":
                continue
            this = await asof.live_at(deps, event.cube_id, node, asof.position(node),
                                      strictly_before=False)
            if this is not None:
                lives.append((event, this))
                with tracing.span("memstream.optimizer.follows"):
                    out += await follows(event, deps, this, edges)
    if edges:
        await write_edges(deps, batch[0].cube_id, edges)
    if not lives:
        return out
    with tracing.span("memstream.optimizer.organize", {"memstream.facts": len(lives)}):
        return out + await organize(deps, lives)


async def on_merge(event: ReorganizeEvent, deps: Deps) -> list[Outgoing]:
    """Explicit merge of two nodes (older first), through the add stage's resolution."""
    nodes = await deps.query.get_nodes(event.cube_id, event.node_ids[:2])
    if len(nodes) == 2 and any(n.metadata.frozen for n in nodes):  # answered with the reason
        base = {"user_id": event.user_id, "cube_id": event.cube_id, "occurred_at": deps.clock(),
                "stage": STAGE, "cause_event_id": event.event_id}
        return [refused(f, o.id, f"merge with {o.id}", event.reason or "explicit merge", base,
                        event.event_id) for f, o in zip(nodes, nodes[::-1], strict=True)
                if f.metadata.frozen]
    if len(nodes) < 2 or any(n.metadata.status != "activated" for n in nodes):
        return []
    old, new = sorted(nodes, key=lambda n: n.metadata.updated_at)
    records = {r.id: r for r in await deps.query.vectors(event.cube_id, [new.id])}
    if new.id not in records:
        return []
    merge = await resolve(old, new, records[new.id].vector, "redundant",
                          event.reason or "explicit merge", deps)
    await apply(merge, deps)
    return [update(event, deps, "merged", node=merge.kept, related_ids=(merge.archived.id,),
                   reason=merge.reason),
            update(event, deps, "archived", node=merge.archived,
                   related_ids=(merge.kept.id,), reason=f"merged into {merge.kept.id}")]


async def on_remove(event: ReorganizeEvent, deps: Deps) -> list[Outgoing]:
    """Delete nodes with their edges (and vectors); already-gone nodes are skipped."""
    existing = [n.id for n in await deps.query.get_nodes(event.cube_id, event.node_ids)]
    if existing:
        await deps.store.delete(event.cube_id, existing)
    return [Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("reorganize-removed", node_id), user_id=event.user_id,
        cube_id=event.cube_id, occurred_at=deps.clock(), action="deleted", stage=STAGE,
        node_id=node_id, cause_event_id=event.event_id)) for node_id in existing]
