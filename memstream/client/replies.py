"""Replies for one client: a consumer assigned to one partition of the reply topic.

No consumer group, so there is no rejoin per request: the partition is chosen once
(at random, so clients spread over partitions), named in every request as
``reply_partition``, and read from its end for the client's lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import random

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.kafka.compat import (
    cancel_within,
    pause_consumer,
    start_or_release,
    stop_within,
)
from memstream.topics.events import Reply
from memstream.topics.registry import REPLIES
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.client")


class ReplyListener:
    def __init__(self, settings: Settings, bootstrap: str, topic: str | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topic = topic or REPLIES.name(settings)
        self.partition = 0
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await start_or_release(consumer, "reply consumer")
        pause_consumer(consumer, self.settings.kafka, self.bootstrap)  # a caller waits on it
        await consumer.topics()  # metadata for every topic, without creating any
        partitions = sorted(consumer.partitions_for_topic(self.topic) or [])
        if not partitions:
            await consumer.stop()
            raise RuntimeError(f"reply topic {self.topic!r} does not exist")
        self.partition = random.choice(partitions)  # noqa: S311 - load spreading, not security
        tp = TopicPartition(self.topic, self.partition)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)  # resolve the end now, before any request is sent
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="memstream-replies")

    async def _run(self) -> None:
        assert self._consumer is not None  # noqa: S101
        async for msg in self._consumer:
            try:
                reply = REPLIES.decode(msg.value or b"")
            except ValidationError as exc:
                log.warning("undecodable reply at %s[%d]@%d: %s", msg.topic, msg.partition,
                            msg.offset, exc)
                continue
            assert isinstance(reply, Reply)  # noqa: S101
            future = self._pending.pop(reply.correlation_id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    def expect(self, correlation_id: str) -> asyncio.Future[Reply]:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        self._pending.pop(correlation_id, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_within(task, "reply reader")
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_within(consumer, "reply consumer")
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
