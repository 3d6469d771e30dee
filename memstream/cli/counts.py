"""What one ``add`` added, counted from the add stage's own announcements.

A cube's totals also grow by what the optimizer derives (concepts, topics, inferences), so
"before − after" told a user that one sentence made "4 new memories". Instead ``add`` marks
the end of ``memory.updates`` before publishing and, once its input is applied, reads only
what came after (cost: this add's announcements, not the log) and counts the add stage's:
memories extracted and kept, merged into an existing one, flagged as conflicting, episodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.client.client import ClientError, MemoryClient
from memstream.kafka.compat import start_or_release, stop_within
from memstream.topics.events import MemoryUpdate
from memstream.topics.registry import MEMORY_UPDATES

ADD_STAGE = "memory.add"
READ_S = 60.0  # one add's announcements: seconds to read even for a large file
Marks = dict[int, int]


@dataclass
class Added:
    """The add stage's outcome for one input (each announcement counted once, by id)."""

    memories: int = 0  # extracted and stored as new memories
    merged: int = 0  # extracted, then merged with a memory the cube already had
    conflicts: int = 0  # CONFLICT edges to an older memory (rules mode: both kept)
    episodes: int = 0
    seen: set[str] = field(default_factory=set)

    def count(self, update: MemoryUpdate) -> None:
        if update.stage != ADD_STAGE or update.event_id in self.seen:
            return
        self.seen.add(update.event_id)
        match update.action:
            case "added" if (update.node.metadata.memory_type if update.node
                             else update.memory_type) == "EpisodicMemory":
                self.episodes += 1
            case "added":
                self.memories += 1
            case "merged":
                self.merged += 1
            case "linked":
                self.conflicts += 1
            case _:
                pass

    def describe(self) -> str:
        """``1 memory, 1 episode`` (merged, conflicting and episodes only when there are)."""
        parts = [_plural(self.memories, "memory", "memories")]
        if self.merged:
            parts.append(f"{self.merged} merged into existing memories")
        if self.conflicts:
            parts.append(_plural(self.conflicts, "possible conflict") + " with earlier memories")
        if self.episodes:
            parts.append(_plural(self.episodes, "episode"))
        return ", ".join(parts)


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


async def _consumer(client: MemoryClient) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=client.bootstrap, enable_auto_commit=False)
    await start_or_release(consumer, "add counter")
    name = MEMORY_UPDATES.name(client.settings)
    parts = consumer.partitions_for_topic(name) or set()
    if not parts:
        await consumer.topics()
        parts = consumer.partitions_for_topic(name) or set()
    return consumer, [TopicPartition(name, p) for p in sorted(parts)]


async def mark(client: MemoryClient) -> Marks:
    """The current end of each ``memory.updates`` partition."""
    consumer, tps = await _consumer(client)
    try:
        ends = await consumer.end_offsets(tps) if tps else {}
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await stop_within(consumer, "add counter")


async def added_since(client: MemoryClient, marks: Marks, cube_id: str) -> Added:
    """The add stage's announcements for ``cube_id`` between ``marks`` and the end now."""
    out = Added()
    consumer, tps = await _consumer(client)
    try:
        ends = await consumer.end_offsets(tps) if tps else {}
        todo = {tp for tp in tps if ends[tp] > marks.get(tp.partition, 0)}
        consumer.assign(tps)
        for tp in todo:
            consumer.seek(tp, marks.get(tp.partition, 0))
        deadline = time.monotonic() + READ_S
        while todo:
            if time.monotonic() > deadline:
                raise ClientError(f"counting what was added: {MEMORY_UPDATES.name(client.settings)}"
                                  f" not read to its end within {READ_S:.0f}s")
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    try:
                        event = MEMORY_UPDATES.decode(record.value or b"")
                    except ValidationError:
                        continue  # not an announcement of this contract: not counted
                    if isinstance(event, MemoryUpdate) and event.cube_id == cube_id:
                        out.count(event)
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
    finally:
        await stop_within(consumer, "add counter")
    return out
