"""Which views readers of a cube read: the ``cube-views`` topic, followed by every worker.

``promote`` (a ``memory.commands`` event) is checked by the command stage and written to
``cube-views`` as one record keyed by the cube id: ``{cube_id, view}``. Every worker reads
that topic from the beginning when it starts and follows it, and resolves each request's
cube to its view before answering (``ViewMap.resolve``). One record flips a cube, so a
reader sees either the old view or the new one, never a mix; ``view == cube_id`` switches
back. Nothing else changes: the old views stay until dropped (``drop_views``), and writes
to the cube keep going to the cube's own log and views.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.kafka.compat import cancel_within
from memstream.topics.events import PromoteCube
from memstream.topics.registry import CUBE_VIEWS
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.replay")


class ViewMap:
    """cube id -> the cube id whose views answer its reads, kept current from the log."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings, self.bootstrap = settings, bootstrap
        self.views: dict[str, str] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._loaded = asyncio.Event()

    def resolve(self, cube_id: str) -> str:
        return self.views.get(cube_id, cube_id)

    def apply(self, event: PromoteCube) -> None:
        if event.view == event.cube_id:
            self.views.pop(event.cube_id, None)
        else:
            self.views[event.cube_id] = event.view

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        self._consumer = consumer
        # not marked latency-sensitive: a promote reaches readers within the background idle
        # pause (25 ms), and this consumer, idle nearly always, does not poll 200 times a second
        name = CUBE_VIEWS.name(self.settings)
        parts = consumer.partitions_for_topic(name) or set()
        if not parts:
            await consumer.topics()
            parts = consumer.partitions_for_topic(name) or set()
        tps = [TopicPartition(name, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                await self._poll(consumer, 200)
        self._task = asyncio.create_task(self._follow(consumer), name="memstream-views")

    async def _poll(self, consumer: AIOKafkaConsumer, timeout_ms: int) -> None:
        batch = await consumer.getmany(timeout_ms=timeout_ms)
        for msgs in batch.values():
            for msg in msgs:
                try:
                    event = CUBE_VIEWS.decode(msg.value or b"")
                except ValidationError as exc:
                    log.warning("cube-views: skipping undecodable record: %s", exc)
                    continue
                if isinstance(event, PromoteCube):
                    self.apply(event)

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                await self._poll(consumer, 1000)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep following; the broker may be back soon
                log.exception("cube-views: read failed; retrying")
                await asyncio.sleep(1)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_within(task, "cube-views reader")
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
