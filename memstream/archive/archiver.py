"""The worker's archiver: the log's older records off the embedded broker, into segments.

Every ``archive.every_s`` the worker looks at each partition of the retained topics
(``kafka/log_ends.py``'s ``TRACKED`` and the working-memory topic replay reads). The records
written more than ``archive.after_s`` ago that every consumer group has passed are read
through a consumer, written into a segment (``segments.py``) and then deleted from the
broker (Kafka DeleteRecords, which the embedded broker drops from its file at once). The
queue topics that nothing reads again (reorganize, schedule, activation memory) are deleted
once passed and as old, without a segment. A lock file keeps two workers on one data
directory from archiving at once; a crash between a segment and its deletion is finished by
the next round (readers skip what the broker still holds below the archive's end).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.errors import KafkaError

from memstream.archive.segments import Archive, ArchivedRecord
from memstream.kafka.log_ends import TRACKED
from memstream.kafka.trim import cut_offsets
from memstream.topics.registry import (
    ACTIVATION_MEMORY,
    REORGANIZE_HIGH,
    REORGANIZE_LOW,
    REORGANIZE_NORMAL,
    SCHEDULE_ADD,
    SCHEDULE_ANSWER,
    SCHEDULE_QUERY,
    WORKING_MEMORY,
    TopicSpec,
)
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.archive")

ARCHIVED: tuple[TopicSpec, ...] = (*TRACKED, WORKING_MEMORY)
QUEUES: tuple[TopicSpec, ...] = (REORGANIZE_HIGH, REORGANIZE_NORMAL, REORGANIZE_LOW,
                                 SCHEDULE_QUERY, SCHEDULE_ANSWER, SCHEDULE_ADD,
                                 ACTIVATION_MEMORY)
OLD_S = 24 * 3600.0  # records this old are archived even when fewer than min_records wait
LOCK = ".lock"


@dataclass
class Round:
    """What one round moved: records into segments, queue records deleted, per topic."""

    archived: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    segments: int = 0
    skipped: str = ""  # why nothing was looked at (another worker archiving)

    @property
    def total(self) -> int:
        return sum(self.archived.values()) + sum(self.deleted.values())


def enabled(settings: Settings, bootstrap: str) -> bool:
    mode = settings.archive.enabled
    if mode != "auto":
        return mode == "always"
    from memstream.local.broker import is_embedded

    return is_embedded(settings, bootstrap)


@contextlib.contextmanager
def _locked(archive: Archive) -> Iterator[bool]:
    archive.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(archive.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


async def _passed(admin: AIOKafkaAdminClient,
                  tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """Per partition, the lowest offset any consumer group has committed on it (partitions
    no group has committed on are left out: nothing holds them back)."""
    wanted = set(tps)
    low: dict[TopicPartition, int] = {}
    for group, _protocol in await admin.list_consumer_groups():
        offsets = await admin.list_consumer_group_offsets(group)
        for tp, meta in offsets.items():
            if tp in wanted and meta is not None and meta.offset >= 0:
                low[tp] = min(low.get(tp, meta.offset), meta.offset)
    return low


async def _read(consumer: AIOKafkaConsumer, tp: TopicPartition, start: int,
                stop: int) -> list[ArchivedRecord]:
    consumer.assign([tp])
    consumer.seek(tp, start)
    out: list[ArchivedRecord] = []
    idle = 0
    while await consumer.position(tp) < stop:
        batch = (await consumer.getmany(tp, timeout_ms=1000, max_records=5000)).get(tp, [])
        if not batch:
            idle += 1
            if idle >= 30:
                raise KafkaError(f"{tp.topic}[{tp.partition}]: records {start}..{stop - 1} "
                                 "could not be read for the archive")
            continue
        idle = 0
        for r in batch:
            if r.offset >= stop:
                break
            out.append(ArchivedRecord(tp.topic, tp.partition, r.offset, r.timestamp, r.key,
                                      r.value, tuple((k, bytes(v)) for k, v in r.headers)))
    return out


async def archive_once(settings: Settings, bootstrap: str,
                       after_s: float | None = None) -> Round:
    """One round (see the module's text); ``after_s`` overrides the setting."""
    cfg = settings.archive
    after = cfg.after_s if after_s is None else after_s
    archive = Archive(settings.data_dir)
    done = Round()
    with _locked(archive) as mine:
        if not mine:
            done.skipped = "another worker is archiving this data directory"
            return done
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    max_partition_fetch_bytes=4 * 1024 * 1024)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                    client_id=f"{settings.kafka.client_id}-archive")
        await consumer.start()
        await admin.start()
        try:
            await _round(settings, consumer, admin, archive, after, done)
        finally:
            await admin.close()
            await consumer.stop()
    return done


async def _round(settings: Settings, consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient,
                 archive: Archive, after: float, done: Round) -> None:
    cfg = settings.archive
    await consumer.topics()
    kept = {spec.name(settings) for spec in ARCHIVED}
    tps = [TopicPartition(spec.name(settings), p) for spec in (*ARCHIVED, *QUEUES)
           for p in sorted(consumer.partitions_for_topic(spec.name(settings)) or ())]
    if not tps:
        return
    starts = await consumer.beginning_offsets(tps)
    now = time.time()
    cuts = await cut_offsets(consumer, tps, int((now - after) * 1000))
    old = await cut_offsets(consumer, tps, int((now - OLD_S) * 1000))
    passed = await _passed(admin, tps)
    deletions: dict[TopicPartition, int] = {}
    for tp in tps:
        start = int(starts[tp])
        cut = min(cuts.get(tp, start), passed.get(tp, cuts.get(tp, start)))
        if tp.topic not in kept:
            if cut > start:
                deletions[tp] = cut
                done.deleted[tp.topic] = done.deleted.get(tp.topic, 0) + cut - start
            continue
        end = archive.end(tp.topic, tp.partition)
        begin = max(start, end)
        if end > start:  # a segment written, its deletion not: finish it
            deletions[tp] = end
        if cut - begin < cfg.min_records and old.get(tp, begin) <= begin:
            continue
        if cut <= begin:
            continue
        for first in range(begin, cut, cfg.segment_records):
            records = await _read(consumer, tp, first, min(cut, first + cfg.segment_records))
            if records and archive.write(tp.topic, tp.partition, records) is not None:
                done.segments += 1
                done.archived[tp.topic] = done.archived.get(tp.topic, 0) + len(records)
        deletions[tp] = cut
    if deletions:
        await admin.delete_records({tp: RecordsToDelete(before_offset=cut)
                                    for tp, cut in deletions.items()}, timeout_ms=30_000)


async def archive_forever(settings: Settings, bootstrap: str) -> None:
    """``archive_once`` every ``archive.every_s``; a failure is logged and tried again."""
    while True:
        await asyncio.sleep(settings.archive.every_s)
        try:
            done = await archive_once(settings, bootstrap)
        except (KafkaError, OSError) as exc:
            log.warning("could not archive the log's older records (will try again): %s", exc)
            continue
        if done.total:
            log.info("archived %d records into %d segments, deleted %d consumed queue "
                     "records", sum(done.archived.values()), done.segments,
                     sum(done.deleted.values()))
