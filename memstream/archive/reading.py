"""One log: a partition's archived records, then the broker's from where the archive ends.

Every reader that goes through a partition from its beginning calls ``archived`` for what
lies in segments and ``seek_past_archive`` before it fetches from the broker, so a record is
read once whichever side holds it (a crash between writing a segment and deleting its
records from the broker leaves both sides holding them for a moment).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.archive.segments import Archive, ArchivedRecord
from memstream.topics.settings import Settings


def archive_of(settings: Settings) -> Archive:
    return Archive(settings.data_dir)


def archived(settings: Settings, tp: TopicPartition, start: int = 0, stop: int | None = None,
             key: bytes | None = None) -> Iterator[ArchivedRecord]:
    """The partition's archived records from ``start`` up to ``stop`` (with ``key``)."""
    return archive_of(settings).read(tp.topic, tp.partition, start, stop, key)


def archived_at(settings: Settings, tp: TopicPartition,
                offsets: Iterable[int]) -> list[ArchivedRecord]:
    return archive_of(settings).read_offsets(tp.topic, tp.partition, offsets)


def archive_end(settings: Settings, tp: TopicPartition) -> int:
    """Where the partition's archive ends (0: nothing archived)."""
    return archive_of(settings).end(tp.topic, tp.partition)


async def seek_past_archive(consumer: AIOKafkaConsumer, settings: Settings,
                            tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Each assigned partition sought to its first record not in the archive (the broker's
    beginning, or the archive's end when that is later); returns those positions."""
    tps = list(tps)
    if not tps:
        return {}
    starts = await consumer.beginning_offsets(tps)
    out: dict[TopicPartition, int] = {}
    for tp in tps:
        at = max(starts.get(tp, 0), archive_end(settings, tp))
        consumer.seek(tp, at)
        out[tp] = at
    return out
