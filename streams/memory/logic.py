"""Add stage: embed, store, enforce capacities, announce.

Pure async logic: extracted memories and ``Deps`` in, events to publish out.
Writes are idempotent upserts keyed by deterministic ids, so a replayed or
redelivered item changes nothing in the stores, and announces again what its first
delivery announced, under the same event ids (consumers dedupe by id).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from memstream.history.snapshots import node_of_item
from memstream.kafka import tracing
from memstream.streams.core.conflicts import conflict_edges, guesses, linked, recorded_conflicts
from memstream.streams.core.lifecycle import refused
from memstream.streams.core.merge import (
    HARD_UPDATE,
    Merge,
    apply,
    finish,
    merge_reason,
    parse_note,
    recorded_merge,
    resolve,
)
from memstream.streams.core.review import Verdict, review
from memstream.streams.core.working_memory import working_copy
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.memory import chunks
from memstream.streams.memory.announce import fold_evictions, slim_added
from memstream.streams.memory.chunks import chunk_key
from memstream.streams.runtime.stage import Deps, Outgoing, Record
from memstream.streams.text.words import short_title
from memstream.topics.events import ExtractedMemory, MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import derived_event_id, stable_id, working_copy_id
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
    cube_id = records[0].value.cube_id
    if any(r.value.cube_id != cube_id for r in records):
        raise ValueError("add_memories takes the records of one cube")

    # Unique by node id, first occurrence wins (a chunk published twice in one batch).
    unique: dict[str, Record[ExtractedMemory]] = {}
    for record in records:
        unique.setdefault(node_id_for(record.value), record)
    nodes = {nid: build_node(r.value) for nid, r in unique.items()}
    stored = {n.id: n for n in await deps.query.get_nodes(cube_id, list(unique))}
    # Nodes no earlier attempt wrote: none of them has a merge on record (never looked up).
    new = set(unique) - set(stored)
    # Undecided: new, or written by an attempt that stopped before its decision was applied.
    pending = [nid for nid in unique
               if nid not in stored or stored[nid].metadata.status == "generated"]
    vectors: dict[str, list[float]] = {}
    if pending:
        with tracing.span("memstream.memory.embed", {"memstream.texts": len(pending)}):
            embedded = await node_vectors(deps.embedder, [nodes[nid] for nid in pending])
        vectors = dict(zip(pending, embedded, strict=True))
    writes: list[tuple[MemoryItem, Sequence[float]]] = []
    for nid in pending:
        node, row = nodes[nid], vectors[nid]
        if judged(node, deps):
            writes.append((node.evolve(status="generated"), row))
        else:
            writes.append((node, row))
            if not is_episode(node):  # episodes stay out of working memory
                writes.append((working_copy(node), row))
    with tracing.span("memstream.memory.write", {"memstream.nodes": len(writes)}):
        await deps.store.write(writes)
        if provenance := episode_edges(list(nodes.values())):
            await deps.store.add_edges(cube_id, provenance)

    out: list[Outgoing] = []
    now = deps.clock()
    verdicts: dict[str, Verdict | None] = {}
    partial = chunks.heads(unique, nodes) if deps.settings.memory.conflict_detection else set()
    # Facts decided independent are activated together: one write for a chunk's facts
    # instead of one each (each write is a graph and a vector round trip). Written before
    # anything else reads the store: the next chunk's review, a merge, a redelivered fact.
    held = Activations(deps)
    for nid, record in unique.items():
        node = nodes[nid]
        base: dict[str, Any] = {
            "user_id": node.metadata.user_id, "cube_id": cube_id, "occurred_at": now,
            "stage": STAGE, "cause_event_id": record.value.event_id,
            # the source chunk's position when there is one, else the item's own
            "origin": record.value.origin or record.origin}
        if nid in vectors and judged(node, deps):
            if chunk_key(record) in partial:
                continue  # decided with the chunk's last fact (streams.memory.chunks)
            if nid not in verdicts:  # the chunk's first undecided fact: judge them all at once
                await held.flush()
                earlier = await chunks.undecided(deps, node, unique)
                rows = {**vectors, **{n.id: list(v) for n, v in earlier}}
                with tracing.span("memstream.memory.judge", {"memstream.node_id": nid}):
                    verdicts.update(await review_chunk(
                        [*(n.id for n, _ in earlier),
                         *(n for n, r in unique.items() if n in vectors
                           and judged(nodes[n], deps) and chunk_key(r) == chunk_key(record))],
                        {**nodes, **{n.id: n for n, _ in earlier}}, rows, deps, new))
                for sibling, sibling_row in earlier:  # announced as their items would be
                    out += await decide(sibling, sibling_row, {
                        **base, "user_id": sibling.metadata.user_id,
                        "cause_event_id": derived_event_id("extracted", sibling.id)},
                        deps, verdicts.get(sibling.id), held)
            out += await decide(node, vectors[nid], base, deps, verdicts.get(nid), held,
                                new=nid in new)
        elif nid in vectors:
            out.append(added(node, base))
        else:
            await held.flush()
            if record.value.index == record.value.count - 1 and judged(node, deps) \
                    and deps.settings.memory.conflict_detection:
                # the chunk's last fact decided the facts an earlier batch left undecided:
                # delivered again, it announces them again (their first announcement may be
                # what a broker lost), under the same ids
                for sibling in await chunks.decided_with(deps, node, unique):
                    out += await redeliver(sibling, {
                        **base, "user_id": sibling.metadata.user_id,
                        "cause_event_id": derived_event_id("extracted", sibling.id)}, deps)
            out += await redeliver(node, base, deps)

    await held.flush()
    out = slim_added(out, records)
    touched: set[MemoryType] = {"WorkingMemory", *(n.metadata.memory_type for n in nodes.values())}
    for memory_type in sorted(touched):
        evicted = await enforce_capacity(deps, cube_id, records[0].value.user_id, memory_type)
        out = fold_evictions(out, evicted, STAGE) if memory_type == "WorkingMemory" \
            else [*out, *evicted]
    # One reorganize event per chunk (the optimizer asks one question for all its facts),
    # named by its items; an item added on its own is a chunk of one.
    groups: dict[str, list[Record[ExtractedMemory]]] = {}
    for record in unique.values():
        if record.value.memory_type != "EpisodicMemory":  # the optimizer organizes facts
            groups.setdefault(chunk_key(record), []).append(record)
    for key, group in groups.items():
        if key in partial:
            continue  # its event comes with the chunk's last fact, naming all its facts
        ids = tuple(node_id_for(r.value) for r in group)
        if stored_ids := await chunks.chunk_facts(deps, nodes[ids[0]]):  # a chat chunk
            ids = tuple(sorted(set(ids) | set(stored_ids)))
        types = {r.value.memory_type for r in group}
        first = group[0].value
        kind = first.memory_type if first.memory_type != "EpisodicMemory" else None
        event = ReorganizeEvent(
            event_id=derived_event_id("reorganize-add", *ids), user_id=first.user_id,
            cube_id=cube_id, occurred_at=now, op="add", node_ids=ids,
            memory_type=kind if len(types) == 1 else None,
            session_id=first.session_id)
        out.append(Outgoing(BY_SUFFIX[event.topic_suffix], event))
    return out


async def review_chunk(ids: Sequence[str], nodes: dict[str, MemoryItem],
                       vectors: dict[str, list[float]], deps: Deps,
                       new: Collection[str]) -> dict[str, Verdict | None]:
    """Verdicts for a chunk's undecided facts in one call; a fact whose merge an earlier
    attempt recorded is applied from the record instead (never asked again). ``new``: facts
    no earlier attempt wrote (nothing on record for them)."""
    cube_id = next(iter(nodes.values())).metadata.cube_id
    todo = [nid for nid in ids
            if nid in new or await recorded_merge(deps, cube_id, nid) is None]
    verdicts: dict[str, Verdict | None] = dict.fromkeys(ids)
    if todo:
        verdicts.update(await review([(nodes[n], vectors[n]) for n in todo], deps))
    return verdicts


def is_episode(node: MemoryItem) -> bool:
    return node.metadata.memory_type == "EpisodicMemory"


def judged(node: MemoryItem, deps: Deps) -> bool:
    """Whether the node goes through conflict detection (facts, when it is on)."""
    return deps.settings.memory.conflict_detection and not is_episode(node)


def added(node: MemoryItem, base: dict[str, Any]) -> Outgoing:
    related = () if is_episode(node) else (working_copy_id(node.id),)
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("added", node.id), action="added", node_id=node.id,
        node=node, related_ids=related, **base))


def merged(merge: Merge, base: dict[str, Any], adding: str) -> list[Outgoing]:
    """``merged`` and ``archived``, and ``removed`` for the archived node's working copy
    (``adding``: the node being added, whose copy never existed if it is the one archived).

    The copy's removal is announced whether the merge or an earlier eviction took it out
    (same id as the eviction's): which of the two happens first depends on how the add
    stage's input was batched, and the announcements must not."""
    kept, archived = merge.kept.id, merge.archived.id
    copy = [] if archived == adding else [Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("removed", working_copy_id(archived)), action="removed",
        node_id=working_copy_id(archived), reason=f"merged into {kept}", **base))]
    return [
        Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("merged", kept, archived), action="merged",
            node_id=kept, node=merge.kept, related_ids=(archived,),
            reason=merge_reason(merge), **base)),
        Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("archived", archived), action="archived",
            node_id=archived, node=merge.archived, related_ids=(kept,),
            reason=f"merged into {kept}", **base)), *copy]


class Activations:
    """Nodes decided independent, activated (with their working copies) by one write."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.writes: list[tuple[MemoryItem, Sequence[float]]] = []

    def add(self, node: MemoryItem, row: Sequence[float]) -> None:
        # the copy first: the node's activation marks it decided (a redelivery re-decides
        # a node written generated, and finishes the copy of an activated one)
        self.writes += [(working_copy(node), row), (node, row)]

    async def flush(self) -> None:
        if self.writes:
            writes, self.writes = self.writes, []
            with tracing.span("memstream.memory.write",
                              {"memstream.outcome": "added", "memstream.nodes": len(writes)}):
                await self.deps.store.write(writes)


async def decide(
    node: MemoryItem, row: Sequence[float], base: dict[str, Any], deps: Deps,
    verdict: Verdict | None, held: Activations, new: bool = False,
) -> list[Outgoing]:
    """Apply the chunk review's ``verdict`` on a ``generated`` node (None: independent).

    A decision an earlier attempt recorded but did not apply is applied, not taken again. A
    verdict naming a candidate that an earlier fact of the chunk merged away is dropped.
    An independent node is activated by ``held`` (its caller writes it before the store is read
    again). ``new``: no earlier attempt wrote the node, so none recorded a decision for it.
    """
    cube_id = node.metadata.cube_id
    merge = None
    recorded = None if new else await recorded_merge(deps, cube_id, node.id)
    if recorded is not None or verdict is not None:
        await held.flush()  # a merge reads the store: what was decided before is in it
    if recorded is not None:
        edge, note = recorded
        partner = await deps.query.get_node(
            cube_id, edge.source if edge.target == node.id else edge.target)
        if partner is not None:
            relation, reason = parse_note(note)
            merge = await resolve(partner, node, row, relation, reason, deps)
        if merge is None or (edge.source, edge.target) != (merge.archived.id, merge.kept.id):
            await deps.store.delete_edge(cube_id, edge.source, edge.target, "MERGED_TO")
    spared: list[tuple[MemoryItem, str]] = []  # frozen nodes the judge would have merged
    suspected: list[tuple[MemoryItem, str]] = []  # rules mode: contradictions kept apart
    if merge is None and verdict is not None:
        old = await deps.query.get_node(cube_id, verdict.candidate.id)
        if old is not None and old.metadata.status == "activated":
            if verdict.relation == "contradictory" and guesses(deps):
                suspected.append((old, verdict.reason))  # without a model: never on a guess
            elif old.metadata.frozen:
                spared.append((old, f"{verdict.relation}: {verdict.reason}"))
            else:
                merge = await resolve(old, node, row, verdict.relation, verdict.reason, deps,
                                      fused=verdict.fused)
    refusals = [refused(f, node.id, f"merge with {node.id}", why, base, node.id)
                for f, why in spared]
    # Recorded before the node is activated, like a merge decision: a redelivery re-decides.
    if conflicts := conflict_edges(node, suspected):
        await deps.store.add_edges(cube_id, conflicts)
    if merge is None:
        # copy and activation written together (``Activations``): activation marks it decided
        held.add(node, row)
        return [*refusals, added(node, base), *linked(conflicts, base)]
    extra = [(working_copy(merge.kept), merge.kept_vector)] if merge.kept.id == node.id else []
    with tracing.span("memstream.memory.write", {"memstream.outcome": "merged"}):
        await apply(merge, deps, decided_by=node.id, extra=extra)
    return [*refusals, *merged(merge, base, node.id), *linked(conflicts, base)]


async def redeliver(node: MemoryItem, base: dict[str, Any], deps: Deps) -> list[Outgoing]:
    """A node decided by an earlier attempt: finish its units and announce it again."""
    cube_id = node.metadata.cube_id
    recorded = await recorded_merge(deps, cube_id, node.id)
    conflicts = linked(await recorded_conflicts(deps, cube_id, node.id), base)
    if recorded is None:
        await deps.store.complete(cube_id, [node.id, working_copy_id(node.id)],
                                  partial(node_vectors, deps.embedder))
        return [added(node, base), *conflicts]
    edge, note = recorded
    found = {n.id: n for n in await deps.query.get_nodes(cube_id, [edge.target, edge.source])}
    kept, archived = found.get(edge.target), found.get(edge.source)
    relation, reason = parse_note(note)
    if kept is None or archived is None:  # deleted since: announce what is known
        log.info("cube %s: merge of %s into %s no longer in the graph", cube_id, edge.source,
                 edge.target)
        kept = kept or node
        archived = archived or node.evolve(status="archived")
    await deps.store.complete(cube_id, [kept.id, archived.id, working_copy_id(kept.id)],
                              partial(node_vectors, deps.embedder))
    merge = Merge(kept.evolve(status="activated"), (), archived.evolve(status="archived"),
                  relation, reason, reason.endswith(HARD_UPDATE))
    if kept.metadata.status == "activated":
        await finish(merge, deps)
    return [*merged(merge, base, node.id), *conflicts]


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
