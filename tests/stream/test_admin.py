"""Topic admin against real brokers: the session noida broker, and one tansu broker."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from memstream.kafka.admin import (
    GroupOffsetsUnsupported,
    Position,
    TopicAdminError,
    delete_topics,
    ensure_topics,
    group_lag,
    group_positions,
    topic_offsets,
)
from memstream.local.broker import TansuBroker
from memstream.topics.events import ConversationChunk
from memstream.topics.registry import (
    ALL_TOPICS,
    CONVERSATIONS,
    MEMORY_UPDATES,
    REPLIES,
    REPLIES_RETENTION_MS,
    REQUESTS,
    TopicSpec,
)
from tests.stream.broker_fixtures import run_sync, start_broker, stream_settings, unique_prefix
from tests.support.topics import topic_config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = TansuBroker(tmp_path_factory.mktemp("kafka-tansu"))
    bootstrap = start_broker(broker)
    try:
        yield bootstrap
    finally:
        run_sync(broker.stop())


async def _describe(bootstrap: str) -> dict[str, dict[str, Any]]:
    """Every topic as the broker reports it, read independently of kafka.admin."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: t for t in await admin.describe_topics()}
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, count in per_partition.items():
            for i in range(count):
                await producer.send_and_wait(topic, f"m{i}".encode(), partition=partition)
    finally:
        await producer.stop()


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def test_ensure_topics_creates_the_whole_registry(kafka_broker: str, topic_prefix: str,
                                                        tmp_path: Path) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path, partitions=3)
    created = await ensure_topics(settings, kafka_broker)

    expected = {f"{topic_prefix}{spec.suffix}" for spec in ALL_TOPICS}
    assert set(created) == expected
    described = await _describe(kafka_broker)
    for name in expected:
        partitions = described[name]["partitions"]
        assert len(partitions) == 3 == created[name]
        assert all(p["leader"] >= 0 for p in partitions)
    # Retention follows each spec: the log of conversations and the history of every change
    # are kept forever (erasure shreds a cube's keys instead), replies only for an hour.
    assert await topic_config(kafka_broker, CONVERSATIONS.name(settings), "retention.ms") == "-1"
    assert await topic_config(kafka_broker, MEMORY_UPDATES.name(settings), "retention.ms") == "-1"
    for exchange in (REQUESTS, REPLIES):  # an hour: they matter for seconds
        assert await topic_config(kafka_broker, exchange.name(settings), "retention.ms") == str(
            REPLIES_RETENTION_MS)


async def test_ensure_topics_is_idempotent_and_keeps_data(kafka_broker: str, topic_prefix: str,
                                                          tmp_path: Path) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path)
    first = await ensure_topics(settings, kafka_broker)
    conversations = CONVERSATIONS.name(settings)
    await _produce(kafka_broker, conversations, {0: 2, 4: 1})
    before = await _describe(kafka_broker)

    second = await ensure_topics(settings, kafka_broker)

    assert second == first
    after = await _describe(kafka_broker)
    assert {n: after[n] for n in first} == {n: before[n] for n in first}
    assert await topic_offsets(kafka_broker, conversations) == {0: 2, 1: 0, 2: 0, 3: 0, 4: 1, 5: 0}


async def test_existing_smaller_topic_is_left_alone_with_a_warning(
    kafka_broker: str, topic_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path, partitions=4)
    conversations = CONVERSATIONS.name(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(conversations, 1, 1)])
    finally:
        await admin.close()

    with caplog.at_level(logging.WARNING, logger="memstream.kafka.admin"):
        created = await ensure_topics(settings, kafka_broker)

    assert created[conversations] == 1
    assert created[MEMORY_UPDATES.name(settings)] == 4
    assert f"topic {conversations} has 1 partitions, fewer than the 4 configured" in caplog.text


async def test_rejected_config_falls_back_to_a_plain_topic(
    kafka_broker: str, topic_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path)
    odd = TopicSpec("odd", ConversationChunk, partitions=2, config={"retention.ms": "forever"})
    with caplog.at_level(logging.WARNING, logger="memstream.kafka.admin"):
        created = await ensure_topics(settings, kafka_broker, specs=[odd])
    assert created == {f"{topic_prefix}odd": 2}
    assert "rejected configs {'retention.ms': 'forever'}" in caplog.text


async def test_impossible_replication_is_a_clear_error(kafka_broker: str, topic_prefix: str,
                                                       tmp_path: Path) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path, replication_factor=3)
    with pytest.raises(TopicAdminError, match=rf"cannot create topic {topic_prefix}\S+: .*repl"):
        await ensure_topics(settings, kafka_broker, specs=[CONVERSATIONS])


async def test_delete_topics_removes_only_this_prefix(kafka_broker: str, tmp_path: Path) -> None:
    mine = stream_settings(kafka_broker, unique_prefix("mine"), tmp_path)
    other = stream_settings(kafka_broker, unique_prefix("other"), tmp_path)
    await ensure_topics(mine, kafka_broker)
    await ensure_topics(other, kafka_broker, specs=[CONVERSATIONS])

    deleted = await delete_topics(mine, kafka_broker)

    assert sorted(deleted) == sorted(spec.name(mine) for spec in ALL_TOPICS)
    names = set(await _describe(kafka_broker))
    assert not names & set(deleted)
    assert CONVERSATIONS.name(other) in names
    assert await delete_topics(mine, kafka_broker) == []


async def test_offsets_of_an_unknown_topic_fail_without_creating_it(
    kafka_broker: str, topic_prefix: str
) -> None:
    with pytest.raises(TopicAdminError, match="does not exist"):
        await topic_offsets(kafka_broker, f"{topic_prefix}ghost")
    assert f"{topic_prefix}ghost" not in await _describe(kafka_broker)


async def test_group_lag_is_end_minus_committed(kafka_broker: str, topic_prefix: str,
                                                tmp_path: Path) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path, partitions=2)
    await ensure_topics(settings, kafka_broker, specs=[CONVERSATIONS])
    topic = CONVERSATIONS.name(settings)
    await _produce(kafka_broker, topic, {0: 5, 1: 3})
    group = f"{topic_prefix}group"
    await _commit(kafka_broker, group, {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 3})

    assert await group_lag(kafka_broker, group) == {topic: {0: 3, 1: 0}}
    assert await group_lag(kafka_broker, group, [topic]) == {topic: {0: 3, 1: 0}}
    assert await group_lag(kafka_broker, f"{topic_prefix}nobody") == {}
    # where the group stands (what the worker's stall check compares between samples)
    assert await group_positions(kafka_broker, group, [topic]) == {
        topic: {0: Position(committed=2, end=5), 1: Position(committed=3, end=3)}}


async def test_tansu_gets_topics_and_explains_missing_group_listing(tansu_broker: str,
                                                                    tmp_path: Path) -> None:
    settings = stream_settings(tansu_broker, unique_prefix("tansu"), tmp_path, partitions=2)
    created = await ensure_topics(settings, tansu_broker)
    assert created == {spec.name(settings): 2 for spec in ALL_TOPICS}
    assert await ensure_topics(settings, tansu_broker) == created

    topic = CONVERSATIONS.name(settings)
    await _produce(tansu_broker, topic, {0: 4})
    await _commit(tansu_broker, "tansu-group", {TopicPartition(topic, 0): 1})
    with pytest.raises(GroupOffsetsUnsupported, match="pass topics="):
        await group_lag(tansu_broker, "tansu-group")
    assert await group_lag(tansu_broker, "tansu-group", [topic]) == {topic: {0: 3, 1: 0}}
