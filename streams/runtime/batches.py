"""A stage's batches at run time: the registry's topics bound to one app, a batch handled
and its outputs sent until the broker has them, and the task that runs a stage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from faust.types import EventT

from memstream.kafka.compat import cancel_within
from memstream.kafka.headers import headers_for
from memstream.security.signing import Signer
from memstream.streams.runtime.coalesce import coalesce_links
from memstream.streams.runtime.lane import LaneHandler, RequestLane
from memstream.streams.runtime.stage import (
    Outgoing,
    Pause,
    RawRecord,
    StageStats,
    dead_letter,
    is_outage,
)
from memstream.streams.runtime.stalls import StallWatch
from memstream.topics.models import utcnow
from memstream.topics.registry import TopicSpec
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.app")


BatchHandler = Callable[[Sequence[RawRecord]], Awaitable[list[Outgoing]]]

StartHook = Callable[[], Awaitable[None]]


class WorkerApp(faust.App):
    """A faust app that runs start hooks before any of its services (consumer, tables) start.

    ``topic_allow_declare`` is off, so faust never creates the topics it owns (table
    changelogs); a stage that declares a table registers a hook creating its changelog
    with the admin client, and every topic exists before the consumer subscribes (an
    auto-created topic stalls a fresh start).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_hooks: list[StartHook] = []
        self.lanes: list[RequestLane] = []
        self.runners: list[Runner] = []  # stages' runners (``register_batch_agent``)

    async def on_first_start(self) -> None:
        await super().on_first_start()
        for hook in self.start_hooks:
            await hook()

    async def on_started(self) -> None:
        await super().on_started()
        for lane in self.lanes:
            await lane.start()

    async def on_stop(self) -> None:
        for runner in self.runners:  # what they hold unhandled is redelivered
            await runner.stop()
        for lane in self.lanes:  # before the producer their replies go through is flushed
            await lane.stop()
        await super().on_stop()



@dataclass
class BoundTopics:
    """The registry's topics as faust topics of one app, plus a sender for ``Outgoing``."""

    app: faust.App
    settings: Settings
    bootstrap: str
    topics: dict[str, faust.TopicT] = field(default_factory=dict)
    extra: dict[str, faust.TopicT] = field(default_factory=dict)
    services: dict[str, Any] = field(default_factory=dict)  # stage objects (e.g. the optimizer)

    def __getitem__(self, spec: TopicSpec) -> faust.TopicT:
        return self.topics[spec.suffix]

    @cached_property
    def signer(self) -> Signer | None:
        """Signs what this worker publishes, when it has an application key."""
        return Signer.of(self.settings.security)

    @cached_property
    def stalls(self) -> StallWatch:
        """The check of this worker's stages for stalled partitions (``runtime.stalls``)."""
        return StallWatch(self.settings.worker.stall_after_s, self.app)

    def before_start(self, hook: StartHook) -> None:
        """Run ``hook`` when the app starts, before its consumer and tables."""
        if not isinstance(self.app, WorkerApp):
            raise TypeError("start hooks need an app made by create_app")
        self.app.start_hooks.append(hook)

    def add_lane(self, spec: TopicSpec, name: str, handler: LaneHandler, stats: StageStats,
                 max_in_flight: int,
                 after_stop: Callable[[], Awaitable[None]] | None = None) -> RequestLane:
        """Serve ``spec`` through a request lane started and stopped with the app
        (``after_stop``: run once its requests under way have ended)."""
        if not isinstance(self.app, WorkerApp):
            raise TypeError("request lanes need an app made by create_app")
        lane = RequestLane(self.settings, self.bootstrap, spec, name, handler, stats,
                           max_in_flight, after_stop,
                           max_request_size=self.app.conf.producer_max_request_size)
        self.app.lanes.append(lane)
        return lane

    def named(self, name: str) -> faust.TopicT:
        """A topic by full name (reply topics chosen by clients), cached."""
        if name not in self.extra:
            self.extra[name] = self.app.topic(name, key_type=bytes, value_type=bytes,
                                              key_serializer="raw", value_serializer="raw")
        return self.extra[name]

    async def send(self, outgoing: Sequence[Outgoing], via: AIOKafkaProducer | None = None
                   ) -> None:
        """Publish and wait for the broker's ack: offsets are committed only once outputs exist.
        ``via``: a producer of the caller's own (a request lane's, which does not linger)
        instead of the app's."""
        futures = []
        for out in coalesce_links(outgoing):  # an event's edges in one announcement
            key = out.key if out.key is not None else out.event.kafka_key
            value = out.value if out.value is not None else out.spec.encode(out.event)
            headers = headers_for(out.event, value, self.signer, out.headers or None)
            if via is not None:
                name = out.spec.name(self.settings) if out.topic is None else out.topic
                futures.append(await via.send(name, value, key=key, partition=out.partition,
                                              headers=headers))
                continue
            topic = self[out.spec] if out.topic is None else self.named(out.topic)
            fut = await topic.send(key=key, value=value, partition=out.partition,
                                   headers=headers)
            futures.append(fut)
        if futures:
            await asyncio.gather(*futures)


def raw_of(event: EventT[Any]) -> RawRecord:
    msg = event.message
    value = event.value if isinstance(event.value, bytes | bytearray) or event.value is None \
        else msg.value
    headers = msg.headers.items() if isinstance(msg.headers, Mapping) else msg.headers or ()
    return RawRecord(
        topic=msg.topic, partition=msg.partition, offset=msg.offset,
        key=msg.key if isinstance(msg.key, bytes) or msg.key is None else str(msg.key).encode(),
        value=bytes(value) if value is not None else None,
        headers=tuple((k, bytes(v)) for k, v in headers),
        timestamp_ms=None if msg.timestamp is None else round(msg.timestamp * 1000),
    )



async def handle_batch(bound: BoundTopics, name: str, handler: BatchHandler,
                       raws: Sequence[RawRecord]) -> None:
    """Run ``handler`` on a batch and send its outputs (then their ``then`` actions): after
    this the batch's records may be committed. A failure that escapes the handler
    dead-letters the batch."""
    backoff = bound.settings.worker.retry_backoff_s
    try:
        outgoing = await handler(raws)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - last line of defence: dead-letter
        log.exception("%s: batch of %d failed outside the handler", name, len(raws))
        outgoing = [dead_letter(name, raw, exc, 1, utcnow) for raw in raws]
    await send_until_sent(bound, name, outgoing, backoff)
    await after_sent(name, outgoing, backoff)


class Runner:
    """A stage's runner task: started with its agent, stopped with the app (records it holds
    unhandled are not acked, so they are redelivered)."""

    def __init__(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        self.name, self._run = name, run
        self.task: asyncio.Task[None] | None = None

    def ensure(self, app: faust.App) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._guarded(), name=f"memstream-{self.name}")
            runners = getattr(app, "runners", None)
            if runners is not None and self not in runners:
                runners.append(self)

    async def _guarded(self) -> None:
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a runner must not die; its records wait
                log.exception("%s: runner failed; starting it again", self.name)
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        await cancel_within(self.task, f"{self.name} runner")


async def after_sent(name: str, outgoing: Sequence[Outgoing], backoff_s: float) -> None:
    """The outputs' ``then`` actions, in order, once all of them are sent. While a store is
    unreachable this pauses; an action that fails otherwise is logged and left to the input
    that next needs it (an eviction is recomputed, and announced again, by the next add)."""
    for out in outgoing:
        if out.then is None:
            continue
        pause = Pause(name, backoff_s)
        while True:
            try:
                await out.then()
                pause.resumed()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - outage: wait; otherwise: log, go on
                if is_outage(exc):
                    await pause.wait(exc)
                    continue
                log.exception("%s: the action after %s failed", name, out.event.event_id)
                break


async def send_until_sent(bound: BoundTopics, name: str, outgoing: Sequence[Outgoing],
                          backoff_s: float) -> None:
    """Send a batch's outputs before its offsets may be committed. While the broker is
    unreachable this pauses and resends (consumers dedupe by event id); an output the
    broker refuses for good is logged with its event id and skipped."""
    pause = Pause(name, backoff_s)
    while True:
        try:
            await bound.send(outgoing)
            pause.resumed()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - decide below: outage or refusal
            if is_outage(exc) or (isinstance(exc, KafkaError) and exc.retriable):
                await pause.wait(exc)
                continue
            if len(outgoing) > 1:  # find the refused output; send the others
                for one in outgoing:
                    await send_until_sent(bound, name, [one], backoff_s)
                return
            log.error("%s: the broker refused %s %s: %s", name, type(outgoing[0].event).__name__,
                      getattr(outgoing[0].event, "event_id", "?"), exc)
            return
