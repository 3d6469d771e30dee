"""Optimizer, ``add``: the links, implied facts and concepts of new facts, asked in one call
(``prompts.organize``) instead of one per neighbour, per pair and per group. The facts of
consecutive add events are organized together, and end as the events would have left them
one at a time: a replay organizes event by event, a backlogged worker in batches.

Candidates per new fact: its earlier live neighbours (tag overlap, then vector, as of the
log: ``asof``), kept only when their cosine to the fact reaches
``reorganize.relation_min_similarity``, most similar first, at most
``reorganize.relation_candidates``. Concept groups: as before, a group of earlier facts
sharing two subject tags with the new one, asked only when its concept does not exist yet.
Everything written has a deterministic id and every edge is a MERGE: a redelivered event
writes and announces the same things again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memstream.streams.embed.nodes import node_vectors
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.aggregate import AggregateContext, AggregateResponse
from memstream.streams.prompts.inference import InferenceContext, InferenceResponse, novel_fact
from memstream.streams.prompts.members import MemberNote, is_generic, repeats_a_member
from memstream.streams.prompts.organize import ORGANIZE, OrganizeContext, OrganizeResponse
from memstream.streams.prompts.relations import RelationNode, resolved_direction
from memstream.streams.reorganize import asof
from memstream.streams.reorganize.writes import (
    EDGE_OF,
    centrality_of,
    complete,
    moved,
    update,
    write_edges,
    written_by,
)
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import ReorganizeEvent
from memstream.topics.ids import stable_id
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata

log = logging.getLogger("memstream.reorganize")


async def neighbours(deps: Deps, node: MemoryItem) -> list[asof.Live]:
    """Earlier live facts worth asking about: tag overlap first, then by vector; the most
    similar ones above the floor, capped."""
    cfg = deps.settings.reorganize
    limit = deps.settings.reorganize.neighbors_per_node
    found: dict[str, asof.Live] = {}
    for live in [*await asof.tag_neighbours(deps, node, node.metadata.tags, 1, limit),
                 *await asof.vector_neighbours(deps, node, limit)]:
        found.setdefault(live.node.id, live)
    if not found:
        return []
    cube = node.metadata.cube_id
    rows = {r.id: np.asarray(r.vector, dtype=np.float64)
            for r in await deps.query.vectors(cube, [node.id, *found])}
    if node.id not in rows:
        return []
    me = rows[node.id] / max(float(np.linalg.norm(rows[node.id])), 1e-12)
    scored = [(float(me @ rows[i]) / max(float(np.linalg.norm(rows[i])), 1e-12), live)
              for i, live in found.items() if i in rows]
    kept = [(s, lv) for s, lv in scored if s >= cfg.relation_min_similarity]
    kept.sort(key=lambda p: (-p[0], p[1].node.id))
    return [lv for _, lv in kept[: cfg.relation_candidates]]


New = tuple[ReorganizeEvent, asof.Live]  # a new fact, with the add event that brought it


@dataclass
class Concept:
    """A tag group of one new fact and what is known of its concept node."""

    event: ReorganizeEvent
    this: asof.Live
    members: list[MemoryItem]
    holders: dict[str, str]
    shared: list[str]
    concept_id: str
    existing: MemoryItem | None
    ctx: AggregateContext | None  # the question, when the concept must be decided


async def plan_concept(event: ReorganizeEvent, deps: Deps, this: asof.Live) -> Concept | None:
    """The group a concept node may sum up, if the new fact shares subject tags with two."""
    node = this.node
    tags = [t for t in node.metadata.tags if not is_generic(t)]
    if len(tags) < 2:
        return None
    earlier = await asof.tag_neighbours(deps, node, tags, 2, 10)
    members = [node, *(lv.node for lv in earlier)]
    if len(members) < 3:
        return None
    holders = {node.id: this.holder, **{lv.node.id: lv.holder for lv in earlier}}
    shared = sorted(set(tags).intersection(*(set(m.metadata.tags) for m in members[1:])))
    concept_id = stable_id("aggregate", event.cube_id, *sorted(shared or tags))
    existing = await deps.query.get_node(event.cube_id, concept_id)
    ctx = None
    # A concept records the position of the fact that made it (``created_at``): one made
    # here, by an earlier delivery, is decided again; one made before is joined.
    if existing is None or existing.metadata.created_at > node.metadata.updated_at:
        ctx = AggregateContext(members=[MemberNote.of(m) for m in members],
                               shared_tags=shared or tags,
                               centrality=await centrality_of(deps, event.cube_id, members))
    return Concept(event, this, members, holders, shared, concept_id, existing, ctx)


async def apply_concept(event: ReorganizeEvent, deps: Deps, plan: Concept,
                        answer: AggregateResponse | None) -> list[Outgoing]:
    """Write the concept (if decided so) and the members' ``AGGREGATE_TO`` edges."""
    md = plan.this.node.metadata
    existing = plan.existing
    if plan.ctx is not None and (answer is None or not answer.create or not answer.value
                                 or repeats_a_member(answer.value,
                                                     (m.memory for m in plan.members))):
        return []  # no concept that only repeats one of its members word for word
    out: list[Outgoing] = []
    if existing is None:
        assert answer is not None  # noqa: S101 - a plan without a concept asks
        existing = MemoryItem(id=plan.concept_id, memory=answer.value, metadata=MemoryMetadata(
            user_id=md.user_id, cube_id=md.cube_id, memory_type=md.memory_type, type="topic",
            key=answer.key or ", ".join(plan.shared), tags=tuple(answer.tags or plan.shared),
            hierarchy_level="concept", background=answer.background, source="retrieved",
            written_by=written_by(deps), created_at=md.updated_at, updated_at=md.updated_at))
        [vector] = await node_vectors(deps.embedder, [existing])
        await deps.store.write([(existing, vector)])
    else:
        await complete(deps, event.cube_id, [plan.concept_id])
    if existing.metadata.created_at == md.updated_at:
        out.append(update(event, deps, "added", node=existing, reason="aggregate concept"))
    edges = [Edge(source=m.id, target=plan.concept_id, type="AGGREGATE_TO")
             for m in plan.members]
    await write_edges(deps, event.cube_id, [moved(e, plan.holders) for e in edges])
    out.append(update(event, deps, "linked", edges=edges, reason="aggregate"))
    return out


async def write_inferred(event: ReorganizeEvent, deps: Deps, pair: InferenceContext,
                         source: MemoryItem, target: MemoryItem,
                         fact: str | None) -> list[Outgoing]:
    """The fact a CAUSE/CONDITION pair implies, as a reasoning node (or nothing)."""
    node_id = stable_id("inferred", event.cube_id, source.id, target.id)
    edges = [Edge(source=node_id, target=source.id, type="INFERRED_FROM"),
             Edge(source=node_id, target=target.id, type="INFERRED_FROM")]
    if (made := await deps.query.get_node(event.cube_id, node_id)) is not None:
        # made by an earlier delivery: finish it and announce it again (same ids)
        await complete(deps, event.cube_id, [node_id])
        await deps.store.add_edges(event.cube_id, edges)
        return [update(event, deps, "added", node=made, edges=edges, reason="inferred")]
    fact = novel_fact(pair, InferenceResponse(fact=fact))
    if not fact:
        return []
    md = target.metadata
    node = MemoryItem(id=node_id, memory=fact, metadata=MemoryMetadata(
        user_id=md.user_id, cube_id=md.cube_id, session_id=md.session_id,
        memory_type="LongTermMemory", type="reasoning", key=f"inferred: {md.key}",
        tags=tuple(dict.fromkeys((*source.metadata.tags, *md.tags))), source="retrieved",
        background=f"inferred from {pair.relation}: {pair.reason}"[:500],
        written_by=written_by(deps),
        confidence=min(source.metadata.confidence, md.confidence) * 0.8,
        created_at=max(source.metadata.updated_at, md.updated_at),
        updated_at=max(source.metadata.updated_at, md.updated_at)))
    [vector] = await node_vectors(deps.embedder, [node])
    await deps.store.write([(node, vector)])
    await deps.store.add_edges(event.cube_id, edges)
    return [update(event, deps, "added", node=node, edges=edges, reason="inferred")]


@dataclass(frozen=True)
class Pair:
    event: ReorganizeEvent  # the add event of the new fact that made the pair
    old: MemoryItem
    new: MemoryItem
    holders: dict[str, str]


async def organize(deps: Deps, lives: Sequence[New]) -> list[Outgoing]:
    """Links, implied facts and concepts for new live facts, in log order: one call at most.

    What is written is what organizing each event alone, in order, writes (a replay does
    that). A pair's verdict and a concept group's answer depend on nothing else in the call;
    what does depend on order is a concept: a later event finds the concept an earlier one
    made, and joins it, or asks again for its own group when the earlier one was declined.
    So each event asks its own groups, and a group whose concept an earlier event of the
    batch made is joined instead."""
    pairs: list[Pair] = []
    for event, this in lives:
        for other in await neighbours(deps, this.node):
            # A pair is shown in time order, so its verdict does not depend on which of the
            # two events happens to be processed (or replayed) second.
            old, new = sorted((this.node, other.node),
                              key=lambda n: (n.metadata.created_at, n.id))
            pairs.append(Pair(event, old, new, {this.node.id: this.holder,
                                                other.node.id: other.holder}))
    plans = [c for event, this in lives
             if (c := await plan_concept(event, deps, this)) is not None]
    asked: dict[tuple[str, str], int] = {}  # (event, concept id) → its group in the question
    groups: list[AggregateContext] = []
    for plan in plans:
        key = (plan.event.event_id, plan.concept_id)
        if plan.ctx is not None and key not in asked:
            asked[key] = len(groups)
            groups.append(plan.ctx)
    index: dict[str, int] = {}
    memories: list[RelationNode] = []
    for p in pairs:
        for item in (p.new, p.old):
            if item.id not in index:
                index[item.id] = len(memories)
                memories.append(RelationNode.of(item))
    ctx = OrganizeContext(memories=memories, groups=groups,
                          pairs=[(index[p.new.id], index[p.old.id]) for p in pairs])
    answer = OrganizeResponse()
    if not ctx.empty:
        try:
            answer = await deps.llm.run(ORGANIZE, ctx)
        except LLMError as exc:
            log.warning("organizing %d facts failed: %s", len(lives), exc)
    out: list[Outgoing] = []
    links: list[Edge] = []  # the decided relations, written with one store call
    for n, p in enumerate(pairs):
        verdict = answer.link_for(n)
        if verdict is None:
            continue
        pair_ctx = ctx.pair(n)
        direction = resolved_direction(pair_ctx, verdict)
        source, target = (p.old, p.new) if direction == "old_to_new" else (p.new, p.old)
        edge = Edge(source=source.id, target=target.id, type=EDGE_OF[verdict.relation],
                    reason=verdict.reason[:200])
        links.append(moved(edge, p.holders))
        # announced as decided (every time: the same id, so a redelivery dedupes)
        out.append(update(p.event, deps, "linked", edges=[edge], reason=verdict.reason[:200]))
        if (implied := InferenceContext.from_relation(pair_ctx, verdict)) is not None:
            out += await write_inferred(p.event, deps, implied, source, target,
                                        verdict.inferred)
    if links:
        await write_edges(deps, lives[0][0].cube_id, links)
    done: set[tuple[str, str]] = set()  # (event, concept id) made or declined
    touched: set[str] = set()  # concept ids an event of this batch decided
    for plan in plans:
        key = (plan.event.event_id, plan.concept_id)
        # made (or declined) for an earlier fact of the event: join it; made by an earlier
        # event: joined as that event's successor would have found it
        if key in done or (plan.ctx is not None and plan.concept_id in touched):
            again = await plan_concept(plan.event, deps, plan.this)
            if again is None or (key in done and again.ctx is not None):
                continue
            plan = again
        done.add(key)
        touched.add(plan.concept_id)
        group = asked.get(key)
        out += await apply_concept(plan.event, deps, plan,
                                   None if group is None else answer.concept_for(group))
    return out
