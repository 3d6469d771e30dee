"""History, explain and as-of over the provenance index: only the records that matter are read.

The worker's indexer (``streams/provenance/``) records where each cube's records sit in the
log. A call here (1) waits until the indexer has passed the end of the partitions it needs,
as they were when the call began (its group's committed offsets), (2) asks a worker for the
positions (a ``log_refs`` request: positions and ids, no text), and (3) fetches those records
and opens them with the cube's key. Its cost follows the records of the memory (history,
explain) or of the cube (as-of), not the log: other cubes' records are never read, except
those sharing a fetch with a wanted one.

Node ids may be given as a unique prefix of at least 8 characters (what ``as-of`` and
``explain`` print).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.history.log_index import INDEXED, index_group, partition_of
from memstream.history.provenance import (
    CAUSE_TOPICS,
    MAX_DEPTH,
    Change,
    CubeLog,
    Explanation,
    NodeNotFound,
    changes_with_causes,
    explain_node,
    fold,
    latest_snapshot,
    node_changes,
    with_snapshots,
)
from memstream.history.snapshots import is_slim
from memstream.kafka.compat import mark_latency_sensitive, start_or_release, stop_within
from memstream.topics.events import (
    ConversationChunk,
    Event,
    ExtractedMemory,
    LogRefsRequest,
    LogRefsResult,
    MemoryUpdate,
)
from memstream.topics.models import MemoryItem
from memstream.topics.registry import BY_SUFFIX, CONVERSATIONS, MEMORY_UPDATES, TopicSpec

if TYPE_CHECKING:
    from memstream.client.client import MemoryClient

log = logging.getLogger("memstream.provenance")

MIN_PREFIX = 8
_IDS_PER_ASK = 5_000  # event ids per log_refs request (the request takes at most 10,000)
INDEX_WAIT_S = 60.0  # how long a call waits for the indexer to pass the log's end
NO_WORKER_LOOK_S = 1.0  # behind this long: ask whether any worker runs at all
_FETCH_BYTES = 256 * 1024  # one fetch: enough for a run of records, little of others'
_GAP = 64  # wanted offsets closer than this are read through rather than sought


class AmbiguousId(ValueError):
    """An id prefix that matches more than one memory."""


class NoWorker(RuntimeError):
    """No worker runs to index the log (the client raises it as a ``ClientError``)."""


# ------------------------------------------------------------------------ the index


class Readers:
    """The two consumers provenance calls share for a client's lifetime: one that reads the
    indexer group's committed offsets and the log's ends, one that fetches records. Starting
    one costs a metadata round trip (and a coordinator lookup), more than a call's reads."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.lock = asyncio.Lock()  # one call's reads at a time (assign/seek are per consumer)
        self.index: AIOKafkaConsumer | None = None
        self.fetcher: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        if self.index is None:
            index = AIOKafkaConsumer(bootstrap_servers=self.client.bootstrap,
                                     group_id=index_group(self.client.settings),
                                     enable_auto_commit=False)
            await start_or_release(index, "provenance index reader")
            self.index = index
        if self.fetcher is None:
            fetcher = AIOKafkaConsumer(bootstrap_servers=self.client.bootstrap,
                                       enable_auto_commit=False,
                                       max_partition_fetch_bytes=_FETCH_BYTES)
            await start_or_release(fetcher, "provenance reader")
            mark_latency_sensitive(fetcher)  # a caller waits for the answer
            self.fetcher = fetcher

    async def close(self) -> None:
        for consumer in (self.index, self.fetcher):
            if consumer is not None:
                await stop_within(consumer, "provenance reader")
        self.index = self.fetcher = None


async def _readers(client: MemoryClient) -> Readers:
    if client.provenance_readers is None:
        client.provenance_readers = Readers(client)
    await client.provenance_readers.start()
    return client.provenance_readers


async def _wait_indexed(client: MemoryClient, cube_id: str | None,
                        specs: Sequence[TopicSpec]) -> None:
    """Return once the indexer has committed past the current end of the cube's partition
    of each topic (every partition of ``memory.updates`` when the cube is not known)."""
    s = client.settings
    readers = await _readers(client)
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
            raise NodeNotFound(
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


async def resolve(client: MemoryClient, node_id: str,
                  cube_id: str | None) -> tuple[str, str, LogRefsResult]:
    """(cube, full node id, the refs naming it) for a node id or a unique id prefix."""
    await _wait_indexed(client, cube_id, INDEXED if cube_id is not None else [MEMORY_UPDATES])
    found = await _refs(client, cube_id, node_id=node_id)
    cubes = sorted({c for c, _ in found.nodes})
    if not cubes and len(node_id) >= MIN_PREFIX:
        matches = (await _refs(client, cube_id, node_prefix=node_id)).nodes
        if len(matches) > 1:
            shown = ", ".join(n for _, n in matches[:2])
            raise AmbiguousId(f"id prefix {node_id!r} matches several memories ({shown}, …); "
                              "give more of the id")
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


async def fetch(client: MemoryClient, cube_id: str,
                positions: Mapping[str, Iterable[int]]) -> dict[str, list[Event]]:
    """The cube's events at ``positions`` (``"topic|partition"`` → offsets), by topic suffix,
    in log order. A position that cannot be read (an erased cube's) is left out."""
    out: dict[str, list[Event]] = {}
    wanted = {key: sorted(set(offsets)) for key, offsets in positions.items() if offsets}
    if not wanted:
        return out
    readers = await _readers(client)
    assert readers.fetcher is not None  # noqa: S101 - started above
    unreadable: list[str] = []
    async with readers.lock:
        for key, offsets in sorted(wanted.items()):
            suffix, _, part = key.rpartition("|")
            spec = BY_SUFFIX[suffix]
            tp = TopicPartition(spec.name(client.settings), int(part))
            for record in await _read_offsets(readers.fetcher, tp, offsets):
                try:
                    event = spec.decode(record)
                except ValidationError as exc:
                    errors = exc.errors()
                    unreadable.append(str(errors[0]["msg"]) if errors else str(exc))
                    continue
                if isinstance(event, Event) and event.cube_id == cube_id:
                    out.setdefault(suffix, []).append(event)
    if unreadable:  # an erased cube's records: one line, not one per record
        log.warning("skipped %d unreadable records of cube %s (%s)", len(unreadable), cube_id,
                    unreadable[0])
    return out


async def _read_offsets(consumer: AIOKafkaConsumer, tp: TopicPartition,
                        offsets: list[int]) -> list[bytes]:
    """The values at ``offsets`` (ascending) of ``tp``: seek to a wanted offset, take what
    the fetch brings that is wanted, read on when the next is near, seek when it is far."""
    consumer.assign([tp])
    consumer.resume(tp)  # paused after the last call that read it
    values: list[bytes] = []
    i, stalled = 0, 0
    consumer.seek(tp, offsets[0])
    while i < len(offsets):
        batch = (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        if not batch:
            stalled += 1
            if stalled >= 10:  # positions past what the broker holds (it lost records)
                log.warning("%s: offsets from %d could not be read", tp, offsets[i])
                break
            continue
        stalled = 0
        for record in batch:
            while i < len(offsets) and offsets[i] < record.offset:
                i += 1  # not in the log any more (a compacted or lost record)
            if i < len(offsets) and offsets[i] == record.offset:
                values.append(record.value or b"")
                i += 1
        if i < len(offsets) and offsets[i] > batch[-1].offset + _GAP:
            consumer.seek(tp, offsets[i])
    consumer.pause(tp)  # no fetching ahead in the background between calls
    return values


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


async def memory_history(client: MemoryClient, node_id: str,
                         cube_id: str | None = None) -> list[Change]:
    """Every change of a memory, oldest first, with its cause: the memory's own updates and
    the cube's updates naming no memory (an erasure), then the events they name."""
    cube, node_id, own = await resolve(client, node_id, cube_id)
    erasures = await _refs(client, cube, topic=MEMORY_UPDATES.suffix, node_less=True)
    updates = _updates(await fetch(client, cube, _merge(own, erasures)))
    changes = node_changes(updates, node_id)
    if not changes:
        raise NodeNotFound(f"no memory {node_id} in the log of cube {cube}")
    log_ = CubeLog(changes)
    await _with_causes(client, cube, log_, changes)
    return changes_with_causes(log_, with_snapshots(changes, log_.events))


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
    from (followed to ``MAX_DEPTH``), their causes and the chunks those cite."""
    cube, node_id, own = await resolve(client, node_id, cube_id)
    erasures = await _refs(client, cube, topic=MEMORY_UPDATES.suffix, node_less=True)
    refs = [own, erasures]
    log_ = CubeLog([])  # the causes fetched on the way (items put snapshots back)
    updates = await _snapshots(client, cube, log_,
                               _updates(await fetch(client, cube, _merge(*refs))))
    done, todo = {node_id}, _lineage_ids(updates, node_id)
    for _ in range(MAX_DEPTH):
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
    return explain_node(log_, node_id)


def _lineage_ids(updates: Sequence[MemoryUpdate], node_id: str) -> set[str]:
    """The memories ``node_id`` came from: merged into it, premises, its episode."""
    found: set[str] = set()
    for u in updates:
        if u.action == "merged" and u.node_id == node_id:
            found.update(u.related_ids)
        found.update(e.target for e in u.edges
                     if e.source == node_id and e.type == "INFERRED_FROM")
    node = latest_snapshot(updates, node_id)
    if node is not None:
        found.update(r.memory_id for r in node.metadata.sources
                     if r.kind == "memory" and r.memory_id)
    return found
