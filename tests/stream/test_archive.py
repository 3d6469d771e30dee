"""The log's older records move off the embedded broker into segment files, and every reader
still reads one log (memstream/archive/): a real noida broker, real segment files."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from memstream.archive.archiver import archive_once
from memstream.archive.segments import Archive
from memstream.client.client import MemoryClient
from memstream.history.provenance import read_log
from memstream.history.records import fetch
from memstream.kafka.admin import ensure_topics
from memstream.local.broker import NoidaBroker
from memstream.local.broker_snapshot import DATA_FILE
from memstream.topics.events import MemoryUpdate
from memstream.topics.registry import MEMORY_UPDATES, REORGANIZE_HIGH
from memstream.topics.settings import Settings

N = 1200


def update(n: int) -> MemoryUpdate:
    cube = "alice" if n % 2 else "bob"
    return MemoryUpdate(event_id=f"e{n:05d}", user_id=cube, cube_id=cube, action="added",
                        stage="memory.add", node_id=f"node-{n}", reason=f"reason {n} " * 20)


async def publish(settings: Settings, bootstrap: str, first: int, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for n in range(first, first + count):
            event = update(n)
            await producer.send(MEMORY_UPDATES.name(settings), MEMORY_UPDATES.encode(event),
                                key=event.cube_id.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def beginning(bootstrap: str, tp: TopicPartition) -> int:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        return (await reader.beginning_offsets([tp]))[tp]
    finally:
        await reader.stop()


async def test_older_records_leave_the_broker_and_every_reader_still_reads_them(
        tmp_path: Path) -> None:
    broker = NoidaBroker(tmp_path / "broker")
    bootstrap = await broker.start()
    try:
        settings = Settings(data_dir=tmp_path, app_id="arch",
                            kafka={"bootstrap_servers": bootstrap, "partitions": 1},
                            archive={"min_records": 100, "segment_records": 400})
        await ensure_topics(settings, bootstrap)
        await publish(settings, bootstrap, 0, N)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for _ in range(50):
                await producer.send(REORGANIZE_HIGH.name(settings), b"{}", key=b"alice")
        finally:
            await producer.stop()
        updates = TopicPartition(MEMORY_UPDATES.name(settings), 0)
        group = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 group_id="arch")
        await group.start()
        try:  # a consumer group has got as far as 1,100: the rest stays on the broker
            group.assign([updates])
            await group.commit({updates: OffsetAndMetadata(1100, "")})
        finally:
            await group.stop()
        await asyncio.sleep(1.5)  # the broker saves its file about once a second
        before = (tmp_path / "broker" / DATA_FILE).stat().st_size

        nothing = await archive_once(settings, bootstrap, after_s=3600)
        assert nothing.total == 0  # nothing is that old
        done = await archive_once(settings, bootstrap, after_s=0)
        assert done.archived == {updates.topic: 1100}
        assert done.segments == 3  # 400 records a segment at most
        assert done.deleted == {REORGANIZE_HIGH.name(settings): 50}  # consumed by nobody
        assert await beginning(bootstrap, updates) == 1100
        assert Archive(tmp_path).end(updates.topic, 0) == 1100
        await asyncio.sleep(1.5)
        after = (tmp_path / "broker" / DATA_FILE).stat().st_size
        assert after < before / 3, (before, after)

        async with MemoryClient(settings, bootstrap) as client:
            history = await client.history(MEMORY_UPDATES)
            assert [u.event_id for u in history] == [f"e{n:05d}" for n in range(N)]
            assert (history[3].node_id, history[3].reason) == ("node-3", update(3).reason)
            alice = (await read_log(client, [MEMORY_UPDATES], "alice"))[MEMORY_UPDATES.suffix]
            assert [u.event_id for u in alice] == [f"e{n:05d}" for n in range(1, N, 2)]
            found = await fetch(client, "alice", {"memory.updates|0": [1, 999, 1101, 1199]})
            assert [u.event_id for u in found["memory.updates"]] == [
                "e00001", "e00999", "e01101", "e01199"]
    finally:
        await broker.stop()


async def test_a_segment_whose_records_the_broker_still_holds_is_read_once_then_finished(
        tmp_path: Path) -> None:
    """A crash between writing a segment and deleting its records from the broker: readers
    read each record once, and the next round deletes them."""
    broker = NoidaBroker(tmp_path / "broker")
    bootstrap = await broker.start()
    try:
        settings = Settings(data_dir=tmp_path, app_id="arch2",
                            kafka={"bootstrap_servers": bootstrap, "partitions": 1},
                            archive={"min_records": 1000})
        await ensure_topics(settings, bootstrap)
        await publish(settings, bootstrap, 0, 300)
        updates = TopicPartition(MEMORY_UPDATES.name(settings), 0)
        async with MemoryClient(settings, bootstrap) as client:
            from memstream.archive.archiver import _read

            reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
            await reader.start()
            try:
                Archive(tmp_path).write(updates.topic, 0, await _read(reader, updates, 0, 200))
            finally:
                await reader.stop()
            assert await beginning(bootstrap, updates) == 0  # the crash: nothing deleted
            history = await client.history(MEMORY_UPDATES)
            assert [u.event_id for u in history] == [f"e{n:05d}" for n in range(300)]
            done = await archive_once(settings, bootstrap, after_s=0)
            assert done.archived == {}  # 100 more are fewer than min_records
            assert await beginning(bootstrap, updates) == 200  # but the deletion is finished
            history = await client.history(MEMORY_UPDATES)
            assert [u.event_id for u in history] == [f"e{n:05d}" for n in range(300)]
    finally:
        await broker.stop()
