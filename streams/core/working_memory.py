"""Working memory, shared by the add stage, the scheduler and commands.

What a working-memory copy is (``working_copy``), which nodes may enter (``admissible``),
how an entry stands for a copy (``Entry``), and the sink that makes a cube's
WorkingMemory nodes exactly an ordered list:

WorkingMemory nodes are copies of long-term nodes (``origin_id``; id from
``working_copy_id``). Applying a list writes the missing copies (vectors copied from
the long-term node), deletes every other copy of the cube (graph and vector), and
stamps ``updated_at`` descending in list order — position 0 newest — so readers,
which get working memory newest first, see the list's order. Stamps derive from the
replacement's own time, so applying the same replacement again writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from memstream.streams.core.feedback import returnable
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError, Record
from memstream.topics.events import (
    Event,
    MemoryUpdate,
    Origin,
    ReplaceWorkingMemory,
    WorkingMemoryReplacement,
)
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES

log = logging.getLogger("memstream.scheduler")
SINK_STAGE = "working-memory"


@dataclass(frozen=True)
class Entry:
    """One working-memory candidate.

    ``ref`` is what a replacement names: the long-term node id, or a WorkingMemory node's
    own id when it mirrors none. ``vector_id`` is the node whose embedding stands for it.
    """

    ref: str
    text: str
    vector_id: str
    # the message ids of the turns it came from (an episode: all of its turns)
    turns: frozenset[str] = frozenset()


def cited_turns(node: MemoryItem) -> frozenset[str]:
    return frozenset(s.message_id for s in node.metadata.sources
                     if s.kind == "message" and s.message_id)


def admissible(node: MemoryItem) -> bool:
    """Whether a node may enter working memory: not a summary, concept or inference written
    by the ``rules`` stand-in (those quote their members, already candidates themselves, and
    no model judged them; an agent reading working memory takes every item as meant), not
    called ``wrong`` by an agent, and still valid (working memory holds what is current:
    a memory called outdated, or ended by a later statement, stays out)."""
    md = node.metadata
    return not md.is_stand_in_summary and returnable(node) and md.valid_until is None


def entry_of_copy(node: MemoryItem) -> Entry:
    return Entry(ref=node.metadata.origin_id or node.id, text=node.memory, vector_id=node.id,
                 turns=cited_turns(node))


def entry_of_node(node: MemoryItem) -> Entry:
    return Entry(ref=node.id, text=node.memory, vector_id=node.id, turns=cited_turns(node))


def working_copy(node: MemoryItem) -> MemoryItem:
    """Every new memory also enters working memory."""
    return MemoryItem(
        id=working_copy_id(node.id),
        memory=node.memory,
        metadata=node.metadata.model_copy(
            update={"memory_type": "WorkingMemory", "origin_id": node.id}
        ),
    )


@dataclass
class Applied:
    """What applying a list did: the copies now in working memory, in order."""

    copy_ids: list[str] = field(default_factory=list)
    written: int = 0
    deleted: int = 0
    missing: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def describe(self) -> str:
        text = f"{len(self.copy_ids)} items: {self.written} written, {self.deleted} removed"
        if self.missing:
            text += f", {len(self.missing)} unknown or inactive ids skipped"
        if self.refused:
            text += (f", {len(self.refused)} left out (rules-mode summaries, memories "
                     "called wrong or no longer valid)")
        return text


def stamp(at: datetime, position: int) -> datetime:
    """``updated_at`` of the item at ``position``: 0 newest, one microsecond apart."""
    return at - timedelta(microseconds=position)


def target_copies(refs: Sequence[str], nodes: dict[str, MemoryItem], at: datetime,
                  capacity: int) -> tuple[list[tuple[MemoryItem, str]], list[str]]:
    """The WorkingMemory nodes for ``refs`` in order, each with the id holding its vector.

    A long-term id becomes a fresh copy of that node (its current text); a WorkingMemory
    id is kept as it is. Unknown ids and inactive long-term nodes (archived, merged) are
    returned apart; repeats count once.
    """
    targets: list[tuple[MemoryItem, str]] = []
    missing: list[str] = []
    seen: set[str] = set()
    for ref in refs:
        node = nodes.get(ref)
        if node is None or (node.metadata.memory_type != "WorkingMemory"
                            and node.metadata.status != "activated"):
            missing.append(ref)
            continue
        if node.metadata.memory_type == "WorkingMemory":
            copy, vector_id = node, node.id
        else:
            copy, vector_id = working_copy(node), node.id
        if copy.id in seen:
            continue
        seen.add(copy.id)
        position = len(targets)
        targets.append((copy.evolve(updated_at=stamp(at, position), status="activated"),
                        vector_id))
        if len(targets) == capacity:
            break
    return targets, missing


async def apply_working_memory(deps: Deps, cube_id: str, refs: Sequence[str],
                               at: datetime) -> Applied:
    """Make the cube's WorkingMemory exactly ``refs`` (at most the capacity), in order."""
    capacity = deps.settings.memory.working_memory_capacity
    nodes = {n.id: n for n in await deps.query.get_nodes(cube_id, list(dict.fromkeys(refs)))}
    # Summaries the rules stand-in wrote, and memories called wrong or no longer valid, never
    # enter working memory, whoever names them.
    refused = [ref for ref in dict.fromkeys(refs) if ref in nodes and not admissible(nodes[ref])]
    targets, missing = target_copies([r for r in refs if r not in refused], nodes, at, capacity)
    current = {c.id: c for c in await deps.query.all_of_type(cube_id, "WorkingMemory",
                                                             status=None)}
    changed = [(t, vid) for t, vid in targets if current.get(t.id) != t]
    if changed:
        stored = {r.id: list(r.vector) for r in await deps.query.vectors(
            cube_id, [vid for _, vid in changed])}
        unembedded = [t for t, vid in changed if vid not in stored]
        if unembedded:
            fresh = await node_vectors(deps.embedder, unembedded)
            for node, row in zip(unembedded, fresh, strict=True):
                stored[node.id] = row
        await deps.store.write([(t, stored[vid] if vid in stored else stored[t.id])
                                for t, vid in changed])
    keep = {t.id for t, _ in targets}
    stale = [cid for cid in current if cid not in keep]
    await deps.store.delete(cube_id, stale)
    if missing:
        log.warning("cube %s: working-memory ids unknown or inactive, skipped: %s", cube_id,
                    ", ".join(missing))
    if refused:
        log.info("cube %s: kept out of working memory (rules-mode summaries, wrong or no "
                 "longer valid): %s", cube_id,
                 ", ".join(refused))
    return Applied(copy_ids=[t.id for t, _ in targets], written=len(changed),
                   deleted=len(stale), missing=missing, refused=refused)


def announcement(cause: Event, applied: Applied, stage: str, occurred_at: datetime,
                 origin: Origin | None = None) -> Outgoing:
    """``working_memory_replaced`` on memory.updates; its id derives from the cause, so a
    re-applied replacement announces the same event again rather than a new one."""
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("working_memory_replaced", cause.event_id),
        user_id=cause.user_id, cube_id=cause.cube_id, occurred_at=occurred_at,
        action="working_memory_replaced", stage=stage, related_ids=tuple(applied.copy_ids),
        reason=applied.describe(), cause_event_id=cause.event_id, origin=origin))


async def apply_replacements(
    records: Sequence[Record[WorkingMemoryReplacement]], deps: Deps
) -> list[Outgoing]:
    """The sink stage: one cube's replacements in log order, each applied and announced."""
    out: list[Outgoing] = []
    for record in records:
        event = record.value
        applied = await apply_working_memory(deps, event.cube_id, [i.id for i in event.items],
                                             event.occurred_at)
        out.append(announcement(event, applied, SINK_STAGE, deps.clock(), record.origin))
    return out


class UnknownWorkingMemoryIds(PermanentError):
    """A replace_working_memory command named nodes the cube does not have."""


async def replace_working_memory(cmd: ReplaceWorkingMemory, deps: Deps,
                                 stage: str) -> list[Outgoing]:
    """The ``replace_working_memory`` command: the same sink, ids as given (long-term ids or
    working copies). Unknown ids reject the whole command, so nothing half-applies."""
    found = {n.id for n in await deps.query.get_nodes(cmd.cube_id, list(cmd.node_ids))}
    unknown = [i for i in cmd.node_ids if i not in found]
    if unknown:
        raise UnknownWorkingMemoryIds(
            f"replace_working_memory: no node {', '.join(unknown)} in cube {cmd.cube_id}")
    applied = await apply_working_memory(deps, cmd.cube_id, cmd.node_ids, cmd.occurred_at)
    return [announcement(cmd, applied, stage, deps.clock())]
