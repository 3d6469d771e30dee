"""The Python client that speaks the topic contract.

``async with MemoryClient(settings) as client`` publishes conversations, documents
and memories (each write returns a ``WriteToken``), follows ``memory.updates``,
and waits until a write has been applied by the workers (read-your-writes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import BaseModel, ValidationError

from topics.events import (
    ConversationChunk,
    DeadLetter,
    Document,
    Event,
    ExtractedMemory,
    MemoryUpdate,
    Message,
    WriteToken,
    new_event_id,
)
from topics.models import SourceRef, utcnow
from topics.registry import (
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    TopicSpec,
)
from topics.settings import Settings

log = logging.getLogger("memstream.client")


class ClientError(RuntimeError):
    """The client could not do what was asked (not started, timeout, broker unreachable)."""


class MemoryClient:
    """Async client for memstream's topics. Start it with ``async with`` or ``start()``."""

    def __init__(self, settings: Settings | None = None, bootstrap: str | None = None) -> None:
        self.settings = settings or Settings()
        self._bootstrap = bootstrap or self.settings.kafka.bootstrap_servers
        self._producer: AIOKafkaProducer | None = None
        self._offsets: AIOKafkaConsumer | None = None

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            raise ClientError("no Kafka bootstrap server: set MEMSTREAM_KAFKA__BOOTSTRAP_SERVERS "
                              "or run `memstream up` first")
        return self._bootstrap

    async def start(self) -> None:
        if self._bootstrap is None:
            from topics.broker import running_broker

            self._bootstrap = await running_broker(self.settings.data_dir / "broker")
        from topics.admin import ensure_topics

        await ensure_topics(self.settings, self.bootstrap)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", client_id=self.settings.kafka.client_id,
            linger_ms=1,
        )
        await self._producer.start()

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._offsets is not None:
            await self._offsets.stop()
            self._offsets = None

    async def __aenter__(self) -> MemoryClient:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ writes

    async def publish(
        self, spec: TopicSpec, event: BaseModel, key: bytes | None = None
    ) -> WriteToken:
        """Publish one contract event; returns where it landed."""
        if self._producer is None:
            raise ClientError("client not started: use `async with MemoryClient(...)`")
        if key is None and isinstance(event, Event):
            key = event.kafka_key
        meta = await self._producer.send_and_wait(
            spec.name(self.settings), spec.encode(event), key=key
        )
        return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)

    async def add_messages(
        self,
        user_id: str,
        messages: Sequence[Message | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Publish a conversation chunk. Messages need ``role`` and ``content``; a missing ``id``
        or ``timestamp`` is filled in (an id from the chunk, the current time)."""
        chunk_id = new_event_id()
        now = utcnow()
        msgs = []
        for i, m in enumerate(messages):
            if isinstance(m, Message):
                msgs.append(m)
                continue
            data = {"id": f"{chunk_id}-{i}", "timestamp": now, **dict(m)}
            msgs.append(Message.model_validate(data))
        chunk = ConversationChunk(
            event_id=chunk_id, user_id=user_id, cube_id=cube_id or user_id, kind="chat",
            session_id=session_id, messages=tuple(msgs),
        )
        return await self.publish(CONVERSATIONS, chunk)

    async def add_document(
        self,
        user_id: str,
        text: str,
        cube_id: str | None = None,
        doc_id: str | None = None,
        title: str | None = None,
        uri: str | None = None,
    ) -> WriteToken:
        """Publish a document; the extraction stage chunks it (``source=file``)."""
        doc = Document(doc_id=doc_id or new_event_id(), text=text, title=title, uri=uri)
        chunk = ConversationChunk(user_id=user_id, cube_id=cube_id or user_id, kind="doc",
                                  document=doc)
        return await self.publish(CONVERSATIONS, chunk)

    async def add_memories(
        self,
        user_id: str,
        memories: Sequence[str | Mapping[str, Any]],
        cube_id: str | None = None,
        session_id: str | None = None,
    ) -> WriteToken:
        """Add memories directly (no extraction). Each is a text or ExtractedMemory fields."""
        token: WriteToken | None = None
        for i, m in enumerate(memories):
            fields: dict[str, Any] = {"memory": m} if isinstance(m, str) else dict(m)
            fields.setdefault("sources", (SourceRef(kind="manual"),))
            item = ExtractedMemory(
                user_id=user_id, cube_id=cube_id or user_id, session_id=session_id,
                index=i, count=len(memories), **fields,
            )
            token = await self.publish(MEMORY_ITEMS, item)
        if token is None:
            raise ClientError("add_memories needs at least one memory")
        return token

    # ------------------------------------------------------------------ reads

    async def updates(
        self, cube_id: str | None = None, from_beginning: bool = False
    ) -> AsyncIterator[MemoryUpdate]:
        """Follow ``memory.updates`` (optionally one cube), from now or from the beginning."""
        async for event in self._follow(MEMORY_UPDATES, cube_id, from_beginning):
            assert isinstance(event, MemoryUpdate)  # noqa: S101 - the registry's type
            yield event

    async def dead_letters(self, from_beginning: bool = True) -> AsyncIterator[DeadLetter]:
        async for event in self._follow(DEAD_LETTER, None, from_beginning):
            assert isinstance(event, DeadLetter)  # noqa: S101
            yield event

    async def _follow(
        self, spec: TopicSpec, cube_id: str | None, from_beginning: bool
    ) -> AsyncIterator[BaseModel]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            name = spec.name(self.settings)
            parts = consumer.partitions_for_topic(name) or set()
            if not parts:
                await consumer.topics()  # refreshes metadata
                parts = consumer.partitions_for_topic(name) or set()
            tps = [TopicPartition(name, p) for p in sorted(parts)]
            consumer.assign(tps)
            if from_beginning:
                await consumer.seek_to_beginning(*tps)
            else:
                await consumer.seek_to_end(*tps)
            async for msg in consumer:
                try:
                    event = spec.decode(msg.value)
                except ValidationError as exc:
                    log.warning("skipping undecodable %s record at %d: %s", name, msg.offset, exc)
                    continue
                if cube_id is None or getattr(event, "cube_id", None) == cube_id:
                    yield event
        finally:
            await consumer.stop()

    # ------------------------------------------------------------------ read-your-writes

    async def _committed(self, tp: TopicPartition) -> int:
        if self._offsets is None:
            self._offsets = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=self.settings.app_id,
                enable_auto_commit=False,
            )
            await self._offsets.start()
        committed = await self._offsets.committed(tp)
        return committed if committed is not None else 0

    async def _end_offset(self, tp: TopicPartition) -> int:
        if self._offsets is None:
            await self._committed(tp)
        assert self._offsets is not None  # noqa: S101
        ends = await self._offsets.end_offsets([tp])
        return int(ends[tp])

    async def wait_applied(
        self, token: WriteToken, timeout: float = 60.0, poll_s: float = 0.1
    ) -> None:
        """Return once the write behind ``token`` has been processed by every stage it feeds.

        Uses the workers' committed consumer offsets (a stage commits only after its
        outputs are acknowledged), so it holds across any number of workers.
        """
        deadline = time.monotonic() + timeout
        conversations = CONVERSATIONS.name(self.settings)
        items = MEMORY_ITEMS.name(self.settings)
        src = TopicPartition(token.topic, token.partition)
        await self._wait_committed(src, token.offset + 1, deadline, poll_s)
        if token.topic == conversations:
            # Extraction is done; its items went to the same partition number of memory.items
            # (same key, same partition count), so wait for the add stage to pass that end.
            downstream = TopicPartition(items, token.partition)
            await self._wait_committed(downstream, await self._end_offset(downstream), deadline,
                                       poll_s)

    async def _wait_committed(
        self, tp: TopicPartition, target: int, deadline: float, poll_s: float
    ) -> None:
        while True:
            if await self._committed(tp) >= target:
                return
            if time.monotonic() > deadline:
                raise ClientError(f"timed out waiting for workers to process {tp.topic}"
                                  f"[{tp.partition}] up to offset {target}; is a worker running?")
            await asyncio.sleep(poll_s)
