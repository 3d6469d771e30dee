"""History, explain and as-of over the provenance index: only the records that matter are read.

The worker's indexer (``streams/provenance/``) records where each cube's records sit in the
log. A call here (1) waits until the indexer has passed the end of the partitions it needs,
as they were when the call began (its group's committed offsets), (2) asks a worker for the
positions (a ``log_refs`` request: positions and ids, no text), and (3) fetches those records
and opens them with the cube's key. Its cost follows the records of the memory (history,
explain) or of the cube (as-of), not the log: other cubes' records are never read, except
those sharing a fetch with a wanted one.

Node ids may be given as a unique prefix of at least 8 characters (what ``as-of`` and
``explain`` print); ``memstream/history/ids.py`` resolves ids the same way for the commands
that read the stores. A working-memory copy's history and explanation are those of the
memory it copies, with the copy's own changes (``derived.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

from memstream.history.derived import copy_origin, has_state, member_of, premise_of
from memstream.history.log_index import INDEXED, partition_of
from memstream.history.provenance import (
    CAUSE_TOPICS,
    MAX_DEPTH,
    CubeLog,
    Explanation,
    History,
    NodeNotFound,
    changes_with_causes,
    explain_copy,
    explain_node,
    fold,
    latest_snapshot,
    node_changes,
    with_snapshots,
)
from memstream.history.records import Readers as Readers  # the client holds one
from memstream.history.records import fetch, readers_of
from memstream.history.snapshots import is_slim
from memstream.topics.events import (
    ConversationChunk,
    Event,
    ExtractedMemory,
    LogRefsRequest,
    LogRefsResult,
    MemoryUpdate,
)
from memstream.topics.models import MemoryItem
from memstream.topics.registry import CONVERSATIONS, MEMORY_UPDATES, TopicSpec

if TYPE_CHECKING:
    from memstream.client.client import MemoryClient

log = logging.getLogger("memstream.provenance")

MIN_PREFIX = 8
_IDS_PER_ASK = 5_000  # event ids per log_refs request (the request takes at most 10,000)
INDEX_WAIT_S = 60.0  # how long a call waits for the indexer to pass the log's end
NO_WORKER_LOOK_S = 1.0  # behind this long: ask whether any worker runs at all
SHOWN_MATCHES = 5  # an ambiguous prefix's error names at most this many matches


class AmbiguousId(ValueError):
    """An id prefix that matches more than one memory."""


class IndexBehind(NodeNotFound):
    """The provenance index did not reach the log's end in time: the memory may exist (the
    service is behind, not the id wrong; a page showing what it can treats it as unknown)."""


class NoWorker(RuntimeError):
    """No worker runs to index the log (the client raises it as a ``ClientError``)."""


def ambiguous(prefix: str, matches: Sequence[str], where: str) -> AmbiguousId:
    """The error for a prefix naming several memories: each of them (the first few)."""
    matches = sorted(matches)
    shown = ", ".join(matches[:SHOWN_MATCHES])
    more = f" and {len(matches) - SHOWN_MATCHES} more" if len(matches) > SHOWN_MATCHES else ""
    return AmbiguousId(f"id prefix {prefix!r} matches several memories {where}: "
                       f"{shown}{more}; give more of the id")


# ------------------------------------------------------------------------ the index


async def _wait_indexed(client: MemoryClient, cube_id: str | None,
                        specs: Sequence[TopicSpec]) -> None:
    """Return once the indexer has committed past the current end of the cube's partition
    of each topic (every partition of ``memory.updates`` when the cube is not known)."""
    s = client.settings
    readers = await readers_of(client)
    consumer = readers.index
    assert consumer is not None  # noqa: S101 - started above
    async with readers.lock:
        if any(not consumer.partitions_for_topic(spec.name(s)) for spec in specs):
            await consumer.topics()
        tps = []
        for spec in specs:
            name = spec.name(s)
            parts = sorted(consumer.partitions_for_topic(name) or ())
            if cube_id is not None and parts:
                parts = [partition_of(cube_id, len(parts))]
            tps += [TopicPartition(name, p) for p in parts]
        ends = await consumer.end_offsets(tps)
    started = time.monotonic()
    deadline = started + INDEX_WAIT_S
    pending = [tp for tp in tps if ends[tp] > 0]
    asked = False
    while pending:
        async with readers.lock:
            done = await asyncio.gather(*(consumer.committed(tp) for tp in pending))
        behind = [(tp, ends[tp] - (c or 0)) for tp, c in zip(pending, done, strict=True)
                  if (c or 0) < ends[tp]]
        if not behind:
            return
        if not asked and time.monotonic() - started > NO_WORKER_LOOK_S:
            asked = True  # behind for a while: is any worker there to index?
            members = await client.request_workers()
            if members is not None and not members.live:
                raise NoWorker(f"no worker is running to index the log: "
                               f"{members.describe()}; start one with `memstream up`")
        if time.monotonic() > deadline:
            tp, missing = behind[0]
            raise IndexBehind(
                f"the provenance index is {missing} records behind on {tp.topic}"
                f"[{tp.partition}] after {INDEX_WAIT_S:.0f}s; is a worker running?")
        pending = [tp for tp, _ in behind]
        await asyncio.sleep(0.05)


async def _refs(client: MemoryClient, cube_id: str | None, **fields: Any) -> LogRefsResult:
    owner = cube_id or "provenance"
    req = LogRefsRequest(user_id=owner, cube_id=owner, any_cube=cube_id is None, **fields)
    result = (await client.request(req)).result
    assert isinstance(result, LogRefsResult)  # noqa: S101 - the request's result type
    return result


async def prefix_matches(client: MemoryClient, cube_id: str, prefix: str) -> list[str]:
    """The ids of the cube's memories (any the log names) that start with ``prefix``."""
    return [n for _, n in (await _refs(client, cube_id, node_prefix=prefix)).nodes]


async def resolve(client: MemoryClient, node_id: str,
                  cube_id: str | None) -> tuple[str, str, LogRefsResult]:
    """(cube, full node id, the refs naming it) for a node id or a unique id prefix."""
    await _wait_indexed(client, cube_id, INDEXED if cube_id is not None else [MEMORY_UPDATES])
    found = await _refs(client, cube_id, node_id=node_id)
    cubes = sorted({c for c, _ in found.nodes})
    if not cubes and len(node_id) >= MIN_PREFIX:
        matches = (await _refs(client, cube_id, node_prefix=node_id)).nodes
        if len(matches) > 1:
            raise ambiguous(node_id, [n if cube_id is not None else f"{n} (cube {c})"
                                      for c, n in matches],
                            f"of cube {cube_id!r}" if cube_id is not None else "in the log")
        if matches:
            cube, node_id = matches[0]
            return await resolve(client, node_id, cube)
    where = f"the log of cube {cube_id}" if cube_id is not None else "memory.updates"
    if not cubes:
        raise NodeNotFound(f"no memory {node_id} in {where}")
    if len(cubes) > 1:
        raise AmbiguousId(f"memory {node_id} is in several cubes ({', '.join(cubes)}); "
                          "name one with --cube")
    if cube_id is None:  # now that the cube is known: wait for the rest of its topics
        await _wait_indexed(client, cubes[0], INDEXED)
        found = await _refs(client, cubes[0], node_id=node_id)
    return cubes[0], node_id, found


# ------------------------------------------------------------------------ fetching records


def _merge(*results: LogRefsResult) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for result in results:
        for key, offsets in result.positions.items():
            out.setdefault(key, set()).update(offsets)
    return out


# ------------------------------------------------------------------------ the three calls


def _updates(events: dict[str, list[Event]]) -> list[MemoryUpdate]:
    return [u for u in events.get(MEMORY_UPDATES.suffix, []) if isinstance(u, MemoryUpdate)]


async def _events_refs(client: MemoryClient, cube: str,
                       event_ids: Sequence[str]) -> dict[str, set[int]]:
    """Where the records of ``event_ids`` are, asked in requests of at most ``_IDS_PER_ASK``."""
    return _merge(*[await _refs(client, cube, event_ids=tuple(event_ids[i:i + _IDS_PER_ASK]))
                    for i in range(0, len(event_ids), _IDS_PER_ASK)])


async def _with_causes(client: MemoryClient, cube: str, log_: CubeLog,
                       updates: Sequence[MemoryUpdate], chunks: bool = True) -> None:
    """Add the events that caused ``updates`` (and the chunks their items came from)."""
    causes = sorted({u.cause_event_id for u in updates if u.cause_event_id} - set(log_.events))
    if causes:
        found = await fetch(client, cube, await _events_refs(client, cube, causes))
        for spec in CAUSE_TOPICS:
            for event in found.get(spec.suffix, []):
                log_.events.setdefault(event.event_id, (spec.suffix, event))
    cited = sorted({e.chunk_event_id for _, e in log_.events.values()
                    if isinstance(e, ExtractedMemory) and e.chunk_event_id} - set(log_.chunks))
    if chunks and cited:
        found = await fetch(client, cube, await _events_refs(client, cube, cited))
        for event in found.get(CONVERSATIONS.suffix, []):
            if isinstance(event, ConversationChunk):
                log_.chunks.setdefault(event.event_id, event)


async def _snapshots(client: MemoryClient, cube: str, log_: CubeLog,
                     updates: Sequence[MemoryUpdate], chunks: bool = True
                     ) -> list[MemoryUpdate]:
    """``updates`` with the snapshots ``added`` leaves out (version 3) put back from the
    items that caused them, which join ``log_``."""
    await _with_causes(client, cube, log_, [u for u in updates if is_slim(u)], chunks)
    return with_snapshots(updates, log_.events)


async def _copied(client: MemoryClient, cube: str, log_: CubeLog,
                  updates: Sequence[MemoryUpdate], node_id: str) -> str | None:
    """The memory ``node_id`` is a working-memory copy of (None: a node of its own). Most
    copies are named by their memory's ``added``; the scheduler's by a replacement whose
    cause lists the memory, read here, the first replacement's before the others'."""
    if has_state(updates, node_id):
        return None
    if (origin := copy_origin(updates, log_.events, node_id)) is not None:
        return origin
    placed = [u for u in node_changes(updates, node_id)
              if u.action == "working_memory_replaced"]
    for some in (placed[:1], placed[1:]):
        if some:
            await _with_causes(client, cube, log_, some, chunks=False)
            if (origin := copy_origin(updates, log_.events, node_id)) is not None:
                return origin
    return None


async def memory_history(client: MemoryClient, node_id: str,
                         cube_id: str | None = None) -> History:
    """Every change of a memory, oldest first, with its cause: the memory's own updates and
    the cube's updates naming no memory (an erasure), then the events they name. For a
    working-memory copy: the copy's changes and those of the memory it copies."""
    cube, node_id, own = await resolve(client, node_id, cube_id)
    erasures = await _refs(client, cube, topic=MEMORY_UPDATES.suffix, node_less=True)
    updates = _updates(await fetch(client, cube, _merge(own, erasures)))
    changes = node_changes(updates, node_id)
    if not changes:
        raise NodeNotFound(f"no memory {node_id} in the log of cube {cube}")
    log_ = CubeLog(changes)
    origin = await _copied(client, cube, log_, changes, node_id)
    if origin is not None:
        its = await _refs(client, cube, node_id=origin)
        updates = _updates(await fetch(client, cube, _merge(own, erasures, its)))
        log_.updates = changes = node_changes(updates, node_id, origin)
    await _with_causes(client, cube, log_, changes)
    return History(changes_with_causes(log_, with_snapshots(changes, log_.events)), node_id,
                   copy_of=origin)


async def cube_as_of(client: MemoryClient, cube_id: str, at: datetime) -> list[MemoryItem]:
    """The cube's memories at ``at``, folded from the cube's own updates only."""
    if at.tzinfo is None:
        raise ValueError("as_of needs a timezone-aware time (e.g. 2026-05-01T12:00:00+00:00)")
    await _wait_indexed(client, cube_id, [MEMORY_UPDATES])
    refs = await _refs(client, cube_id, topic=MEMORY_UPDATES.suffix)
    updates = [u for u in _updates(await fetch(client, cube_id, _merge(refs)))
               if u.occurred_at <= at]
    state = fold(await _snapshots(client, cube_id, CubeLog([]), updates, chunks=False), at)
    return sorted(state.values(), key=lambda n: (n.metadata.created_at, n.id))


async def explain(client: MemoryClient, node_id: str, cube_id: str | None = None) -> Explanation:
    """Sources and lineage of a memory, from the updates of it and of the memories it came
    from (followed to ``MAX_DEPTH``), their causes and the chunks those cite; for a
    working-memory copy, those of the memory it copies."""
    cube, node_id, own = await resolve(client, node_id, cube_id)
    erasures = await _refs(client, cube, topic=MEMORY_UPDATES.suffix, node_less=True)
    refs = [own, erasures]
    log_ = CubeLog([])  # the causes fetched on the way (items put snapshots back)
    updates = await _snapshots(client, cube, log_,
                               _updates(await fetch(client, cube, _merge(*refs))))
    origin = await _copied(client, cube, log_, updates, node_id)
    done, todo = {node_id}, {origin} if origin is not None else _lineage_ids(updates, node_id)
    for _ in range(MAX_DEPTH + 1):
        todo -= done
        if not todo:
            break
        results = [await _refs(client, cube, node_id=n) for n in sorted(todo)]
        refs += results
        updates += await _snapshots(client, cube, log_,
                                    _updates(await fetch(client, cube, _merge(*results))))
        done |= todo
        todo = set().union(*(_lineage_ids(updates, n) for n in todo))
    if len(refs) > 2:  # every update read again in one pass, so they are in log order
        updates = await _snapshots(client, cube, log_,
                                   _updates(await fetch(client, cube, _merge(*refs))))
    log_.updates = updates
    await _with_causes(client, cube, log_, log_.updates)
    return explain_copy(log_, node_id, origin) if origin is not None \
        else explain_node(log_, node_id)


def _lineage_ids(updates: Sequence[MemoryUpdate], node_id: str) -> set[str]:
    """The memories ``node_id`` came from: merged into it, premises, members, its episode."""
    found: set[str] = set()
    for u in updates:
        if u.action == "merged" and u.node_id == node_id:
            found.update(u.related_ids)
        found.update(other for e in u.edges
                     if (other := premise_of(e, node_id) or member_of(e, node_id)) is not None)
    node = latest_snapshot(updates, node_id)
    if node is not None:
        found.update(r.memory_id for r in node.metadata.sources
                     if r.kind == "memory" and r.memory_id)
    return found
