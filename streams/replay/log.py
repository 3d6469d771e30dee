"""Read one cube's records back from the retained topics, in the order they were written.

Every event of a cube is keyed by the cube id, so it lives in one partition of each topic
(the producers' default partitioner, murmur2 of the key): only that partition is read.
Records of several topics are merged by their log timestamp, then topic, then offset, so
an update command is applied after the memory it changes, as it was live.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2
from pydantic import ValidationError

from memstream.archive.reading import archived, seek_past_archive
from memstream.security.signing import SignatureRefused, Verifier
from memstream.streams.runtime.stage import RawRecord, Record
from memstream.streams.runtime.trust import verify_record
from memstream.topics.events import Origin
from memstream.topics.registry import TopicSpec
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.replay")


def cube_partition(cube_id: str, partitions: int) -> int:
    """The partition the default partitioner puts ``cube_id``'s events in."""
    hashed: int = murmur2(cube_id.encode())
    return (hashed & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class LogRecord:
    """One decoded record of a cube, with where and when it was written."""

    spec: TopicSpec
    rank: int  # the topic's place in the merge (ties of timestamp)
    timestamp_ms: int
    record: Record[Any]

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return self.timestamp_ms, self.rank, self.record.raw.offset


async def end_offsets(settings: Settings, bootstrap: str, cube_id: str,
                      specs: Sequence[TopicSpec]) -> dict[str, int]:
    """topic name -> end offset of the cube's partition now: the replay's horizon."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [await _partition_of(consumer, settings, spec, cube_id) for spec in specs]
        ends = await consumer.end_offsets(tps)
        return {tp.topic: int(ends[tp]) for tp in tps}
    finally:
        await consumer.stop()


async def _partition_of(consumer: AIOKafkaConsumer, settings: Settings, spec: TopicSpec,
                        cube_id: str) -> TopicPartition:
    name = spec.name(settings)
    parts = consumer.partitions_for_topic(name)
    if not parts:
        await consumer.topics()  # refreshes metadata
        parts = consumer.partitions_for_topic(name)
    if not parts:
        raise LookupError(f"topic {name} does not exist")
    return TopicPartition(name, cube_partition(cube_id, len(parts)))


async def read_cube(settings: Settings, bootstrap: str, cube_id: str,
                    specs: Sequence[TopicSpec], ends: dict[str, int],
                    verifier: Verifier | None = None) -> list[LogRecord]:
    """The cube's decodable records of ``specs`` below ``ends``, merged in write order.

    Records that do not decode, or whose signature ``verifier`` refuses (they were
    dead-lettered when they arrived), are skipped."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    found: list[LogRecord] = []
    try:
        # every partition looked up before the first assign narrows the consumer's metadata
        tps = [await _partition_of(consumer, settings, spec, cube_id) for spec in specs]
        for rank, (spec, tp) in enumerate(zip(specs, tps, strict=True)):
            end = ends.get(tp.topic, 0)

            def take(msg: Any, spec: TopicSpec = spec, tp: TopicPartition = tp,
                     rank: int = rank) -> None:
                if msg.key != cube_id.encode() or msg.value is None:
                    return
                try:
                    value = spec.decode(msg.value)
                except ValidationError:
                    log.debug("replay: skipping undecodable %s@%d", tp.topic, msg.offset)
                    return
                if getattr(value, "cube_id", None) != cube_id:
                    return
                raw = RawRecord(tp.topic, tp.partition, msg.offset, msg.key, msg.value,
                                tuple(msg.headers), msg.timestamp)
                try:
                    verify_record(verifier, raw, value)
                except SignatureRefused:
                    return
                origin = Origin(topic=tp.topic, partition=tp.partition, offset=msg.offset)
                found.append(LogRecord(spec, rank, msg.timestamp, Record(value, origin, raw)))

            # the archived records first, then the broker's from where the archive ends
            for msg in archived(settings, tp, stop=end, key=cube_id.encode()):
                take(msg)
            consumer.assign([tp])
            await seek_past_archive(consumer, settings, [tp])
            while end > 0 and await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=2000)
                for msg in batch.get(tp, []):
                    if msg.offset >= end:
                        break
                    take(msg)
    finally:
        await consumer.stop()
    found.sort(key=lambda r: r.sort_key)
    return found
