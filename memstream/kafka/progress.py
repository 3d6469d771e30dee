"""Read-your-writes: has the pipeline applied a write yet?

A stage commits an input offset only after the outputs of its batch are
acknowledged, so the workers' committed offsets tell, across any number of
workers, whether a write (a ``WriteToken``) has gone through every stage it feeds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from memstream.kafka.compat import start_or_release, stop_within
from memstream.topics.events import WriteToken
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS
from memstream.topics.settings import Settings

T = TypeVar("T")

# The least time one question to the broker is given, even when the caller's deadline is
# nearer (``is_applied`` asks once with no time to wait).
BROKER_ANSWER_S = 2.0


class NotAppliedYet(TimeoutError):
    """The workers did not process a write within the time allowed (or the broker did not
    answer in that time)."""


class WriteLost(NotAppliedYet):
    """The write's offset lies past the end of its partition: the broker lost it (the
    embedded broker loses its last unsaved second when killed). Waiting cannot help."""


# How often a waiting caller asks whether its write still exists (one ListOffsets request).
LOST_CHECK_S = 0.5


class Progress:
    """Committed offsets of the workers' consumer group, read without joining it."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def _client(self) -> AIOKafkaConsumer:
        async with self._lock:
            if self._consumer is None:
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self.bootstrap, group_id=self.settings.app_id,
                    enable_auto_commit=False,
                )
                try:
                    await start_or_release(consumer, "progress consumer")
                except KafkaError as exc:
                    raise NotAppliedYet(f"the broker at {self.bootstrap} could not be "
                                        f"reached ({exc}); is it running?") from exc
                self._consumer = consumer
            return self._consumer

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            # bounded: leaving the broker must not hang a caller whose broker is gone
            await stop_within(consumer, "progress consumer")

    async def committed(self, tp: TopicPartition, deadline: float | None = None) -> int:
        """The group's committed offset of ``tp`` (0 when none). Without a ``deadline``
        (``time.monotonic()``) this waits as long as the broker is unreachable: aiokafka
        retries finding the group's coordinator forever."""
        committed = await self._answer(tp, deadline, lambda c: c.committed(tp))
        return committed if committed is not None else 0

    async def end_offset(self, tp: TopicPartition, deadline: float | None = None) -> int:
        ends = await self._answer(tp, deadline, lambda c: c.end_offsets([tp]))
        return int(ends[tp])

    async def _answer(self, tp: TopicPartition, deadline: float | None,
                      ask: Callable[[AIOKafkaConsumer], Awaitable[T]]) -> T:
        if deadline is None:
            return await ask(await self._client())
        allowed = max(deadline - time.monotonic(), BROKER_ANSWER_S)
        try:
            async with asyncio.timeout(allowed):
                return await ask(await self._client())
        except TimeoutError:
            raise NotAppliedYet(
                f"the broker at {self.bootstrap} did not answer within {allowed:.0f}s about "
                f"{tp.topic}[{tp.partition}]; is it running?") from None

    async def is_applied(self, token: WriteToken) -> bool:
        """One check, no waiting."""
        try:
            await self.wait_applied(token, timeout=0.0)
        except NotAppliedYet:
            return False
        return True

    async def wait_applied(
        self, token: WriteToken, timeout: float = 60.0, poll_s: float = 0.05
    ) -> None:
        """Return once the write behind ``token`` went through every stage it feeds."""
        deadline = time.monotonic() + timeout
        src = TopicPartition(token.topic, token.partition)
        await self._wait(src, token.offset + 1, deadline, poll_s, written=token.offset)
        if token.topic == CONVERSATIONS.name(self.settings):
            # Extraction is done and its items are in memory.items: same key, same partition
            # count, so the same partition number. Wait for the add stage to pass its end.
            items = TopicPartition(MEMORY_ITEMS.name(self.settings), token.partition)
            await self._wait(items, await self.end_offset(items, deadline), deadline, poll_s)

    async def _wait(self, tp: TopicPartition, target: int, deadline: float, poll_s: float,
                    written: int | None = None) -> None:
        """Until the group committed ``target`` on ``tp``; ``written``: the offset of the
        caller's own write, which must still be in the log (else ``WriteLost`` at once)."""
        next_check = 0.0
        while (done := await self.committed(tp, deadline)) < target:
            if written is not None and time.monotonic() >= next_check:
                end = await self.end_offset(tp, deadline)
                if end <= written:
                    raise WriteLost(
                        f"the broker lost this write: {tp.topic}[{tp.partition}] ends at "
                        f"offset {end}, the write was at offset {written} (the broker was "
                        "restarted without it; publish it again)")
                next_check = time.monotonic() + LOST_CHECK_S
            if time.monotonic() >= deadline:
                raise NotAppliedYet(
                    f"workers have not processed {tp.topic}[{tp.partition}] up to offset "
                    f"{target} yet (they are at {done}); is a worker running?")
            await asyncio.sleep(poll_s)
