"""What every client call stands on: settings, the started producer, and the lifecycle.

``ClientCore`` holds the client's state (the producer, the reply listener, the worker
probe, the progress reader), starts and closes it, and is the one
path a contract event takes to the broker (``publish``); the call families build on it.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from memstream.client.errors import ClientError
from memstream.client.replies import ReplyListener
from memstream.client.workers import WorkerProbe
from memstream.kafka import tracing
from memstream.kafka.compat import stop_within
from memstream.kafka.headers import headers_for
from memstream.kafka.progress import Progress
from memstream.security.keys import activate as activate_keys
from memstream.security.keys import release as release_keys
from memstream.security.signing import Signer
from memstream.topics.events import Event, WriteToken, new_event_id
from memstream.topics.limits import check_content, check_encoded
from memstream.topics.registry import TopicSpec
from memstream.topics.settings import Settings


def call_span(call: str, event: BaseModel | None) -> AbstractContextManager[Any]:
    """The span of one client call (``memstream.client.search``, ``...add_messages``)."""
    return tracing.span(f"memstream.client.{call}", {
        "memstream.user_id": getattr(event, "user_id", None),
        "memstream.cube_id": getattr(event, "cube_id", None)}, kind="client")


class ClientCore:
    """The client's state and lifecycle, and ``publish``; ``MemoryClient`` adds the calls."""

    def __init__(self, settings: Settings | None = None, bootstrap: str | None = None) -> None:
        self.settings = settings or Settings()
        self._bootstrap = bootstrap or self.settings.kafka.bootstrap_servers
        self._producer: AIOKafkaProducer | None = None
        self._progress: Progress | None = None
        self._replies: ReplyListener | None = None
        self._replies_lock = asyncio.Lock()  # concurrent first requests start one listener
        self.client_id = f"{self.settings.kafka.client_id}-{new_event_id()[:12]}"
        self._keys: Path | None = None  # the key directory this client activated
        self._probe: WorkerProbe | None = None  # asks whether a worker is there
        self._signer = Signer.of(self.settings.security)  # None: publishes unsigned

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            from memstream.local.datadir import find_data_dir

            raise ClientError("no Kafka bootstrap server: no broker runs in "
                              f"{find_data_dir(self.settings)}; run `memstream up` there, or "
                              "set MEMSTREAM_DATA_DIR or MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS")
        return self._bootstrap

    async def start(self) -> None:
        if self._bootstrap is None:
            from memstream.local.broker import running_broker
            from memstream.local.datadir import find_data_dir

            # the stack `memstream up` started here or in a parent directory
            self._bootstrap = await running_broker(find_data_dir(self.settings) / "broker")
        from memstream.kafka.admin import ensure_topics

        if (key_dir := self.settings.erasure_key_dir) is not None and self._keys is None:
            activate_keys(key_dir)  # seal what it publishes with per-cube keys
            self._keys = key_dir
        await ensure_topics(self.settings, self.bootstrap)
        tracing.configure(self.settings.tracing, "memstream-client")
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", client_id=self.settings.kafka.client_id,
            linger_ms=0, compression_type=self.settings.kafka.producer_compression,
        )
        await self._producer.start()

    async def close(self) -> None:
        if self._keys is not None:
            release_keys(self._keys)
            self._keys = None
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_within(producer, "producer")
        progress, self._progress = self._progress, None
        if progress is not None:
            await progress.close()  # bounded inside
        replies, self._replies = self._replies, None
        if replies is not None:
            await replies.close()  # bounded inside
        probe, self._probe = self._probe, None
        if probe is not None:
            await probe.close()

    async def publish(
        self, spec: TopicSpec, event: BaseModel, key: bytes | None = None
    ) -> WriteToken:
        """Publish one contract event; returns where it landed.

        Raises ``LimitExceeded`` (a ``ValueError``) for an event over a size limit, before
        anything reaches the broker."""
        if self._producer is None:
            raise ClientError("client not started: use `async with MemoryClient(...)`")
        if key is None and isinstance(event, Event):
            key = event.kafka_key
        check_content(event, self.settings.limits)
        plain = spec.plain(event)  # the worker checks the opened value against the same limit
        check_encoded(plain, self.settings.limits, type(event).__name__)
        data = spec.encode(event, plain)
        check_encoded(data, self.settings.limits, type(event).__name__)
        try:
            with tracing.span(f"memstream.client.publish {spec.suffix}", {
                    "messaging.system": "kafka", "messaging.destination.name":
                    spec.name(self.settings)}, kind="producer"):
                meta = await self._producer.send_and_wait(
                    spec.name(self.settings), data, key=key,
                    headers=headers_for(event, data, self._signer))
        except KafkaError as exc:
            raise ClientError(f"could not publish to {spec.name(self.settings)} at "
                              f"{self.bootstrap}: {exc}; is the broker running?") from exc
        return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)
