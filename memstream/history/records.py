"""Reading records of the log by position, for history, explain and as-of.

Two consumers per client (``Readers``) do all the reading: one asks how far the provenance
indexer got, one fetches the records the index points at, seeking over the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.archive.reading import archive_end, archived_at
from memstream.history.log_index import index_group
from memstream.kafka.compat import mark_latency_sensitive, start_or_release, stop_within
from memstream.topics.events import Event
from memstream.topics.registry import BY_SUFFIX

if TYPE_CHECKING:
    from memstream.client.client import MemoryClient

log = logging.getLogger("memstream.provenance")

_FETCH_BYTES = 256 * 1024  # one fetch: enough for a run of records, little of others'
_GAP = 64  # wanted offsets closer than this are read through rather than sought


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


async def readers_of(client: MemoryClient) -> Readers:
    if client.provenance_readers is None:
        client.provenance_readers = Readers(client)
    await client.provenance_readers.start()
    return client.provenance_readers


async def fetch(client: MemoryClient, cube_id: str,
                positions: Mapping[str, Iterable[int]]) -> dict[str, list[Event]]:
    """The cube's events at ``positions`` (``"topic|partition"`` → offsets), by topic suffix,
    in log order. A position that cannot be read (an erased cube's) is left out."""
    out: dict[str, list[Event]] = {}
    wanted = {key: sorted(set(offsets)) for key, offsets in positions.items() if offsets}
    if not wanted:
        return out
    readers = await readers_of(client)
    assert readers.fetcher is not None  # noqa: S101 - started above
    unreadable: list[str] = []
    async with readers.lock:
        for key, offsets in sorted(wanted.items()):
            suffix, _, part = key.rpartition("|")
            spec = BY_SUFFIX[suffix]
            tp = TopicPartition(spec.name(client.settings), int(part))
            end = archive_end(client.settings, tp)  # below it the records are in segments
            old = [o for o in offsets if o < end]
            live = [o for o in offsets if o >= end]
            values = [r.value or b"" for r in archived_at(client.settings, tp, old)]
            if live:
                values += await _read_offsets(readers.fetcher, tp, live)
            for record in values:
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
