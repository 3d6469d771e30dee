"""Transient topics leave the embedded broker's file (memstream/kafka/trim.py): checked by the
file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from memstream.kafka.admin import ensure_topics
from memstream.kafka.trim import KEEP_S, REPLY_KEEP_S, trim_once
from memstream.local.broker import NoidaBroker
from memstream.local.broker_snapshot import DATA_FILE
from memstream.topics.registry import MEMORY_ITEMS, REPLIES, REQUESTS, consumer_group
from memstream.topics.settings import Settings


@contextlib.asynccontextmanager
async def topics_on_a_broker(tmp_path: Path) -> AsyncIterator[tuple[Settings, str]]:
    """An embedded broker with memstream's topics, one partition each."""
    broker = NoidaBroker(tmp_path / "broker")
    bootstrap = await broker.start()
    try:
        settings = Settings(data_dir=tmp_path, app_id="trim",
                            kafka={"bootstrap_servers": bootstrap, "partitions": 1})
        await ensure_topics(settings, bootstrap)
        yield settings, bootstrap
    finally:
        await broker.stop()


async def taken(settings: Settings, bootstrap: str, requests: TopicPartition, upto: int
                ) -> None:
    """The worker's request lane has taken the requests before ``upto``."""
    lane = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                            group_id=consumer_group(settings, REQUESTS))
    await lane.start()
    try:
        lane.assign([requests])
        await lane.commit({requests: OffsetAndMetadata(upto, "")})
    finally:
        await lane.stop()


async def test_old_replies_and_answered_requests_are_deleted_from_the_file(
    tmp_path: Path,
) -> None:
    async with topics_on_a_broker(tmp_path) as (settings, bootstrap):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for topic, count in ((REPLIES, 200), (REQUESTS, 5), (MEMORY_ITEMS, 50)):
                for _ in range(count):
                    await producer.send(topic.name(settings), os.urandom(2_000), key=b"c")
            await producer.flush()
        finally:
            await producer.stop()
        requests = TopicPartition(REQUESTS.name(settings), 0)
        await taken(settings, bootstrap, requests, 3)  # the worker took the first three
        await asyncio.sleep(1.5)  # the broker saves its file about once a second
        before = (tmp_path / "broker" / DATA_FILE).stat().st_size

        assert await trim_once(settings, bootstrap, keep_s=3600) == 0  # nothing that old
        gone = await trim_once(settings, bootstrap, keep_s=0)
        assert gone == 200 + 3
        await asyncio.sleep(1.5)
        after = (tmp_path / "broker" / DATA_FILE).stat().st_size
        # 203 records of 2,000 bytes, about 3.6 characters a byte in noida's file
        assert before - after > 203 * 2_000 * 3, (before, after)
        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await reader.start()
        try:
            tps = [TopicPartition(REPLIES.name(settings), 0), requests,
                   TopicPartition(MEMORY_ITEMS.name(settings), 0)]
            starts = await reader.beginning_offsets(tps)
            assert [starts[tp] for tp in tps] == [200, 3, 0]  # items are never trimmed
        finally:
            await reader.stop()


async def test_a_reply_leaves_the_broker_after_seconds_and_a_request_after_minutes(
    tmp_path: Path,
) -> None:
    """By default (the worker's trim), replies older than ``REPLY_KEEP_S`` go: their client
    read them as they came; requests stay ``KEEP_S``, and replies younger than theirs stay."""
    async with topics_on_a_broker(tmp_path) as (settings, bootstrap):
        now_ms = int(time.time() * 1000)
        aged = now_ms - int((REPLY_KEEP_S + 30) * 1000)  # older than a reply's keep time
        assert aged > now_ms - KEEP_S * 1000  # but not a request's
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for topic in (REPLIES, REQUESTS):
                for at in (aged, aged, now_ms):
                    await producer.send(topic.name(settings), b"{}", key=b"c",
                                        timestamp_ms=at)
            await producer.flush()
        finally:
            await producer.stop()
        # the worker has taken every request: only their age keeps them
        await taken(settings, bootstrap, TopicPartition(REQUESTS.name(settings), 0), 3)
        assert await trim_once(settings, bootstrap) == 2
        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await reader.start()
        try:
            tps = [TopicPartition(REPLIES.name(settings), 0),
                   TopicPartition(REQUESTS.name(settings), 0)]
            starts = await reader.beginning_offsets(tps)
            assert [starts[tp] for tp in tps] == [2, 0]  # the fresh reply and every request
        finally:
            await reader.stop()
