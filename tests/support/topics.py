"""Topic helpers for tests: read what the log holds, publish raw bytes."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from topics.client import MemoryClient
from topics.registry import TopicSpec
from topics.settings import Settings


async def read_topic(settings: Settings, bootstrap: str, spec: TopicSpec) -> list[Any]:
    """Every decoded record of a topic up to its end offsets at call time."""
    client = MemoryClient(settings, bootstrap)
    try:
        return await client.history(spec)
    finally:
        await client.close()


async def produce_raw(bootstrap: str, topic: str, value: bytes, key: bytes) -> int:
    """Publish raw bytes (for bad-input tests); returns the offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value, key=key)
        return int(meta.offset)
    finally:
        await producer.stop()
