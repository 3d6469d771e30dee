"""A request lane: a low-latency consumer for request/reply topics.

faust runs its Kafka consumer in a thread of its own and hands records to agents
through queues and batch windows; for the pipeline stages that costs nothing worth
counting, but a search is a person waiting, and that hand-off measured ~5–7 ms of
every request's round trip. A lane consumes one topic with aiokafka on the
worker's own event loop and starts each record's handler the moment it arrives,
without waiting for a batch to fill.

Semantics match the agents': a consumer group of its own (so workers share the
partitions and a restarted worker resumes), at-least-once, offsets committed
only once every earlier record of the partition has been handled. A handler
that raises is logged; the lane keeps consuming.

Its replies leave through a producer of its own that sends at once (``linger_ms`` 0): the
worker's producer lingers ``kafka.linger_ms`` so that a stage's outputs share a compressed
batch, and a reply, alone in its batch, waited that long for company that never came (10 ms
of every search's round trip, `bench/tenancy.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from memstream.kafka.compat import cancel_within, mark_latency_sensitive, stop_within
from memstream.kafka.members import worker_client_id
from memstream.streams.runtime.stage import Pause, RawRecord, StageStats
from memstream.topics.registry import TopicSpec, consumer_group
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.lane")

LaneHandler = Callable[[RawRecord], Awaitable[None]]


@dataclass
class _Progress:
    """Per partition: offsets being handled, and the next offset after the last one seen."""

    in_flight: set[int] = field(default_factory=set)
    next_offset: int | None = None
    committed: int | None = None

    def committable(self) -> int | None:
        return min(self.in_flight) if self.in_flight else self.next_offset


class RequestLane:
    """Consume ``spec`` in group ``consumer_group(settings, spec)``; ``handler`` per record,
    at most ``max_in_flight`` at once."""

    def __init__(self, settings: Settings, bootstrap: str, spec: TopicSpec, name: str,
                 handler: LaneHandler, stats: StageStats, max_in_flight: int,
                 after_stop: Callable[[], Awaitable[None]] | None = None,
                 max_request_size: int = 1_048_576) -> None:
        self.settings = settings
        self.after_stop = after_stop
        self.bootstrap = bootstrap
        self.spec = spec
        self.name = name
        self.handler = handler
        self.stats = stats
        self.group_id = consumer_group(settings, spec)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._progress: dict[TopicPartition, _Progress] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self.max_request_size = max_request_size
        # what the handlers send their replies through (``BoundTopics.send(..., via=)``)
        self.producer: AIOKafkaProducer | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._commit_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        k = self.settings.kafka
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", client_id=k.client_id, linger_ms=0,
            compression_type=k.producer_compression, max_request_size=self.max_request_size)
        await producer.start()
        self.producer = producer
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=worker_client_id(f"{k.client_id}-{self.name}"),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(k.session_timeout_s * 1000),
            heartbeat_interval_ms=int(k.heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(k.rebalance_timeout_s * 1000),
        )
        await consumer.start()
        mark_latency_sensitive(consumer)
        consumer.subscribe([self.spec.name(self.settings)], listener=_OnRebalance(self))
        self._consumer = consumer
        self._loop_task = asyncio.create_task(self._consume(), name=f"lane-{self.name}")
        self._commit_task = asyncio.create_task(self._commit_periodically(),
                                                name=f"lane-{self.name}-commit")

    async def stop(self) -> None:
        for task in (self._loop_task, self._commit_task):
            await cancel_within(task, f"{self.name} lane")
        self._loop_task = self._commit_task = None
        if self._tasks:  # let requests under way finish (their clients are waiting)
            await asyncio.wait(self._tasks, timeout=5.0)
        for task in list(self._tasks):
            task.cancel()
        if self.after_stop is not None:
            try:
                await self.after_stop()
            except Exception:  # noqa: BLE001 - the lane still stops
                log.exception("%s: stopping failed", self.name)
        if self._consumer is not None:
            await self.commit()
            await self._consumer.stop()
            self._consumer = None
        if self.producer is not None:  # after the handlers: their replies are sent
            await stop_within(self.producer, f"{self.name} lane's producer")
            self.producer = None

    async def _consume(self) -> None:
        assert self._consumer is not None  # noqa: S101
        consumer = self._consumer
        pause = Pause(self.name, 0.5)
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:  # broker down or restarting: back off, keep trying
                await pause.wait(exc)
                continue
            pause.resumed()
            for tp, messages in batch.items():
                progress = self._progress.setdefault(tp, _Progress())
                for msg in messages:
                    await self._slots.acquire()
                    progress.in_flight.add(msg.offset)
                    progress.next_offset = msg.offset + 1
                    raw = RawRecord(topic=msg.topic, partition=msg.partition, offset=msg.offset,
                                    key=msg.key, value=msg.value, headers=tuple(msg.headers),
                                    timestamp_ms=msg.timestamp)
                    task = asyncio.create_task(self._serve(tp, raw))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _serve(self, tp: TopicPartition, raw: RawRecord) -> None:
        started = time.perf_counter()
        try:
            await self.handler(raw)
            self.stats.processed += 1
            if self.stats.latency is not None:
                self.stats.latency.observe(time.perf_counter() - started)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one bad record never stops the lane
            log.exception("%s: record %s[%d]@%d failed", self.name, raw.topic, raw.partition,
                          raw.offset)
        finally:
            self._slots.release()
            progress = self._progress.get(tp)
            if progress is not None:
                progress.in_flight.discard(raw.offset)

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.worker.commit_interval_s)
            await self.commit()

    async def commit(self, partitions: set[TopicPartition] | None = None) -> None:
        """Commit, per partition, the offset before which every record has been handled."""
        if self._consumer is None:
            return
        offsets = {}
        for tp, progress in self._progress.items():
            if partitions is not None and tp not in partitions:
                continue
            offset = progress.committable()
            if offset is not None and offset != progress.committed:
                offsets[tp] = OffsetAndMetadata(offset, "")
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:  # e.g. mid-rebalance: the next round commits again
            log.info("%s: commit deferred: %s", self.name, exc)
            return
        for tp, meta in offsets.items():
            self._progress[tp].committed = meta.offset

    def forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._progress.pop(tp, None)


class _OnRebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, lane: RequestLane) -> None:
        self.lane = lane

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.lane.commit(set(revoked))
        self.lane.forget(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None
