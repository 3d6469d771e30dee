"""Lifecycle timer: every ``lifecycle.interval_s``, one ``LifecycleSweep`` per cube on
``memory.commands``, where the command stage applies it in the cube's order.

Sweeps go through the log so that they are ordered with the cube's other commands (a
freeze published before a sweep is seen by it), replayed with them, and decided from their
own event time. One worker publishes them: the owner of partition 0 of ``memory.commands``.
A sweep's time is the tick rounded down to the interval and its id comes from (cube, that
time), so two workers ticking in the same interval publish the same event, which changes
nothing the second time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import faust

from memstream.kafka.headers import headers_for
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import LifecycleSweep, WriteToken
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import MEMORY_COMMANDS

log = logging.getLogger("memstream.lifecycle")

Tick = Callable[[], Awaitable[list[WriteToken]]]


def sweep_time(now: datetime, interval_s: float) -> datetime:
    """``now`` rounded down to the interval (UTC epoch based)."""
    seconds = now.timestamp()
    return datetime.fromtimestamp(seconds - seconds % interval_s, UTC)


def sweep_events(cubes: list[str], now: datetime, interval_s: float) -> list[LifecycleSweep]:
    at = sweep_time(now, interval_s)
    return [LifecycleSweep(event_id=derived_event_id("lifecycle", cube, at.isoformat()),
                           user_id=cube, cube_id=cube, occurred_at=at) for cube in sorted(cubes)]


def make_tick(bound: BoundTopics, deps: Deps, leader_only: bool = True) -> Tick:
    """The timer's body, also callable by tests (with the worker's injected clock)."""
    app: faust.App = bound.app
    topic = MEMORY_COMMANDS.name(deps.settings)

    async def tick() -> list[WriteToken]:
        if leader_only:
            if app.rebalancing or app.in_recovery:
                return []
            if not any(tp.topic == topic and tp.partition == 0
                       for tp in app.consumer.assignment()):
                return []
        cubes = await deps.query.list_cubes()
        tokens = []
        for event in sweep_events(cubes, deps.clock(), deps.settings.lifecycle.interval_s):
            value = MEMORY_COMMANDS.encode(event)
            fut = await bound[MEMORY_COMMANDS].send(
                key=event.kafka_key, value=value,
                headers=headers_for(event, value, bound.signer))  # signed as the worker
            meta = await fut
            tokens.append(WriteToken(topic=meta.topic, partition=meta.partition,
                                     offset=meta.offset))
        return tokens

    return tick


def register(bound: BoundTopics, deps: Deps) -> Tick:
    """Start the sweep timer with the app; returns the tick (``bound.services``)."""
    tick = make_tick(bound, deps)

    async def timer() -> None:
        try:
            await tick()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a failed tick is retried at the next one
            log.exception("lifecycle sweep tick failed")

    bound.app.timer(deps.settings.lifecycle.interval_s, name="memstream-lifecycle")(timer)
    return tick
