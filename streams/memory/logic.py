"""Add stage (SPEC §3.2, steps 1, 2, 5, 6, 7): embed, store, enforce capacities, announce.

Pure async logic: extracted memories and ``Deps`` in, events to publish out.
Writes are idempotent upserts keyed by deterministic ids, so a replayed or
redelivered item changes nothing and announces nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from streams.memory.merge import apply, find_conflict, resolve
from streams.runtime import Deps, Outgoing, Record
from topics.events import ExtractedMemory, MemoryUpdate, ReorganizeEvent
from topics.ids import derived_event_id, stable_id, working_copy_id
from topics.models import Edge, MemoryItem, MemoryMetadata, MemoryType, StoredMemoryType
from topics.registry import BY_SUFFIX, MEMORY_UPDATES

log = logging.getLogger("memstream.memory")
STAGE = "memory.add"


def node_id_for(item: ExtractedMemory) -> str:
    """The extractor's deterministic id, or one derived from the event id for direct adds."""
    return item.id or stable_id("direct", item.cube_id, item.event_id)


def build_node(item: ExtractedMemory) -> MemoryItem:
    """The long-term node for an extracted item.

    Timestamps come from the event, not the wall clock, so a replay writes the same
    node; items of one chunk are spaced by a microsecond so FIFO order is stable.
    """
    stamp = item.occurred_at + timedelta(microseconds=item.index)
    return MemoryItem(
        id=node_id_for(item),
        memory=item.memory,
        metadata=MemoryMetadata(
            user_id=item.user_id,
            cube_id=item.cube_id,
            session_id=item.session_id,
            memory_type=item.memory_type,
            status="activated",
            type=item.type,
            key=item.key or _default_key(item.memory),
            tags=item.tags,
            entities=item.entities,
            hierarchy_level=item.hierarchy_level,
            background=item.background,
            source=item.source,
            sources=item.sources,
            confidence=item.confidence,
            visibility=item.visibility,
            created_at=stamp,
            updated_at=stamp,
            memory_time=item.memory_time,
        ),
    )


def working_copy(node: MemoryItem) -> MemoryItem:
    """Every new memory also enters working memory (SPEC §3.2 step 2)."""
    return MemoryItem(
        id=working_copy_id(node.id),
        memory=node.memory,
        metadata=node.metadata.model_copy(
            update={"memory_type": "WorkingMemory", "origin_id": node.id}
        ),
    )


def _default_key(text: str) -> str:
    words = text.split()
    return " ".join(words[:6]) if len(words) > 1 else text[:24]


def capacity_of(deps: Deps, memory_type: MemoryType) -> int:
    cfg = deps.settings.memory
    match memory_type:
        case "WorkingMemory":
            return cfg.working_memory_capacity
        case "LongTermMemory":
            return cfg.long_term_memory_capacity
        case "UserMemory":
            return cfg.user_memory_capacity
        case "EpisodicMemory":
            return cfg.episodic_memory_capacity


async def add_memories(records: Sequence[Record[ExtractedMemory]], deps: Deps) -> list[Outgoing]:
    """Store a batch of one cube's extracted memories; returns the updates to announce."""
    if not records:
        return []
    cube_id = records[0].value.cube_id
    if any(r.value.cube_id != cube_id for r in records):
        raise ValueError("add_memories takes the records of one cube")

    # Unique by node id, first occurrence wins (a chunk published twice in one batch).
    unique: dict[str, Record[ExtractedMemory]] = {}
    for record in records:
        unique.setdefault(node_id_for(record.value), record)
    existing = {n.id for n in await deps.graph.get_nodes(cube_id, list(unique))}
    fresh = [r for nid, r in unique.items() if nid not in existing]
    if not fresh:
        return []

    nodes = [build_node(r.value) for r in fresh]
    vectors = await deps.embedder.embed_passages([n.memory for n in nodes])
    rows = [vector.tolist() for vector in vectors]
    writes: list[tuple[MemoryItem, Sequence[float]]] = []
    for node, row in zip(nodes, rows, strict=True):
        writes.append((node, row))
        if node.metadata.memory_type != "EpisodicMemory":  # episodes stay out of working memory
            writes.append((working_copy(node), row))
    await deps.store.write(writes)
    if provenance := episode_edges(nodes):
        await deps.graph.add_edges(cube_id, provenance)

    out: list[Outgoing] = []
    now = deps.clock()
    archived_here: set[str] = set()
    for i, (node, row, record) in enumerate(zip(nodes, rows, fresh, strict=True)):
        merge = None
        episode = node.metadata.memory_type == "EpisodicMemory"
        if (deps.settings.memory.conflict_detection and not episode
                and node.id not in archived_here):
            later = frozenset(n.id for n in nodes[i + 1:])
            found = await find_conflict(node, row, deps, later)
            if found is not None:
                old, _score, relation, reason = found
                merge = await resolve(old, node, row, relation, reason, deps)
        base: dict[str, Any] = {
            "user_id": node.metadata.user_id, "cube_id": cube_id, "occurred_at": now,
            "stage": STAGE, "cause_event_id": record.value.event_id,
            # the source chunk's position when there is one, else the item's own
            "origin": record.value.origin or record.origin}
        if merge is None:
            related = () if episode else (working_copy_id(node.id),)
            out.append(Outgoing(MEMORY_UPDATES, MemoryUpdate(
                event_id=derived_event_id("added", node.id), action="added", node_id=node.id,
                node=node, related_ids=related, **base)))
            continue
        await apply(merge, deps)
        if merge.kept.id == node.id and merge.kept.memory != node.memory:
            await deps.store.write([(working_copy(merge.kept), merge.kept_vector)])
        archived_here.add(merge.archived.id)
        out.append(Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("merged", merge.kept.id, merge.archived.id),
            action="merged", node_id=merge.kept.id, node=merge.kept,
            related_ids=(merge.archived.id,), reason=f"{merge.relation}: {merge.reason}",
            **base)))
        out.append(Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("archived", merge.archived.id), action="archived",
            node_id=merge.archived.id, node=merge.archived,
            related_ids=(merge.kept.id,), reason=f"merged into {merge.kept.id}", **base)))

    touched: set[MemoryType] = {"WorkingMemory", *(n.metadata.memory_type for n in nodes)}
    for memory_type in sorted(touched):
        out.extend(await enforce_capacity(deps, cube_id, nodes[0].metadata.user_id, memory_type))

    by_type: dict[StoredMemoryType, list[str]] = {}
    for node, record in zip(nodes, fresh, strict=True):
        memory_type = record.value.memory_type
        if memory_type != "EpisodicMemory":  # the optimizer organizes facts, not transcripts
            by_type.setdefault(memory_type, []).append(node.id)
    for memory_type, ids in sorted(by_type.items()):
        event = ReorganizeEvent(
            event_id=derived_event_id("reorganize-add", *ids),
            user_id=nodes[0].metadata.user_id,
            cube_id=cube_id,
            occurred_at=now,
            op="add",
            node_ids=tuple(ids),
            memory_type=memory_type,
            session_id=nodes[0].metadata.session_id,
        )
        out.append(Outgoing(BY_SUFFIX[event.topic_suffix], event))
    return out


def episode_edges(nodes: Sequence[MemoryItem]) -> list[Edge]:
    """``EXTRACTED_FROM`` from each memory to the episode it was extracted from (its
    ``memory`` source), so provenance reads both ways: a fact's episode, an episode's facts."""
    return [Edge(source=node.id, target=ref.memory_id, type="EXTRACTED_FROM")
            for node in nodes for ref in node.metadata.sources
            if ref.kind == "memory" and ref.memory_id and ref.memory_id != node.id]


async def enforce_capacity(
    deps: Deps, cube_id: str, user_id: str, memory_type: MemoryType
) -> list[Outgoing]:
    """Remove the oldest activated items of a type beyond its capacity (FIFO by updated_at)."""
    removed = await deps.graph.remove_oldest(cube_id, memory_type, capacity_of(deps, memory_type))
    if not removed:
        return []
    await deps.vectors.delete(cube_id, removed)
    now = deps.clock()
    log.info("cube %s: %s over capacity, removed %d oldest", cube_id, memory_type, len(removed))
    return [
        Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("removed", node_id),
            user_id=user_id,
            cube_id=cube_id,
            occurred_at=now,
            action="removed",
            stage=STAGE,
            node_id=node_id,
            reason=f"{memory_type} capacity {capacity_of(deps, memory_type)} exceeded",
        ))
        for node_id in removed
    ]
