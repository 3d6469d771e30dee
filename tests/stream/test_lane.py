"""The request lane (``streams/runtime/lane.py``) against the real broker: every record handled,
at once and concurrently, offsets committed only past finished records, resumed after a
restart, and one failing record never stops the others."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memstream.kafka.admin import ensure_topics
from memstream.streams.runtime.lane import RequestLane
from memstream.streams.runtime.stage import RawRecord, StageStats
from memstream.topics.registry import REQUESTS, consumer_group
from memstream.topics.settings import Settings
from tests.stream.broker_fixtures import stream_settings


def lane_settings(bootstrap: str, prefix: str) -> Settings:
    s = stream_settings(bootstrap, prefix, partitions=2, session_timeout_s=6,
                        rebalance_timeout_s=6)
    return s.model_copy(update={"app_id": f"lane-{uuid.uuid4().hex[:8]}",
                                "worker": s.worker.model_copy(update={"commit_interval_s": 0.1})})


async def publish(bootstrap: str, topic: str, values: list[bytes], partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for v in values:
            await producer.send_and_wait(topic, v, partition=partition)
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str, topic: str, partition: int) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    meta = offsets.get(TopicPartition(topic, partition))
    return None if meta is None or meta.offset < 0 else meta.offset


async def eventually(check, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_records_are_handled_concurrently_and_commits_wait_for_the_slowest(
    kafka_broker: str, topic_prefix: str
) -> None:
    settings = lane_settings(kafka_broker, topic_prefix)
    await ensure_topics(settings, kafka_broker)
    topic, group = REQUESTS.name(settings), consumer_group(settings, REQUESTS)
    release_slow = asyncio.Event()
    finished: list[bytes] = []

    async def handler(raw: RawRecord) -> None:
        if raw.value == b"slow":
            await release_slow.wait()
        if raw.value == b"bad":
            raise RuntimeError("this request breaks its handler")
        finished.append(raw.value or b"")

    stats = StageStats()
    lane = RequestLane(settings, kafka_broker, REQUESTS, "test", handler, stats, max_in_flight=8)
    await lane.start()
    try:
        await publish(kafka_broker, topic, [b"slow", b"a", b"bad", b"b"], partition=0)

        async def fast_ones_done() -> bool:
            return finished == [b"a", b"b"]

        # the slow record does not hold back the ones behind it
        await eventually(fast_ones_done)
        await asyncio.sleep(0.4)  # several commit rounds
        # ... but nothing past it is committed while it is unfinished (a crash would redo it)
        assert await committed(kafka_broker, group, topic, 0) in (None, 0)
        release_slow.set()

        async def all_committed() -> bool:
            return await committed(kafka_broker, group, topic, 0) == 4

        await eventually(all_committed)
        assert sorted(finished) == [b"a", b"b", b"slow"]
        assert stats.processed == 3  # the failing one was logged, not counted, not fatal
    finally:
        await lane.stop()


async def test_a_restarted_lane_resumes_after_what_it_finished(
    kafka_broker: str, topic_prefix: str
) -> None:
    settings = lane_settings(kafka_broker, topic_prefix)
    await ensure_topics(settings, kafka_broker)
    topic = REQUESTS.name(settings)
    seen: list[bytes] = []

    async def handler(raw: RawRecord) -> None:
        seen.append(raw.value or b"")

    async def run_until(count: int) -> None:
        lane = RequestLane(settings, kafka_broker, REQUESTS, "test", handler, StageStats(), 4)
        await lane.start()
        try:
            async def got_all() -> bool:
                return len(seen) >= count

            await eventually(got_all)
        finally:
            await lane.stop()  # commits what it finished

    await publish(kafka_broker, topic, [b"1", b"2"], partition=1)
    await run_until(2)
    await publish(kafka_broker, topic, [b"3"], partition=1)
    await run_until(3)
    assert seen == [b"1", b"2", b"3"]  # nothing handled twice across the restart


async def test_a_lane_stops_promptly_with_nothing_to_read(
    kafka_broker: str, topic_prefix: str
) -> None:
    settings = lane_settings(kafka_broker, topic_prefix)
    await ensure_topics(settings, kafka_broker)

    async def handler(raw: RawRecord) -> None:
        raise AssertionError("no records were published")

    lane = RequestLane(settings, kafka_broker, REQUESTS, "test", handler, StageStats(), 4)
    await lane.start()
    await asyncio.sleep(0.3)
    await asyncio.wait_for(lane.stop(), timeout=10)
