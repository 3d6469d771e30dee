"""Add stage: look up, write, decide, announce, enforce capacities, reorganize.

Pure async logic: extracted memories and ``Deps`` in, events to publish out.
Writes are idempotent upserts keyed by deterministic ids, so a replayed or
redelivered item changes nothing in the stores, and announces again what its first
delivery announced, under the same event ids (consumers dedupe by id).
One node's decision (activate, merge, announce again) is in ``decisions.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstream.history.snapshots import node_of_item
from memstream.kafka import tracing
from memstream.streams.core.review import Verdict, review_key
from memstream.streams.core.working_memory import working_copy
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.memory import chunks
from memstream.streams.memory.announce import fold_evictions, slim_added
from memstream.streams.memory.chunks import chunk_key
from memstream.streams.memory.decisions import (
    Activations,
    added,
    decide,
    is_episode,
    judged,
    redeliver,
    review_chunk,
)
from memstream.streams.runtime.stage import Deps, Outgoing, Record
from memstream.streams.text.words import short_title
from memstream.topics.events import ExtractedMemory, MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id, stable_id
from memstream.topics.models import Edge, MemoryItem, MemoryType
from memstream.topics.registry import BY_SUFFIX, MEMORY_UPDATES

log = logging.getLogger("memstream.memory")
STAGE = "memory.add"


def node_id_for(item: ExtractedMemory) -> str:
    """The extractor's deterministic id, or one derived from the event id for direct adds."""
    return item.id or stable_id("direct", item.cube_id, item.event_id)


def build_node(item: ExtractedMemory) -> MemoryItem:
    """The long-term node for an extracted item (``memstream/history/snapshots.py``: readers rebuild
    it from the item the same way), titled by the add stage when the item has no key."""
    return node_of_item(item, node_id_for(item), item.key or short_title(item.memory))


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


@dataclass(frozen=True)
class Batch:
    """One cube's records, unique by node id, and what earlier attempts left of them."""

    cube_id: str
    user_id: str
    records: dict[str, Record[ExtractedMemory]]  # by node id; first occurrence wins
    nodes: dict[str, MemoryItem]
    new: set[str]  # no earlier attempt wrote them: none has a merge on record
    pending: list[str]  # undecided: new, or written by an attempt that stopped before deciding
    heads: set[str]  # chunks whose last fact a later batch brings (streams.memory.chunks)


async def add_memories(records: Sequence[Record[ExtractedMemory]], deps: Deps) -> list[Outgoing]:
    """Store a batch of one cube's extracted memories; returns the updates to announce.

    Effectively once: a redelivered item reproduces every output its first delivery made or
    should have made (node, vector, working copy, ``added``/``merged``/``archived``, the
    reorganize event), under the same ids, whatever step the first delivery reached.
    A node to be judged is written ``generated`` (no candidate, not searchable) until its
    merge decision is applied; a merge decision is recorded (its ``MERGED_TO`` edge) before
    it is applied; so the store tells which step was reached and nothing is decided twice.
    """
    if not records:
        return []
    batch = await look_up(records, deps)
    vectors = await write(batch, deps)
    now = deps.clock()  # one time for every announcement of the batch
    out = await decide_all(batch, vectors, now, deps)
    out = slim_added(out, records)  # an ``added`` whose item rebuilds its node: no snapshot
    out = await enforce_capacities(batch, out, deps)
    return [*out, *await reorganize(batch, now, deps)]


async def look_up(records: Sequence[Record[ExtractedMemory]], deps: Deps) -> Batch:
    """What earlier attempts wrote tells what is left to do, so a redelivery does it once."""
    cube_id = records[0].value.cube_id
    if any(r.value.cube_id != cube_id for r in records):
        raise ValueError("add_memories takes the records of one cube")
    # Unique by node id, first occurrence wins (a chunk published twice in one batch).
    unique: dict[str, Record[ExtractedMemory]] = {}
    for record in records:
        unique.setdefault(node_id_for(record.value), record)
    nodes = {nid: build_node(r.value) for nid, r in unique.items()}
    stored = {n.id: n for n in await deps.query.get_nodes(cube_id, list(unique))}
    pending = [nid for nid in unique
               if nid not in stored or stored[nid].metadata.status == "generated"]
    heads = chunks.heads(unique, nodes) if deps.settings.memory.conflict_detection else set()
    return Batch(cube_id, records[0].value.user_id, unique, nodes, set(unique) - set(stored),
                 pending, heads)


async def write(batch: Batch, deps: Deps) -> dict[str, list[float]]:
    """Stored before any decision (a fact to judge ``generated``): the store shows the step."""
    vectors: dict[str, list[float]] = {}
    if batch.pending:
        with tracing.span("memstream.memory.embed", {"memstream.texts": len(batch.pending)}):
            embedded = await node_vectors(deps.embedder, [batch.nodes[n] for n in batch.pending])
        vectors = dict(zip(batch.pending, embedded, strict=True))
    writes: list[tuple[MemoryItem, Sequence[float]]] = []
    for nid in batch.pending:
        node, row = batch.nodes[nid], vectors[nid]
        if judged(node, deps):
            writes.append((node.evolve(status="generated"), row))
        else:
            writes.append((node, row))
            if not is_episode(node):  # episodes stay out of working memory
                writes.append((working_copy(node), row))
    with tracing.span("memstream.memory.write", {"memstream.nodes": len(writes)}):
        await deps.store.write(writes)
        if provenance := episode_edges(list(batch.nodes.values())):
            await deps.store.add_edges(batch.cube_id, provenance)
    return vectors


async def decide_all(batch: Batch, vectors: dict[str, list[float]], now: datetime,
                     deps: Deps) -> list[Outgoing]:
    """Decided in log order, so a chunk's review sees what the chunks before it became."""
    out: list[Outgoing] = []
    verdicts: dict[str, Verdict | None] = {}
    # Facts decided independent are activated together: one write for a chunk's facts
    # instead of one each (each write is a graph and a vector round trip). Written before
    # anything else reads the store: the next chunk's review, a merge, a redelivered fact.
    held = Activations(deps)
    reviewed: list[str] = []  # chunks whose verdicts are kept until they are all applied
    for nid, record in batch.records.items():
        node = batch.nodes[nid]
        base: dict[str, Any] = {
            "user_id": node.metadata.user_id, "cube_id": batch.cube_id, "occurred_at": now,
            "stage": STAGE, "cause_event_id": record.value.event_id,
            # the source chunk's position when there is one, else the item's own
            "origin": record.value.origin or record.origin}
        if nid in vectors and judged(node, deps):
            if chunk_key(record) in batch.heads:
                continue  # decided with the chunk's last fact (streams.memory.chunks)
            if nid not in verdicts:  # the chunk's first undecided fact: judge them all at once
                await held.flush()
                found, earlier = await judge_chunk(batch, nid, vectors, deps)
                verdicts.update(found)
                if any(v is not None for v in found.values()):
                    reviewed.append(review_key(chunk_key(record)))
                for sibling, sibling_row in earlier:  # announced as their items would be
                    out += await decide(sibling, sibling_row, as_cause(base, sibling), deps,
                                        verdicts.get(sibling.id), held)
            out += await decide(node, vectors[nid], base, deps, verdicts.get(nid), held,
                                new=nid in batch.new)
        elif nid in vectors:
            out.append(added(node, base))
        else:
            await held.flush()
            out += await announce_again(batch, nid, base, deps)
    await held.flush()
    await deps.store.drop_answers(batch.cube_id, reviewed)  # every verdict is applied
    return out


async def judge_chunk(
    batch: Batch, nid: str, vectors: dict[str, list[float]], deps: Deps,
) -> tuple[dict[str, Verdict | None], list[tuple[MemoryItem, Sequence[float]]]]:
    """One review for a chunk's undecided facts: the same question wherever batches cut it."""
    node, key = batch.nodes[nid], chunk_key(batch.records[nid])
    earlier = await chunks.undecided(deps, node, batch.records)
    rows = {**vectors, **{n.id: list(v) for n, v in earlier}}
    with tracing.span("memstream.memory.judge", {"memstream.node_id": nid}):
        verdicts = await review_chunk(
            key, [*(n.id for n, _ in earlier),
             *(n for n, r in batch.records.items() if n in vectors
               and judged(batch.nodes[n], deps) and chunk_key(r) == key)],
            {**batch.nodes, **{n.id: n for n, _ in earlier}}, rows, deps, batch.new)
    return verdicts, earlier


async def announce_again(batch: Batch, nid: str, base: dict[str, Any],
                         deps: Deps) -> list[Outgoing]:
    """Decided by an earlier attempt: announced again, same ids (a broker may have lost it)."""
    node, item = batch.nodes[nid], batch.records[nid].value
    out: list[Outgoing] = []
    if item.index == item.count - 1 and judged(node, deps):
        # the chunk's last fact decided the facts an earlier batch left undecided: delivered
        # again, it announces them again too
        for sibling in await chunks.decided_with(deps, node, batch.records):
            out += await redeliver(sibling, as_cause(base, sibling), deps)
    return [*out, *await redeliver(node, base, deps)]


def as_cause(base: dict[str, Any], sibling: MemoryItem) -> dict[str, Any]:
    """A fact of the chunk from an earlier batch is announced as its own item would be."""
    return {**base, "user_id": sibling.metadata.user_id,
            "cause_event_id": derived_event_id("extracted", sibling.id)}


async def enforce_capacities(batch: Batch, out: list[Outgoing], deps: Deps) -> list[Outgoing]:
    """Evicted after the batch is in, working copies named on the adds that pushed them out."""
    touched: set[MemoryType] = {"WorkingMemory",
                                *(n.metadata.memory_type for n in batch.nodes.values())}
    for memory_type in sorted(touched):
        evicted = await enforce_capacity(deps, batch.cube_id, batch.user_id, memory_type)
        out = fold_evictions(out, evicted, STAGE) if memory_type == "WorkingMemory" \
            else [*out, *evicted]
    return out


async def reorganize(batch: Batch, now: datetime, deps: Deps) -> list[Outgoing]:
    """One event per chunk naming all its facts: the optimizer asks one question per chunk."""
    # an item added on its own is a chunk of one
    groups: dict[str, list[Record[ExtractedMemory]]] = {}
    for record in batch.records.values():
        if record.value.memory_type != "EpisodicMemory":  # the optimizer organizes facts
            groups.setdefault(chunk_key(record), []).append(record)
    events: list[Outgoing] = []
    for key, group in groups.items():
        if key in batch.heads:
            continue  # its event comes with the chunk's last fact, naming all its facts
        ids = tuple(node_id_for(r.value) for r in group)
        if stored_ids := await chunks.chunk_facts(deps, batch.nodes[ids[0]]):  # a chat chunk
            ids = tuple(sorted(set(ids) | set(stored_ids)))
        types = {r.value.memory_type for r in group}
        first = group[0].value
        kind = first.memory_type if first.memory_type != "EpisodicMemory" else None
        event = ReorganizeEvent(
            event_id=derived_event_id("reorganize-add", *ids), user_id=first.user_id,
            cube_id=batch.cube_id, occurred_at=now, op="add", node_ids=ids,
            memory_type=kind if len(types) == 1 else None,
            session_id=first.session_id)
        events.append(Outgoing(BY_SUFFIX[event.topic_suffix], event))
    return events


def episode_edges(nodes: Sequence[MemoryItem]) -> list[Edge]:
    """``EXTRACTED_FROM`` from each memory to the episode it was extracted from (its
    ``memory`` source), so provenance reads both ways: a fact's episode, an episode's facts."""
    return [Edge(source=node.id, target=ref.memory_id, type="EXTRACTED_FROM")
            for node in nodes for ref in node.metadata.sources
            if ref.kind == "memory" and ref.memory_id and ref.memory_id != node.id]


async def enforce_capacity(
    deps: Deps, cube_id: str, user_id: str, memory_type: MemoryType
) -> list[Outgoing]:
    """Remove the oldest activated items of a type beyond its capacity (FIFO by updated_at).

    Announced first, deleted after: the deletion (through the store, vectors first, retried)
    runs once the ``removed`` updates are sent, so a crash in between leaves the items in
    place and the redelivered input announces and removes them again under the same ids."""
    capacity = capacity_of(deps, memory_type)
    removed = await deps.store.over_capacity(cube_id, memory_type, capacity)
    if not removed:
        return []
    now = deps.clock()
    log.info("cube %s: %s over capacity, removing %d oldest", cube_id, memory_type, len(removed))

    async def delete() -> None:
        await deps.store.delete(cube_id, removed)

    return [
        Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("removed", node_id),
            user_id=user_id,
            cube_id=cube_id,
            occurred_at=now,
            action="removed",
            stage=STAGE,
            node_id=node_id,
            reason=f"{memory_type} capacity {capacity} exceeded",
        ), then=delete if i == len(removed) - 1 else None)
        for i, node_id in enumerate(removed)
    ]
