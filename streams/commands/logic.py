"""Command stage: update, feedback, delete, delete_cube, dump, load, backup.

Every change is announced on ``memory.updates``. Commands are idempotent: a
redelivered delete deletes nothing more, a redelivered update writes the same node.
A command that cannot be carried out raises, so it is retried and then
dead-lettered with the reason (``memstream dump`` / ``load`` report it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memstream.archive.segments import Archive
from memstream.security.keys import destroy as destroy_key
from memstream.sinks.dump import backup_cube, dump_cube, list_backups, load_cube
from memstream.sinks.erasure import Left, left_of_cube, purge_deleted
from memstream.streams.core.episode_index import indexes_for
from memstream.streams.core.feedback import judged
from memstream.streams.core.lifecycle import set_frozen, sweep
from memstream.streams.core.working_memory import replace_working_memory, working_copy
from memstream.streams.embed.cache import forget_cube
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.ops.access import share
from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError, Record
from memstream.topics.events import (
    BackupCube,
    DeleteCube,
    DeleteNodes,
    DropViews,
    DumpCube,
    Event,
    Feedback,
    FreezeNodes,
    LifecycleSweep,
    LoadCube,
    MemoryUpdate,
    PromoteCube,
    ReorganizeEvent,
    ReplaceWorkingMemory,
    ReplayCube,
    ShareCube,
    UnfreezeNodes,
    UnshareCube,
    UpdateNode,
)
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES, REORGANIZE_HIGH

log = logging.getLogger("memstream.commands")
STAGE = "commands"


class CommandRejected(PermanentError):
    """The command is not allowed (e.g. changing a frozen node, or the node does not exist)."""


def _update(cmd: Event, deps: Deps, action: str, node_id: str | None, **kw: Any) -> Outgoing:
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id(action, cmd.event_id, node_id),
        user_id=cmd.user_id, cube_id=cmd.cube_id, occurred_at=deps.clock(), action=action,  # type: ignore[arg-type]
        stage=STAGE, node_id=node_id, cause_event_id=cmd.event_id, **kw))


async def update_node(cmd: UpdateNode, deps: Deps) -> list[Outgoing]:
    node = await deps.query.get_node(cmd.cube_id, cmd.node_id)
    if node is None:
        raise CommandRejected(f"node {cmd.node_id} not found in cube {cmd.cube_id}")
    changes: dict[str, Any] = {"updated_at": cmd.occurred_at}
    for name in ("key", "tags", "background", "status", "frozen"):
        if (value := getattr(cmd, name)) is not None:
            changes[name] = value
    updated = node.evolve(**changes)
    if cmd.memory is not None:
        updated = updated.model_copy(update={"memory": cmd.memory})
    if node.metadata.frozen and cmd.frozen is not False:
        if node == updated:  # this very update, redelivered: it froze the node; announce again
            return [_update(cmd, deps, "updated", cmd.node_id, node=updated)]
        raise CommandRejected(f"node {cmd.node_id} is frozen; unfreeze it first (frozen=false)")
    copy = await deps.query.get_node(cmd.cube_id, working_copy_id(cmd.node_id))
    if cmd.memory is not None and cmd.memory != node.memory:
        [vector] = await node_vectors(deps.embedder, [updated])
        units = [(updated, vector)]
        if copy is not None and updated.metadata.status == "activated":
            units.append((working_copy(updated).evolve(  # the copy mirrors its node's text
                updated_at=copy.metadata.updated_at), vector))
        await deps.store.write(units)
    else:
        await deps.store.update_node(cmd.cube_id, updated)
        if "status" in changes:
            await deps.store.set_status(cmd.cube_id, [cmd.node_id], changes["status"])
    if copy is not None and updated.metadata.status != "activated":
        # working memory holds what is current: an archived or expired memory leaves it
        await deps.store.delete(cmd.cube_id, [copy.id])
    return [_update(cmd, deps, "updated", cmd.node_id, node=updated)]


async def _judged_node(cmd: Feedback, deps: Deps) -> MemoryItem:
    """The memory a feedback names: the node, or the long-term node of a working-memory copy
    (also once the copy is gone: a redelivered ``wrong`` removed it the first time)."""
    node = await deps.query.get_node(cmd.cube_id, cmd.node_id)
    if node is not None and node.metadata.origin_id is not None:
        node = await deps.query.get_node(cmd.cube_id, node.metadata.origin_id)
    elif node is None:  # copy ids derive from their node's id: look for the one it names
        origin = next((i for i in await deps.store.vectors.list_ids(cmd.cube_id)
                       if working_copy_id(i) == cmd.node_id), None)
        node = await deps.query.get_node(cmd.cube_id, origin) if origin else None
    if node is None:
        raise CommandRejected(f"feedback: node {cmd.node_id} not found in cube {cmd.cube_id}")
    return node


async def feedback(cmd: Feedback, deps: Deps) -> list[Outgoing]:
    """The agent's verdict on a memory (``streams/core/feedback.judged``), as of the command's
    own time. ``wrong`` and ``outdated`` take its copy out of working memory (which holds what
    is current); any other copy mirrors the verdict. A frozen memory refuses a verdict that
    would change it, as it refuses updates (compliance hold)."""
    node = await _judged_node(cmd, deps)
    updated = judged(node, cmd.verdict, cmd.occurred_at, cmd.query)
    reason = f"{cmd.verdict}: {cmd.note}" if cmd.note.strip() else cmd.verdict
    if node.metadata.frozen and updated != node:
        raise CommandRejected(f"node {node.id} is frozen: feedback {cmd.verdict!r} refused "
                              "(unfreeze it first)")
    if updated != node:
        await deps.store.put_nodes(cmd.cube_id, [updated])
    copy = await deps.query.get_node(cmd.cube_id, working_copy_id(node.id))
    if copy is not None:
        md = updated.metadata
        if md.feedback == "wrong" or md.valid_until is not None or md.status != "activated":
            await deps.store.delete(cmd.cube_id, [copy.id])
        elif (mirrored := copy.evolve(feedback=md.feedback, valid_until=md.valid_until,
                                      irrelevant_for=md.irrelevant_for)) != copy:
            await deps.store.put_nodes(cmd.cube_id, [mirrored])
    return [_update(cmd, deps, "feedback", node.id, node=updated, reason=reason)]


async def delete_nodes(cmd: DeleteNodes, deps: Deps) -> list[Outgoing]:
    nodes = await deps.query.get_nodes(cmd.cube_id, cmd.node_ids)
    frozen = [n.id for n in nodes if n.metadata.frozen]
    if frozen:
        raise CommandRejected(f"frozen nodes cannot be deleted: {', '.join(frozen)}")
    ids = [n.id for n in nodes]
    copies = [working_copy_id(i) for i in ids]
    await deps.store.delete(cmd.cube_id, [*ids, *copies])
    if cmd.node_ids:
        # the text leaves the stores' files; also when none was found, since a redelivery
        # after a failure between the delete and the rewrite finds them gone already
        await purge_deleted(deps.store, cmd.cube_id)
    out = [_update(cmd, deps, "deleted", i, reason="deleted by command") for i in ids]
    if ids:
        out.append(Outgoing(REORGANIZE_HIGH, ReorganizeEvent(
            event_id=derived_event_id("reorganize-remove", cmd.event_id), user_id=cmd.user_id,
            cube_id=cmd.cube_id, occurred_at=deps.clock(), op="remove", node_ids=tuple(ids))))
    return out


class ErasureIncomplete(RuntimeError):
    """A store still holds something of a cube after its erasure (a write that raced it):
    the command is retried, which erases again, and dead-lettered if it still does."""


@dataclass(frozen=True)
class Erased:
    """What an erasure removed, and what the stores held of the cube afterwards (zero, or
    it raised ``ErasureIncomplete``)."""

    nodes: int
    vectors: int
    cached: int  # passage vectors the embedding cache forgot
    shredded: bool  # the cube's data key was destroyed now (not by an earlier attempt)
    left: Left
    cached_left: int

    def describe(self) -> str:
        key = ", its data key destroyed" if self.shredded else ""
        return (f"{self.nodes} nodes, {self.vectors} vectors, {self.cached} cached embeddings"
                f"{key}; left: {self.left.nodes} nodes, {self.left.vectors} vectors, "
                f"{self.cached_left} cached embeddings")


async def erase_cube(cube_id: str, deps: Deps) -> Erased:
    """Every step of erasing a cube (docs/erasure.md), then a count of what is left of it:
    the erasure is announced only when the stores hold nothing of it any more."""
    nodes, vectors = await deps.store.clear_cube(cube_id)
    cached = await forget_cube(deps.embedder, cube_id)  # the vectors kept of its texts
    indexes = indexes_for(deps.query, deps.settings.search)
    if indexes.held(cube_id):  # its episodes' texts, held for search: rebuilt without them
        await indexes.get(deps.query, cube_id)
    await purge_deleted(deps.store, cube_id)  # and out of the stores' files
    # Last: the cube's records in every topic (and its scheduler state) become unreadable.
    shredded = destroy_key(cube_id)
    # and out of the archived segments of the log, which memstream can rewrite (the broker's
    # partitions it cannot: there the destroyed key is what erases)
    Archive(deps.settings.data_dir).drop_keys({cube_id.encode()})
    # where its records sat in the log: unreadable now, so no reader needs them (and the
    # indexer, unable to open them any more, adds none back)
    await deps.store.graph.drop_log_refs(cube_id)
    left = await left_of_cube(deps.store, cube_id)
    cached_left = await forget_cube(deps.embedder, cube_id)
    if left or cached_left:
        raise ErasureIncomplete(
            f"cube {cube_id} still holds {left.nodes} nodes, {left.vectors} vectors and "
            f"{cached_left} cached embeddings after its erasure")
    return Erased(nodes, vectors, cached, shredded, left, cached_left)


async def delete_cube(cmd: DeleteCube, deps: Deps) -> list[Outgoing]:
    erased = await erase_cube(cmd.cube_id, deps)
    return [_update(cmd, deps, "deleted", None, reason=f"cube erased: {erased.describe()}")]


async def backup(cmd: BackupCube, deps: Deps) -> list[Outgoing]:
    """The backup, then (``drop``) the whole erasure. A retried backup that finds the cube
    already emptied keeps the backup written before rather than adding an empty one (which
    would be restored as the newest and could push the real one out of ``keep_last``)."""
    if cmd.drop and list_backups(cmd.directory, cmd.cube_id) \
            and not await left_of_cube(deps.store, cmd.cube_id):
        written = list_backups(cmd.directory, cmd.cube_id)[-1]
        out = [_update(cmd, deps, "updated", None, reason=f"backup kept: {written}")]
    else:
        # not dropped by the backup itself: ``erase_cube`` below does that and counts it
        result = await backup_cube(deps.store, cmd.cube_id, cmd.directory, cmd.keep_last,
                                   False, deps.clock)
        written = result.path
        out = [_update(cmd, deps, "updated", None, reason=(
            f"backup written: {written} ({result.nodes} nodes, {result.edges} edges, "
            f"{result.vectors} vectors; {len(result.removed)} older backups removed)"))]
    if cmd.drop:
        erased = await erase_cube(cmd.cube_id, deps)
        out.append(_update(cmd, deps, "deleted", None,
                           reason=f"cube erased after its backup to {written}: "
                                  f"{erased.describe()}"))
    return out


async def run_command(cmd: Event, deps: Deps) -> list[Outgoing]:
    match cmd:
        case UpdateNode():
            return await update_node(cmd, deps)
        case Feedback():
            return await feedback(cmd, deps)
        case DeleteNodes():
            return await delete_nodes(cmd, deps)
        case DeleteCube():
            return await delete_cube(cmd, deps)
        case DumpCube():
            cube = await dump_cube(deps.store, cmd.cube_id, cmd.path)
            log.info("dumped cube %s (%d nodes) to %s", cmd.cube_id, len(cube.nodes), cmd.path)
            return []
        case LoadCube():
            loaded = await load_cube(deps.store, cmd.path, cmd.cube_id)
            # each loaded node announced, so the log alone says what the cube holds (as_of)
            return [_update(cmd, deps, "updated", None, reason=f"cube loaded from {cmd.path}"),
                    *(_update(cmd, deps, "added", n.id, node=n,
                              reason=f"loaded from {cmd.path}") for n in loaded.nodes)]
        case BackupCube():
            return await backup(cmd, deps)
        case ReplaceWorkingMemory():
            return await replace_working_memory(cmd, deps, STAGE)
        case FreezeNodes() | UnfreezeNodes():
            return await set_frozen(cmd, deps)
        case LifecycleSweep():
            return await sweep(cmd, deps)
        case ReplayCube() | PromoteCube() | DropViews():
            if (handler := deps.command_handlers.get(cmd.command)) is None:
                raise CommandRejected(f"{cmd.command} is not available in this worker")
            return await handler(cmd, deps)
        case ShareCube() | UnshareCube():
            said = await share(deps, cmd)
            return [_update(cmd, deps, "shared", None, reason=said)]
    raise CommandRejected(f"unsupported command {type(cmd).__name__}")


async def run_commands(records: Sequence[Record[Any]], deps: Deps) -> list[Outgoing]:
    """One cube's commands, in log order."""
    out: list[Outgoing] = []
    for record in records:
        out.extend(await run_command(record.value, deps))
    return out
