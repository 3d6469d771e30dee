"""Reading the log itself: follow ``memory.updates`` and the dead letters, read a topic's
history up to its end (the archive first), and re-drive a dead letter."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel, ValidationError

from memstream.archive.reading import archived, seek_past_archive
from memstream.client.core import ClientCore
from memstream.client.errors import ClientError
from memstream.kafka.compat import pause_consumer, start_or_release, stop_within
from memstream.kafka.headers import headers_for_payload
from memstream.topics.events import DeadLetter, MemoryUpdate, WriteToken
from memstream.topics.limits import check_encoded
from memstream.topics.registry import BY_SUFFIX, DEAD_LETTER, MEMORY_UPDATES, TopicSpec

log = logging.getLogger("memstream.client")

# How long a history read waits for records it knows are there before it gives up.
HISTORY_STALL_S = 30.0


class LogReads(ClientCore):
    """Reads of the topics themselves, with no worker in between."""

    async def updates(
        self, cube_id: str | None = None, from_beginning: bool = False
    ) -> AsyncGenerator[MemoryUpdate, None]:
        """Follow ``memory.updates`` (optionally one cube), from now or from the beginning."""
        async for event in self._follow(MEMORY_UPDATES, cube_id, from_beginning):
            assert isinstance(event, MemoryUpdate)  # noqa: S101 - the registry's type
            yield event

    async def dead_letters(
        self, from_beginning: bool = True
    ) -> AsyncGenerator[DeadLetter, None]:
        async for event in self._follow(DEAD_LETTER, None, from_beginning):
            assert isinstance(event, DeadLetter)  # noqa: S101
            yield event

    async def history(
        self, topic: TopicSpec | str, cube_id: str | None = None
    ) -> list[BaseModel]:
        """Every record of a topic (optionally one cube) up to its current end, in partition
        order: what the log holds now, e.g. ``history("memory.updates", cube_id="alice")``.
        ``topic`` is a name (``"memory.updates"``, with or without the prefix) or a spec."""
        spec = self.topic_spec(topic) if isinstance(topic, str) else topic
        return [e async for e in self._follow(spec, cube_id, True, until_end=True)]

    def topic_spec(self, name: str) -> TopicSpec:
        """The contract topic called ``name`` (``memory.updates`` or its prefixed name)."""
        prefix = self.settings.kafka.topic_prefix
        suffix = name[len(prefix):] if prefix and name.startswith(prefix) else name
        spec = BY_SUFFIX.get(suffix)
        if spec is None:
            raise ValueError(f"unknown topic {name!r}; topics are "
                             f"{', '.join(sorted(BY_SUFFIX))}")
        return spec

    async def _follow(
        self, spec: TopicSpec, cube_id: str | None, from_beginning: bool, until_end: bool = False
    ) -> AsyncIterator[BaseModel]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            await start_or_release(consumer, "history consumer")
        except KafkaError as exc:
            raise ClientError(f"could not read {spec.name(self.settings)}: the broker at "
                              f"{self.bootstrap} could not be reached ({exc}); is it "
                              "running?") from exc
        # a live subscriber waits on what comes next; a history read is background work
        pause_consumer(consumer, self.settings.kafka, self.bootstrap, latency=not until_end)
        try:
            name = spec.name(self.settings)
            parts = consumer.partitions_for_topic(name) or set()
            if not parts:
                await consumer.topics()  # refreshes metadata
                parts = consumer.partitions_for_topic(name) or set()
            tps = [TopicPartition(name, p) for p in sorted(parts)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps) if until_end else {}
            at: dict[TopicPartition, int] = {}
            if from_beginning:
                for tp in tps:  # the archived records first, then the broker's (one log)
                    for msg in archived(self.settings, tp):
                        event = self._decoded(spec, msg)
                        if event is not None and (
                                cube_id is None or getattr(event, "cube_id", None) == cube_id):
                            yield event
                at = await seek_past_archive(consumer, self.settings, tps)
            else:
                await consumer.seek_to_end(*tps)
            remaining = {tp for tp in tps if ends.get(tp, 1) > at.get(tp, 0)}
            last_records = time.monotonic()
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=1000)
                if batch:
                    last_records = time.monotonic()
                elif until_end and time.monotonic() - last_records > HISTORY_STALL_S:
                    raise ClientError(
                        f"reading {name} up to its end: no records from the broker at "
                        f"{self.bootstrap} for {HISTORY_STALL_S:.0f}s; is it running?")
                for tp, msgs in batch.items():
                    for msg in msgs:
                        if until_end and msg.offset >= ends[tp]:
                            break
                        event = self._decoded(spec, msg)
                        if event is not None and (
                                cube_id is None or getattr(event, "cube_id", None) == cube_id):
                            yield event
                    if until_end and await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        finally:
            await stop_within(consumer, "history consumer")

    def _decoded(self, spec: TopicSpec, msg: Any) -> BaseModel | None:
        try:
            return spec.decode(msg.value or b"")
        except ValidationError as exc:
            log.warning("skipping undecodable %s record at %d: %s",
                        spec.name(self.settings), msg.offset, exc)
            return None

    async def redrive(self, letter: DeadLetter) -> WriteToken:
        """Publish a dead letter's original payload again to its original topic (after the
        cause was fixed); it gets a new offset, and dead-letters again if it fails again."""
        if self._producer is None:
            raise ClientError("client not started: use `async with MemoryClient(...)`")
        import base64

        data = base64.b64decode(letter.payload) if letter.payload_encoding == "base64" \
            else letter.payload.encode("utf-8")
        check_encoded(data, self.settings.limits, "dead letter payload")
        key = letter.original_key.encode("utf-8") if letter.original_key is not None else None
        # signed again by this client's application: re-driving vouches for the event anew
        headers = headers_for_payload(data, self._signer, letter)
        meta = await self._producer.send_and_wait(letter.original_topic, data, key=key,
                                                  headers=headers)
        return WriteToken(topic=meta.topic, partition=meta.partition, offset=meta.offset)

    async def command_failure(self, token: WriteToken) -> str | None:
        """The dead-letter error of the event behind ``token``, if it failed (else None)."""
        for letter in await self.history(DEAD_LETTER):
            assert isinstance(letter, DeadLetter)  # noqa: S101
            if (letter.original_topic, letter.original_partition, letter.original_offset) == (
                    token.topic, token.partition, token.offset):
                return letter.error
        return None
