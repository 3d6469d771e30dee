"""Scheduler agents: the dispatcher, the working-memory sink, the activation-memory timer.

The dispatcher takes batches from ``schedule.query`` / ``.answer`` / ``.add``, groups
them by (user, cube), runs the groups concurrently and each group's messages in order
(one topic's log order; topics merged by time), and keeps per-cube state in a faust
Table. The Table is written only here, by the agent that owns the cube's partition,
to that same changelog partition.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import faust

from memstream.kafka.admin import TopicPlan, ensure_plans
from memstream.streams import metering
from memstream.streams.app import register_batch_agent
from memstream.streams.core.working_memory import SINK_STAGE, apply_replacements
from memstream.streams.ops.access import check_write
from memstream.streams.runtime.batches import BatchHandler, BoundTopics
from memstream.streams.runtime.stage import (
    Deps,
    Outgoing,
    RawRecord,
    Record,
    StageStats,
    dead_letter,
    decode_batch,
    make_batch_handler,
    with_retries,
)
from memstream.streams.runtime.tracing import stage_span, stamp
from memstream.streams.scheduler.activation import activation_event, due_for_render
from memstream.streams.scheduler.logic import STAGE, QueryTrace, Step, handle, route
from memstream.streams.scheduler.planning import QueryVectors
from memstream.streams.scheduler.state import CubeState, state_key
from memstream.topics.events import ScheduleMessage
from memstream.topics.registry import SCHEDULE_ADD, SCHEDULE_ANSWER, SCHEDULE_QUERY, WORKING_MEMORY

log = logging.getLogger("memstream.scheduler")
TABLE = "scheduler-cubes"
TRACES_KEPT = 10_000
LATENCY_WINDOW_S = 0.01


@dataclass
class SchedulerStats(StageStats):
    """Stage counters plus the latest query traces (the benchmark reads them)."""

    traces: deque[QueryTrace] = field(default_factory=lambda: deque(maxlen=TRACES_KEPT))


def in_order(records: Sequence[Record[ScheduleMessage]]) -> list[Record[ScheduleMessage]]:
    """Each topic's records in log order, the topics interleaved by message time."""
    by_topic: dict[str, list[Record[ScheduleMessage]]] = {}
    for record in records:
        by_topic.setdefault(record.raw.topic, []).append(record)
    return list(heapq.merge(*by_topic.values(), key=lambda r: r.value.occurred_at))


def by_user_cube(records: Sequence[Record[Any]]) -> dict[tuple[str, str], list[Record[Any]]]:
    groups: dict[tuple[str, str], list[Record[Any]]] = {}
    for record in records:
        groups.setdefault((record.value.user_id, record.value.cube_id), []).append(record)
    return groups


class CubeStates:
    """The faust Table of ``CubeState`` (JSON values), written to an explicit partition.

    faust picks a changelog partition from the stream's current event, which in a batch
    is the batch's last event, not necessarily the cube's: writes here name the cube's
    partition instead (the schedule topics and the changelog are co-partitioned).
    """

    def __init__(self, table: Any) -> None:
        self.table = table

    def get(self, key: bytes) -> CubeState | None:
        return CubeState.load(self.table.data.get(key))

    def put(self, key: bytes, state: CubeState) -> None:
        value = state.dump()
        self.table.data[key] = value
        self.table.send_changelog(state.partition, key, value)

    def all(self) -> list[CubeState]:
        return [s for v in list(self.table.data.values()) if (s := CubeState.load(v))]


def register(bound: BoundTopics, deps: Deps) -> dict[str, StageStats]:
    settings = deps.settings
    partitions = SCHEDULE_QUERY.partition_count(settings)
    table = bound.app.Table(TABLE, key_type=bytes, partitions=partitions,
                            help="scheduler state per (user, cube)")
    changelog = TopicPlan(table.changelog_topic.get_topic_name(), partitions,
                          settings.kafka.replication_factor, {"cleanup.policy": "compact"})

    bootstrap = ",".join(f"{url.host}:{url.port}" for url in bound.app.conf.broker)

    async def create_changelog() -> None:
        await ensure_plans(bootstrap, [changelog], client_id=f"{settings.kafka.client_id}-admin")

    bound.before_start(create_changelog)
    states = CubeStates(table)
    stats = SchedulerStats()
    handler = make_dispatcher(deps, states, stats)
    # A short batch window, like the search stage's: a lone query should not wait for company
    # (under load batches still fill while the previous one is handled).
    w = settings.worker
    register_batch_agent(bound, [SCHEDULE_QUERY, SCHEDULE_ANSWER, SCHEDULE_ADD], STAGE, handler,
                         stats, w.batch_size, min(w.batch_within_s, LATENCY_WINDOW_S))
    sink = StageStats()

    async def apply(records: Sequence[Record[Any]]) -> list[Outgoing]:
        return await apply_replacements(records, deps)

    register_batch_agent(bound, WORKING_MEMORY, "working-memory-sink", make_batch_handler(
        SINK_STAGE, WORKING_MEMORY, apply, w, deps.clock, sink, deps.settings.limits), sink,
        w.batch_size, min(w.batch_within_s, LATENCY_WINDOW_S))
    register_activation_timer(bound, deps, states)
    return {STAGE: stats, SINK_STAGE: sink}


def make_dispatcher(deps: Deps, states: CubeStates, stats: SchedulerStats) -> BatchHandler:
    retries, backoff = deps.settings.worker.stage_retries, deps.settings.worker.retry_backoff_s
    query_vectors = QueryVectors(deps.embedder)

    async def run_one(record: Record[ScheduleMessage]) -> list[Outgoing]:
        with stage_span(STAGE, [record]):  # what it sends carries its trace context
            return stamp(await run_traced(record))

    async def run_traced(record: Record[ScheduleMessage]) -> list[Outgoing]:
        msg = record.value
        key = state_key(msg.user_id, msg.cube_id)
        done: list[Step] = []
        metering.enter(STAGE, msg.cube_id)  # the model's tokens are the cube's

        async def attempt() -> list[Outgoing]:
            await check_write(deps, msg.user_id, msg.cube_id)  # it refreshes working memory
            label = route(msg.label, record.raw.topic, deps.settings)
            state = states.get(key) or CubeState.new(msg, record.raw.partition, deps.clock())
            done[:] = [await handle(label, msg, state, deps, query_vectors)]
            return done[0].outgoing

        out, error, attempts = await with_retries(STAGE, attempt, retries, backoff, stats)
        if error is not None:
            log.error("%s: dead-lettering %s message %s: %s", STAGE, msg.label, msg.event_id,
                      error)
            stats.dead_lettered += 1
            stats.by_error[type(error).__name__] += 1
            return [dead_letter(STAGE, record.raw, error, attempts, deps.clock, msg)]
        step = done[0]
        # the cube's partition now: the changelog partition its current owner recovers
        states.put(key, step.state.model_copy(update={"partition": record.raw.partition}))
        if step.trace is not None:
            stats.traces.append(step.trace)
        return out

    async def run_group(records: list[Record[ScheduleMessage]]) -> list[Outgoing]:
        out: list[Outgoing] = []
        for record in in_order(records):
            out.extend(await run_one(record))
        return out

    async def dispatch(raws: Sequence[RawRecord]) -> list[Outgoing]:
        # the three schedule topics carry the same model: one spec decodes them all
        good, dead = decode_batch(STAGE, SCHEDULE_QUERY, raws, deps.clock,
                                  deps.settings.limits, deps.verifier)
        stats.dead_lettered += len(dead)
        results = await asyncio.gather(*(run_group(g) for g in by_user_cube(good).values()))
        return dead + [o for result in results for o in result]

    return dispatch


def register_activation_timer(bound: BoundTopics, deps: Deps, states: CubeStates) -> None:
    """Every ``activation_interval_s``: render the active cubes of this worker's partitions."""
    app: faust.App = bound.app
    query_topic = SCHEDULE_QUERY.name(deps.settings)
    rendered: dict[bytes, datetime] = {}
    started = deps.clock()

    async def render_activation_memory() -> None:
        if app.rebalancing or app.in_recovery:
            return
        mine = {tp.partition for tp in app.consumer.assignment() if tp.topic == query_topic}
        active = [s for s in states.all() if s.partition in mine]
        for state in due_for_render(active, rendered, started):
            try:
                event = await activation_event(deps, state)
                if event is not None:
                    await bound.send([event])
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a failed render is retried at the next tick
                log.exception("activation memory of cube %s failed", state.cube_id)
                continue
            rendered[state.key] = state.last_activity_at

    app.timer(deps.settings.scheduler.activation_interval_s,
              name=f"{TABLE}-activation")(render_activation_memory)
