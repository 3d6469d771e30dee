"""One node's decision in the add stage: activate it, merge it with what it repeats or
contradicts, or announce again what an earlier attempt decided.

A decision is recorded in the store before it is applied (a ``generated`` node, a
``MERGED_TO`` edge), so a redelivered item applies it, never takes it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from memstream.kafka import tracing
from memstream.streams.core import validity
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
from memstream.streams.core.review import (
    Verdict,
    record_review,
    recorded_review,
    review,
)
from memstream.streams.core.validity import copy_removed
from memstream.streams.core.working_memory import working_copy
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import MemoryUpdate
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES

log = logging.getLogger("memstream.memory")


async def review_chunk(chunk: str, ids: Sequence[str], nodes: dict[str, MemoryItem],
                       vectors: dict[str, list[float]], deps: Deps,
                       new: Collection[str]) -> dict[str, Verdict | None]:
    """Verdicts for a chunk's undecided facts in one call; a fact whose merge an earlier
    attempt recorded is applied from the record instead (never asked again). ``new``: facts
    no earlier attempt wrote (nothing on record for them).

    The verdicts are kept (``record_review``) before any is applied, until all are
    (``decide_all`` drops them): an attempt cut short has changed what the chunk's facts
    would find as candidates (a statement it closed no longer holds, one it merged away is
    archived), so asking again could name another candidate. A redelivery takes the first
    attempt's verdicts instead."""
    cube_id = next(iter(nodes.values())).metadata.cube_id
    todo = [nid for nid in ids
            if nid in new or await recorded_merge(deps, cube_id, nid) is None]
    verdicts: dict[str, Verdict | None] = dict.fromkeys(ids)
    if not todo:
        return verdicts
    if not all(n in new for n in todo) and (
            earlier := await recorded_review(deps, cube_id, chunk)) is not None:
        verdicts.update(await earlier.verdicts_for(deps, cube_id, todo))
        return verdicts
    found = await review([(nodes[n], vectors[n]) for n in todo], deps)
    if any(v is not None for v in found.values()):
        await record_review(deps, cube_id, chunk, found)
    verdicts.update(found)
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
    copy = [] if archived == adding else [copy_removed(archived, f"merged into {kept}", base)]
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
    # frozen nodes the judge would have merged or closed: (node, what was refused, why)
    spared: list[tuple[MemoryItem, str, str]] = []
    suspected: list[tuple[MemoryItem, str]] = []  # rules mode: contradictions kept apart
    # what an earlier attempt closed (recorded by its edge), closed and announced again
    closing = [] if new else await validity.apply_recorded(deps, node, base)
    if merge is None and verdict is not None:
        old = await deps.query.get_node(cube_id, verdict.candidate.id)
        if old is not None and old.metadata.status == "activated":
            if verdict.relation == "supersedes":
                if old.metadata.superseded_by == node.id:
                    pass  # an earlier attempt closed it: applied again above
                elif old.metadata.frozen:
                    spared.append((old, f"closing its validity by {node.id}", verdict.reason))
                elif (why := validity.held_back(old, node)) is not None:
                    log.info("cube %s: %s not closed by %s: %s", cube_id, old.id, node.id, why)
                else:
                    closing += await validity.close(deps, old, node, verdict.reason, base)
            elif old.metadata.memory_type != node.metadata.memory_type:
                pass  # compared across types for a change only: never merged
            elif verdict.relation == "contradictory" and guesses(deps):
                suspected.append((old, verdict.reason))  # without a model: never on a guess
            elif old.metadata.frozen:
                spared.append((old, f"merge with {node.id}",
                               f"{verdict.relation}: {verdict.reason}"))
            else:
                merge = await resolve(old, node, row, verdict.relation, verdict.reason, deps,
                                      fused=verdict.fused)
    refusals = [refused(f, node.id, what, why, base, node.id) for f, what, why in spared]
    # Recorded before the node is activated, like a merge decision: a redelivery re-decides.
    if conflicts := conflict_edges(node, suspected):
        await deps.store.add_edges(cube_id, conflicts)
    if merge is None:
        # copy and activation written together (``Activations``): activation marks it decided
        held.add(node, row)
        return [*refusals, added(node, base), *closing, *linked(conflicts, base)]
    extra = [(working_copy(merge.kept), merge.kept_vector)] if merge.kept.id == node.id else []
    with tracing.span("memstream.memory.write", {"memstream.outcome": "merged"}):
        await apply(merge, deps, decided_by=node.id, extra=extra)
    return [*refusals, *merged(merge, base, node.id), *closing, *linked(conflicts, base)]


async def redeliver(node: MemoryItem, base: dict[str, Any], deps: Deps) -> list[Outgoing]:
    """A node decided by an earlier attempt: finish its units and announce it again."""
    cube_id = node.metadata.cube_id
    recorded = await recorded_merge(deps, cube_id, node.id)
    conflicts = linked(await recorded_conflicts(deps, cube_id, node.id), base)
    conflicts = [*await validity.apply_recorded(deps, node, base), *conflicts]
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

