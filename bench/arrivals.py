"""Following a topic from its end: when did each event arrive (the scheduler benches)."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition


class Arrivals:
    """Follows a topic from its end and notes when each event id arrives."""

    def __init__(self, bootstrap: str, topic: str, decode: type) -> None:
        self.bootstrap, self.topic, self.decode = bootstrap, topic, decode
        self.seen: dict[str, float] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        await consumer.topics()
        tps = [TopicPartition(self.topic, p)
               for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)
        self.task = asyncio.create_task(self._run(consumer))

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=100)
                now = time.perf_counter()
                for msgs in batch.values():
                    for msg in msgs:
                        event = self.decode.model_validate_json(msg.value)  # type: ignore[attr-defined]
                        key = getattr(event, "cause_event_id", None) or event.event_id
                        self.seen.setdefault(key, now)
        finally:
            await consumer.stop()

    async def wait(self, event_id: str, timeout: float = 60.0) -> float:
        deadline = time.perf_counter() + timeout
        while event_id not in self.seen:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no {self.topic} event {event_id}")
            await asyncio.sleep(0.001)
        return self.seen[event_id]

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
