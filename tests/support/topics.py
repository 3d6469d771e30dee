"""Read a topic exactly: from the beginning up to the end offsets seen at call time."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from topics.registry import TopicSpec
from topics.settings import Settings


async def read_topic(settings: Settings, bootstrap: str, spec: TopicSpec,
                     decode: bool = True) -> list[Any]:
    """Every record of a topic (decoded events, or raw ``ConsumerRecord``s), partition order."""
    name = spec.name(settings)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()  # refreshes metadata
        tps = [TopicPartition(name, p) for p in sorted(consumer.partitions_for_topic(name) or [])]
        assert tps, f"topic {name} does not exist"
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=2000)
            for tp, msgs in batch.items():
                for msg in msgs:
                    if msg.offset < ends[tp]:
                        records.append(spec.decode(msg.value) if decode else msg)
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return records
    finally:
        await consumer.stop()


async def produce_raw(bootstrap: str, topic: str, value: bytes, key: bytes) -> int:
    """Publish raw bytes (for bad-input tests); returns the offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value, key=key)
        return int(meta.offset)
    finally:
        await producer.stop()
