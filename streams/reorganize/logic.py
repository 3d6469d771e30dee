"""Optimizer, event side (SPEC §3.3): what one reorganize event does to a cube's graph.

``add``: relation detection against bounded neighbours (tag overlap + vector), an
inferred ``reasoning`` node for CAUSE/CONDITION pairs, ``FOLLOWS`` in session time
order, and a concept node when a group shares tags. ``remove``: delete with edges.
``merge``: the add stage's resolution. ``end``: optimize the cube now. Every id is
deterministic and every edge a MERGE, so a replayed event changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from sinks.ports import Filter
from streams.core.lifecycle import refused
from streams.core.merge import apply, resolve
from streams.llm.port import LLMError
from streams.prompts.aggregate import AGGREGATE, AggregateContext
from streams.prompts.inference import INFERENCE, InferenceContext, novel_fact
from streams.prompts.members import MemberNote, is_generic
from streams.prompts.relations import (
    RELATION_DETECTOR,
    RelationContext,
    RelationNode,
    resolved_direction,
)
from streams.reorganize.clustering import centrality
from streams.runtime import Deps, Outgoing
from topics.events import MemoryUpdate, ReorganizeEvent
from topics.ids import derived_event_id, stable_id
from topics.models import Edge, EdgeType, MemoryItem, MemoryMetadata
from topics.registry import MEMORY_UPDATES

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


async def _new_edges(deps: Deps, cube: str, edges: Sequence[Edge]) -> list[Edge]:
    """Edges not in the graph yet, written now (so only real changes are announced)."""
    fresh = await deps.query.missing_edges(cube, edges)
    if fresh:
        await deps.store.add_edges(cube, fresh)
    return fresh


async def neighbours(deps: Deps, node: MemoryItem) -> list[MemoryItem]:
    """Bounded candidates for relation detection: tag overlap first, then vector neighbours."""
    cube, limit = node.metadata.cube_id, deps.settings.reorganize.neighbors_per_node
    found: dict[str, MemoryItem] = {}
    if node.metadata.tags:
        for hit in await deps.query.neighbors_by_tags(cube, node.metadata.tags, 1, [node.id],
                                                      limit):
            found.setdefault(hit.node.id, hit.node)
    records = await deps.query.vectors(cube, [node.id])
    if records:
        hits = await deps.store.search(cube, records[0].vector, limit + 1,
                                       memory_types=["LongTermMemory", "UserMemory"])
        for item, _ in hits:
            if item.id != node.id:
                found.setdefault(item.id, item)
    # only facts relate to facts: summaries and inferences are derived from them
    facts = [n for n in found.values()
             if n.metadata.hierarchy_level == "fact" and n.metadata.type != "reasoning"]
    return facts[: limit * 2]


async def relate(event: ReorganizeEvent, deps: Deps, node: MemoryItem) -> list[Outgoing]:
    out: list[Outgoing] = []
    cube = event.cube_id
    for neighbour in await neighbours(deps, node):
        # A pair is always shown in time order, so its verdict does not depend on which of
        # the two events happens to be processed (or replayed) second.
        old, new = sorted((node, neighbour), key=lambda n: (n.metadata.created_at, n.id))
        ctx = RelationContext(new=RelationNode.of(new), old=RelationNode.of(old))
        try:
            verdict = await deps.llm.run(RELATION_DETECTOR, ctx)
        except LLMError as exc:
            log.warning("relation detection failed for %s/%s: %s", new.id, old.id, exc)
            continue
        if verdict.relation == "NONE":
            continue
        direction = resolved_direction(ctx, verdict)
        source, target = (old, new) if direction == "old_to_new" else (new, old)
        edge = Edge(source=source.id, target=target.id, type=EDGE_OF[verdict.relation],
                    reason=verdict.reason[:200])
        if fresh := await _new_edges(deps, cube, [edge]):
            out.append(update(event, deps, "linked", edges=fresh, reason=verdict.reason[:200]))
        if (pair := InferenceContext.from_relation(ctx, verdict)) is not None:
            out.extend(await infer(event, deps, pair, source, target))
    return out


async def infer(event: ReorganizeEvent, deps: Deps, pair: InferenceContext,
                source: MemoryItem, target: MemoryItem) -> list[Outgoing]:
    """One inferred fact for a CAUSE/CONDITION pair, as a reasoning node (or nothing)."""
    node_id = stable_id("inferred", event.cube_id, source.id, target.id)
    if await deps.query.get_node(event.cube_id, node_id) is not None:
        return []
    try:
        fact = novel_fact(pair, await deps.llm.run(INFERENCE, pair))
    except LLMError as exc:
        log.warning("inference failed: %s", exc)
        return []
    if not fact:
        return []
    relation, reason = pair.relation, pair.reason
    md = target.metadata
    node = MemoryItem(id=node_id, memory=fact, metadata=MemoryMetadata(
        user_id=md.user_id, cube_id=md.cube_id, session_id=md.session_id,
        memory_type="LongTermMemory", type="reasoning", key=f"inferred: {target.metadata.key}",
        tags=tuple(dict.fromkeys((*source.metadata.tags, *md.tags))), source="retrieved",
        background=f"inferred from {relation}: {reason}"[:500], written_by=written_by(deps),
        confidence=min(source.metadata.confidence, md.confidence) * 0.8,
        created_at=max(source.metadata.updated_at, md.updated_at),
        updated_at=max(source.metadata.updated_at, md.updated_at)))
    vector = (await deps.embedder.embed_passages([node.memory]))[0].tolist()
    await deps.store.write([(node, vector)])
    edges = [Edge(source=node_id, target=source.id, type="INFERRED_FROM"),
             Edge(source=node_id, target=target.id, type="INFERRED_FROM")]
    await deps.store.add_edges(event.cube_id, edges)
    return [update(event, deps, "added", node=node, edges=edges, reason="inferred")]


async def follows(event: ReorganizeEvent, deps: Deps, node: MemoryItem) -> list[Outgoing]:
    """Link the session's activated long-term nodes in time order (FOLLOWS: earlier → later)."""
    session = node.metadata.session_id
    if not session:
        return []
    nodes = await deps.query.find_nodes(event.cube_id, [
        Filter("session_id", "=", session), Filter("status", "=", "activated"),
        Filter("memory_type", "in", ["LongTermMemory", "UserMemory"]),
        Filter("type", "!=", "reasoning"), Filter("hierarchy_level", "=", "fact")])
    ordered = sorted(nodes, key=lambda n: (n.metadata.created_at, n.id))
    pairs = [Edge(source=a.id, target=b.id, type="FOLLOWS")
             for a, b in zip(ordered, ordered[1:], strict=False)
             if node.id in (a.id, b.id)]
    if fresh := await _new_edges(deps, event.cube_id, pairs):
        return [update(event, deps, "linked", edges=fresh, reason=f"session {session} order")]
    return []


async def _centrality(deps: Deps, cube: str, members: Sequence[MemoryItem]) -> list[float] | None:
    """Each member's cosine to the group's centroid; None when a vector is missing."""
    records = {r.id: r.vector for r in await deps.query.vectors(cube, [m.id for m in members])}
    if any(m.id not in records for m in members):
        return None
    rows = np.asarray([records[m.id] for m in members], dtype=np.float64)
    return centrality(rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12))


async def aggregate(event: ReorganizeEvent, deps: Deps, node: MemoryItem) -> list[Outgoing]:
    """A concept node over a group sharing non-generic tags, when the judge finds it worth it."""
    tags = [t for t in node.metadata.tags if not is_generic(t)]
    if len(tags) < 2:
        return []
    hits = await deps.query.neighbors_by_tags(event.cube_id, tags, 2, [node.id], 10)
    members = [node, *(h.node for h in hits if h.node.metadata.hierarchy_level == "fact")]
    if len(members) < 3:
        return []
    shared = sorted(set(tags).intersection(*(set(m.metadata.tags) for m in members[1:])))
    concept_id = stable_id("aggregate", event.cube_id, *sorted(shared or tags))
    existing = await deps.query.get_node(event.cube_id, concept_id)
    if existing is None:
        try:
            answer = await deps.llm.run(AGGREGATE, AggregateContext(
                members=[MemberNote.of(m) for m in members], shared_tags=shared or tags,
                centrality=await _centrality(deps, event.cube_id, members)))
        except LLMError as exc:
            log.warning("aggregation failed: %s", exc)
            return []
        if not answer.create or not answer.value:
            return []
        md = node.metadata
        existing = MemoryItem(id=concept_id, memory=answer.value, metadata=MemoryMetadata(
            user_id=md.user_id, cube_id=md.cube_id, memory_type=md.memory_type, type="topic",
            key=answer.key or ", ".join(shared), tags=tuple(answer.tags or shared),
            hierarchy_level="concept", background=answer.background, source="retrieved",
            written_by=written_by(deps), created_at=md.updated_at, updated_at=md.updated_at))
        vector = (await deps.embedder.embed_passages([existing.memory]))[0].tolist()
        await deps.store.write([(existing, vector)])
        out = [update(event, deps, "added", node=existing, reason="aggregate concept")]
    else:
        out = []
    edges = [Edge(source=m.id, target=concept_id, type="AGGREGATE_TO") for m in members]
    if fresh := await _new_edges(deps, event.cube_id, edges):
        out.append(update(event, deps, "linked", edges=fresh, reason="aggregate"))
    return out


async def on_add(event: ReorganizeEvent, deps: Deps) -> list[Outgoing]:
    out: list[Outgoing] = []
    for node in await deps.query.get_nodes(event.cube_id, event.node_ids):
        if node.metadata.status != "activated" or node.metadata.memory_type == "WorkingMemory":
            continue
        out += await relate(event, deps, node)
        out += await follows(event, deps, node)
        out += await aggregate(event, deps, node)
    return out


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
