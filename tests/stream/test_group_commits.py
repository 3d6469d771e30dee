"""A member that commits while another leaves the group stays in it and takes over.

Against the embedded broker, a commit sent in the generation a leaving member ended is
refused with ILLEGAL_GENERATION; unpatched aiokafka then forgets its member id and the
consumer wedged (no partitions taken over, no return from ``commit`` within 100 s).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import CommitFailedError
from aiokafka.structs import OffsetAndMetadata

from memstream.kafka.compat import stop_within
from memstream.streams.runtime.group_commits import commit_only_in_a_settled_group, settled

pytestmark = pytest.mark.timeout(120)
PARTITIONS = 4


async def _topic_with_records(bootstrap: str) -> str:
    topic = f"gc-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(4 * PARTITIONS):
            await producer.send_and_wait(topic, b"x", partition=i % PARTITIONS)
    finally:
        await producer.stop()
    return topic


def _member(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            enable_auto_commit=False, auto_offset_reset="earliest",
                            session_timeout_ms=6000, heartbeat_interval_ms=500)


async def test_a_member_committing_through_a_rebalance_keeps_its_id_and_takes_over(
    kafka_broker: str,
) -> None:
    assert commit_only_in_a_settled_group()
    topic = await _topic_with_records(kafka_broker)
    group = f"gc-{uuid.uuid4().hex[:8]}"
    leaving, staying = _member(kafka_broker, topic, group), _member(kafka_broker, topic, group)
    await leaving.start()
    await staying.start()
    try:
        async with asyncio.timeout(20):
            while not (leaving.assignment() and staying.assignment()):
                await leaving.getmany(timeout_ms=50)
                await staying.getmany(timeout_ms=50)
        member = staying._coordinator.member_id
        left = asyncio.create_task(leaving.stop())
        refused = 0
        started = time.monotonic()
        async with asyncio.timeout(20):  # unpatched: still wedged after 100 s
            while len(staying.assignment()) < PARTITIONS:
                await staying.getmany(timeout_ms=20)
                try:  # as faust's commit timer does, whatever the group is doing
                    await staying.commit({tp: OffsetAndMetadata(2, "")
                                          for tp in staying.assignment()})
                except CommitFailedError:
                    refused += 1
            await left
        took = time.monotonic() - started
        assert staying._coordinator.member_id == member, "rejoined as a new member"
        assert settled(staying._coordinator)
        await staying.commit({TopicPartition(topic, p): OffsetAndMetadata(3, "")
                              for p in range(PARTITIONS)})
        committed = [await staying.committed(TopicPartition(topic, p))
                     for p in range(PARTITIONS)]
        assert committed == [3] * PARTITIONS, committed
        assert took < 10, f"took {took:.1f}s over the leaving member's partitions"
        assert refused <= 3, f"{refused} commits refused during one rebalance"
    finally:
        await stop_within(leaving, "the leaving member")
        await stop_within(staying, "the staying member")


async def test_a_consumer_assigned_its_partitions_by_hand_still_commits(kafka_broker: str) -> None:
    """No group membership, so no generation: its commits are not held back."""
    assert commit_only_in_a_settled_group()
    topic = await _topic_with_records(kafka_broker)
    group = f"gc-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert not settled(consumer._coordinator)
        await consumer.commit({tp: OffsetAndMetadata(3, "")})
        assert await consumer.committed(tp) == 3
    finally:
        await stop_within(consumer, "the consumer")
