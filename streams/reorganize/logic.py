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

from memstream.streams.core.lifecycle import refused
from memstream.streams.core.merge import apply, resolve
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.aggregate import AGGREGATE, AggregateContext
from memstream.streams.prompts.inference import INFERENCE, InferenceContext, novel_fact
from memstream.streams.prompts.members import MemberNote, is_generic, repeats_a_member
from memstream.streams.prompts.relations import (
    RELATION_DETECTOR,
    RelationContext,
    RelationNode,
    resolved_direction,
)
from memstream.streams.reorganize import asof
from memstream.streams.reorganize.clustering import centrality
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics import tracing
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id, stable_id
from memstream.topics.models import Edge, EdgeType, MemoryItem, MemoryMetadata
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
    async def embed(items: Sequence[MemoryItem]) -> list[list[float]]:
        return [v.tolist() for v in await deps.embedder.embed_passages([i.memory for i in items])]

    await deps.store.complete(cube, ids, embed)


async def _write(deps: Deps, cube: str, edges: Sequence[Edge]) -> None:
    """Write edges (MERGE: idempotent); a self-loop left by two merged ends is not written."""
    if real := [e for e in edges if e.source != e.target]:
        await deps.store.add_edges(cube, real)


def _moved(edge: Edge, holders: dict[str, str]) -> Edge:
    """``edge`` on the nodes that hold its ends' edges now (a merge moved them there)."""
    return edge.model_copy(update={"source": holders.get(edge.source, edge.source),
                                   "target": holders.get(edge.target, edge.target)})


async def neighbours(deps: Deps, node: MemoryItem) -> list[asof.Live]:
    """Bounded candidates for relation detection: earlier live facts by tag overlap first,
    then by vector (see ``asof``: never a fact the log has not reached yet)."""
    limit = deps.settings.reorganize.neighbors_per_node
    found: dict[str, asof.Live] = {}
    for live in [*await asof.tag_neighbours(deps, node, node.metadata.tags, 1, limit),
                 *await asof.vector_neighbours(deps, node, limit)]:
        found.setdefault(live.node.id, live)
    return list(found.values())[: limit * 2]


async def relate(event: ReorganizeEvent, deps: Deps, this: asof.Live) -> list[Outgoing]:
    out: list[Outgoing] = []
    cube, node = event.cube_id, this.node
    for other in await neighbours(deps, node):
        neighbour = other.node
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
        await _write(deps, cube, [_moved(edge, {node.id: this.holder,
                                                neighbour.id: other.holder})])
        # announced as decided (every time: the same id, so a redelivery dedupes)
        out.append(update(event, deps, "linked", edges=[edge], reason=verdict.reason[:200]))
        if (pair := InferenceContext.from_relation(ctx, verdict)) is not None:
            out.extend(await infer(event, deps, pair, source, target))
    return out


async def infer(event: ReorganizeEvent, deps: Deps, pair: InferenceContext,
                source: MemoryItem, target: MemoryItem) -> list[Outgoing]:
    """One inferred fact for a CAUSE/CONDITION pair, as a reasoning node (or nothing)."""
    node_id = stable_id("inferred", event.cube_id, source.id, target.id)
    edges = [Edge(source=node_id, target=source.id, type="INFERRED_FROM"),
             Edge(source=node_id, target=target.id, type="INFERRED_FROM")]
    if (made := await deps.query.get_node(event.cube_id, node_id)) is not None:
        # made by an earlier delivery: finish it and announce it again (same ids)
        await complete(deps, event.cube_id, [node_id])
        await deps.store.add_edges(event.cube_id, edges)
        return [update(event, deps, "added", node=made, edges=edges, reason="inferred")]
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
    await deps.store.add_edges(event.cube_id, edges)
    return [update(event, deps, "added", node=node, edges=edges, reason="inferred")]


async def follows(event: ReorganizeEvent, deps: Deps, this: asof.Live) -> list[Outgoing]:
    """``FOLLOWS`` from the session's latest earlier fact to this one (time order)."""
    before = await asof.predecessor(deps, this.node)
    if before is None:
        return []
    edge = Edge(source=before.node.id, target=this.node.id, type="FOLLOWS")
    await _write(deps, event.cube_id, [_moved(edge, {edge.source: before.holder,
                                                     edge.target: this.holder})])
    return [update(event, deps, "linked", edges=[edge],
                   reason=f"session {this.node.metadata.session_id} order")]


async def _centrality(deps: Deps, cube: str, members: Sequence[MemoryItem]) -> list[float] | None:
    """Each member's cosine to the group's centroid; None when a vector is missing."""
    records = {r.id: r.vector for r in await deps.query.vectors(cube, [m.id for m in members])}
    if any(m.id not in records for m in members):
        return None
    rows = np.asarray([records[m.id] for m in members], dtype=np.float64)
    return centrality(rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12))


async def aggregate(event: ReorganizeEvent, deps: Deps, this: asof.Live) -> list[Outgoing]:
    """A concept node over a group sharing non-generic tags, when the judge finds it worth it."""
    node = this.node
    tags = [t for t in node.metadata.tags if not is_generic(t)]
    if len(tags) < 2:
        return []
    earlier = await asof.tag_neighbours(deps, node, tags, 2, 10)
    members = [node, *(lv.node for lv in earlier)]
    if len(members) < 3:
        return []
    holders = {node.id: this.holder, **{lv.node.id: lv.holder for lv in earlier}}
    shared = sorted(set(tags).intersection(*(set(m.metadata.tags) for m in members[1:])))
    concept_id = stable_id("aggregate", event.cube_id, *sorted(shared or tags))
    existing = await deps.query.get_node(event.cube_id, concept_id)
    md = node.metadata
    out: list[Outgoing] = []
    # A concept records the position of the fact that made it (``created_at``): one made
    # here, by an earlier delivery, is announced again; one made before is joined.
    if existing is None or existing.metadata.created_at > md.updated_at:
        try:
            answer = await deps.llm.run(AGGREGATE, AggregateContext(
                members=[MemberNote.of(m) for m in members], shared_tags=shared or tags,
                centrality=await _centrality(deps, event.cube_id, members)))
        except LLMError as exc:
            log.warning("aggregation failed: %s", exc)
            return []
        if not answer.create or not answer.value or repeats_a_member(
                answer.value, (m.memory for m in members)):
            return []
    if existing is None:
        existing = MemoryItem(id=concept_id, memory=answer.value, metadata=MemoryMetadata(
            user_id=md.user_id, cube_id=md.cube_id, memory_type=md.memory_type, type="topic",
            key=answer.key or ", ".join(shared), tags=tuple(answer.tags or shared),
            hierarchy_level="concept", background=answer.background, source="retrieved",
            written_by=written_by(deps), created_at=md.updated_at, updated_at=md.updated_at))
        vector = (await deps.embedder.embed_passages([existing.memory]))[0].tolist()
        await deps.store.write([(existing, vector)])
    else:
        await complete(deps, event.cube_id, [concept_id])
    if existing.metadata.created_at == md.updated_at:
        out.append(update(event, deps, "added", node=existing, reason="aggregate concept"))
    edges = [Edge(source=m.id, target=concept_id, type="AGGREGATE_TO") for m in members]
    await _write(deps, event.cube_id, [_moved(e, holders) for e in edges])
    out.append(update(event, deps, "linked", edges=edges, reason="aggregate"))
    return out


async def on_add(event: ReorganizeEvent, deps: Deps) -> list[Outgoing]:
    """Each node as it was when the log added it (it may have been merged since)."""
    out: list[Outgoing] = []
    for node in await deps.query.get_nodes(event.cube_id, event.node_ids):
        if node.metadata.memory_type == "WorkingMemory" or node.metadata.type == "reasoning" \
                or node.metadata.hierarchy_level != "fact":
            continue
        this = await asof.live_at(deps, event.cube_id, node, asof.position(node),
                                  strictly_before=False)
        if this is None:
            continue
        with tracing.span("memstream.optimizer.relations", {"memstream.node_id": node.id}):
            out += await relate(event, deps, this)
        with tracing.span("memstream.optimizer.follows"):
            out += await follows(event, deps, this)
        with tracing.span("memstream.optimizer.aggregate"):
            out += await aggregate(event, deps, this)
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
