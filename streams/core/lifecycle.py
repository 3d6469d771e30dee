"""Lifecycle: archive unused nodes, expire long-archived ones, freeze and unfreeze.

generated → activated → merged → archived → expired, each transition a ``memory.updates``
event. A sweep decides from its own event time (``LifecycleSweep.occurred_at``) and the
times stored on the nodes, never from the wall clock at processing, so a redelivered or
replayed sweep makes the same decisions and announces them under the same event ids.
A frozen node (compliance hold) is never archived, expired, merged or updated.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError
from memstream.topics.events import Event, FreezeNodes, LifecycleSweep, MemoryUpdate, UnfreezeNodes
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import MemoryItem, MemoryType
from memstream.topics.registry import MEMORY_UPDATES

log = logging.getLogger("memstream.lifecycle")
STAGE = "lifecycle"
# What a sweep looks at: every stored memory; working-memory copies follow their origin.
SWEPT_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory", "EpisodicMemory")
EXPIRED_TEXT = "[expired]"


class FreezeRejected(PermanentError):
    """A freeze or unfreeze names nodes the cube does not hold."""


# -- store access: the only lines that name the graph and vector handles -------------------


async def _all_of_type(deps: Deps, cube: str, memory_type: MemoryType) -> list[MemoryItem]:
    return await deps.query.all_of_type(cube, memory_type, status=None)


async def _get_nodes(deps: Deps, cube: str, ids: Sequence[str]) -> list[MemoryItem]:
    return await deps.query.get_nodes(cube, ids)


async def _vectors(deps: Deps, cube: str, ids: Sequence[str]) -> dict[str, list[float]]:
    return {r.id: list(r.vector) for r in await deps.query.vectors(cube, ids)}


async def _put_nodes(deps: Deps, cube: str, nodes: Sequence[MemoryItem]) -> None:
    """Nodes whose embedding is unchanged (freeze) or gone (expired), rewritten."""
    await deps.store.put_nodes(cube, nodes)


async def _drop_vectors(deps: Deps, cube: str, ids: Sequence[str]) -> None:
    await deps.store.drop_vectors(cube, ids)


# -- decisions -------------------------------------------------------------------------


def last_activity(node: MemoryItem) -> datetime:
    """When the node was last updated or returned by a search."""
    used = [u.at for u in node.metadata.usage]
    return max([node.metadata.updated_at, *used])


def audit_record(node: MemoryItem, at: datetime) -> MemoryItem:
    """What an expired node keeps: who, which cube, what kind, when, and where it came from
    (source refs are message ids and offsets, no text). Text, key, tags, entities,
    background and usage go; the vector is deleted by the caller."""
    return node.model_copy(update={"memory": EXPIRED_TEXT}).evolve(
        status="expired", key="", tags=(), entities=(), background="", usage=(),
        updated_at=at)


def _update(cmd: Event, at: datetime, action: str, node: MemoryItem, reason: str,
            **kw: Any) -> Outgoing:
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id(action, node.id, cmd.event_id), user_id=node.metadata.user_id,
        cube_id=cmd.cube_id, occurred_at=at, action=action,  # type: ignore[arg-type]
        stage=STAGE, node_id=node.id, node=node, reason=reason, cause_event_id=cmd.event_id,
        **kw))


async def sweep(cmd: LifecycleSweep, deps: Deps) -> list[Outgoing]:
    """Archive the cube's activated nodes unused for ``archive_after``, expire its archived
    nodes untouched for ``expire_after``, both as of the sweep's own time."""
    cfg = deps.settings.lifecycle
    now, cube = cmd.occurred_at, cmd.cube_id
    nodes: list[MemoryItem] = []
    for memory_type in SWEPT_TYPES:
        nodes += await _all_of_type(deps, cube, memory_type)
    nodes.sort(key=lambda n: n.id)
    to_archive: list[MemoryItem] = []
    to_expire: list[MemoryItem] = []
    again: list[tuple[str, MemoryItem]] = []  # done by an earlier delivery of this sweep
    for node in nodes:
        md = node.metadata
        if md.updated_at == now and md.status in ("archived", "expired"):
            again.append(("archived" if md.status == "archived" else "expired", node))
        elif md.frozen:
            continue
        elif (md.status == "activated" and cfg.archive_after is not None
                and now - last_activity(node) >= cfg.archive_after):
            to_archive.append(node)
        elif (md.status == "archived" and cfg.expire_after is not None
                and now - last_activity(node) >= cfg.expire_after):
            to_expire.append(node)
    out: list[Outgoing] = []
    if to_archive:
        out += await _archive(cmd, deps, to_archive)
    if to_expire:
        out += await _expire(cmd, deps, to_expire)
    for action, node in again:
        out.append(_update(cmd, now, action, node, _reason(action, deps)))
    if to_archive or to_expire:
        log.info("cube %s: archived %d, expired %d (as of %s)", cube, len(to_archive),
                 len(to_expire), now.isoformat())
    return out


def _reason(action: str, deps: Deps) -> str:
    cfg = deps.settings.lifecycle
    if action == "archived":
        return f"unused for {cfg.archive_after} (lifecycle.archive_after)"
    return f"archived and untouched for {cfg.expire_after} (lifecycle.expire_after)"


async def _archive(cmd: LifecycleSweep, deps: Deps, nodes: Sequence[MemoryItem]) -> list[Outgoing]:
    """Status and time change in both stores (the vector keeps its embedding); the node's
    working-memory copy leaves working memory."""
    cube, now = cmd.cube_id, cmd.occurred_at
    archived = [n.evolve(status="archived", updated_at=now) for n in nodes]
    vectors = await _vectors(deps, cube, [n.id for n in nodes])
    await deps.store.write([(n, vectors[n.id]) for n in archived if n.id in vectors])
    if without := [n for n in archived if n.id not in vectors]:
        await _put_nodes(deps, cube, without)
    await deps.store.delete(cube, [working_copy_id(n.id) for n in nodes])
    return [_update(cmd, now, "archived", n, _reason("archived", deps)) for n in archived]


async def _expire(cmd: LifecycleSweep, deps: Deps, nodes: Sequence[MemoryItem]) -> list[Outgoing]:
    """Vector first (never a vector hit without its text), then the node becomes its audit
    record."""
    cube, now = cmd.cube_id, cmd.occurred_at
    ids = [n.id for n in nodes]
    await _drop_vectors(deps, cube, ids)
    await deps.store.delete(cube, [working_copy_id(i) for i in ids])
    records = [audit_record(n, now) for n in nodes]
    await _put_nodes(deps, cube, records)
    return [_update(cmd, now, "expired", n, _reason("expired", deps)) for n in records]


async def set_frozen(cmd: FreezeNodes | UnfreezeNodes, deps: Deps) -> list[Outgoing]:
    """Freeze or unfreeze the named nodes; an unknown id rejects the whole command."""
    frozen = isinstance(cmd, FreezeNodes)
    ids = list(dict.fromkeys(cmd.node_ids))
    found = {n.id: n for n in await _get_nodes(deps, cmd.cube_id, ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise FreezeRejected(f"{cmd.command}: node(s) not found in cube {cmd.cube_id}: "
                             f"{', '.join(missing[:10])}")
    changed = [found[i].evolve(frozen=frozen) for i in ids if found[i].metadata.frozen != frozen]
    if changed:
        await _put_nodes(deps, cmd.cube_id, changed)
    action = "frozen" if frozen else "unfrozen"
    reason = cmd.reason or f"{cmd.command} command"
    return [_update(cmd, deps.clock(), action, found[i].evolve(frozen=frozen), reason)
            for i in ids]


def refused(node: MemoryItem, other_id: str, what: str, reason: str, base: dict[str, Any],
            event_key: str) -> Outgoing:
    """The announcement that a frozen ``node`` was spared ``what`` (e.g. a merge with
    ``other_id``), with the reason."""
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("refused", node.id, other_id, event_key), action="refused",
        node_id=node.id, node=node, related_ids=(other_id,),
        reason=f"{node.id} is frozen: {what} refused ({reason})"[:400], **base))
