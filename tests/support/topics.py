"""Topic helpers for tests: read what the log holds, publish raw bytes."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from memstream.client.client import MemoryClient
from memstream.topics.registry import TopicSpec
from memstream.topics.settings import Settings


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


async def topic_config(bootstrap: str, topic: str, key: str) -> str | None:
    """One config value of a topic as the broker reports it (None when not set)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = response.resources[0][4]
        return next((value for name, value, *_ in entries if name == key), None)
    finally:
        await admin.close()
