"""The faust app factory: binds the topic registry to faust topics and registers stages.

Topics carry raw bytes; stages decode them with the registry's pydantic models so
a bad payload becomes a dead letter instead of a crashed agent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import faust

from memstream.kafka.members import worker_client_id
from memstream.streams.ops.access import check_records
from memstream.streams.runtime.batches import (
    BatchHandler,
    BoundTopics,
    Runner,
    WorkerApp,
    handle_batch,
    raw_of,
)
from memstream.streams.runtime.group_commits import (
    commit_only_in_a_settled_group,
    commits_need_every_offset,
    refused_commits_are_retried,
)
from memstream.streams.runtime.read_offsets import guard_read_offsets
from memstream.streams.runtime.stage import (
    Deps,
    Outgoing,
    Record,
    StageStats,
    make_batch_handler,
)
from memstream.streams.runtime.turns import Held, TurnQueue, hold, serve
from memstream.topics.registry import ALL_TOPICS, TopicSpec
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.app")

FAUST_STALL_CHECK_OFF_S = 10 * 365 * 24 * 3600.0  # longer than any worker runs


def _no_faust_livelock_check() -> None:
    """faust's livelock detector wakes every 2.5 commit intervals and visits each assigned
    partition with a yield to the event loop in between, so a loop kept busy (the embedder's
    batches, a cube's load) made one visit of a hundred partitions outlast its interval, and
    mode logged "Timer livelock is overlapping" at WARNING every few seconds on a worker that
    was making progress. Every report it could make is off (its timeouts are set beyond any
    run; ``streams.runtime.stalls`` reports stalls), and the one it still made, an assertion
    on a partition with no position right after a rejoin, crashed faust's consumer service:
    the check does nothing here."""
    from faust.transport.consumer import Consumer

    if getattr(Consumer.verify_all_partitions_active, "_memstream_off", False):
        return

    async def verify_all_partitions_active(self: Consumer) -> None:
        return None

    verify_all_partitions_active._memstream_off = True  # type: ignore[attr-defined]
    Consumer.verify_all_partitions_active = verify_all_partitions_active  # type: ignore[method-assign]


def create_app(settings: Settings, bootstrap: str) -> tuple[faust.App, BoundTopics]:
    """A faust app for one worker, with every registry topic bound (never auto-created)."""
    _no_faust_livelock_check()
    commit_only_in_a_settled_group()
    refused_commits_are_retried()
    commits_need_every_offset()
    guard_read_offsets()
    k = settings.kafka
    app = WorkerApp(
        settings.app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        # faust's own directory (table state, unused with memory:// tables) stays under the
        # data directory instead of appearing as "<app_id>-data" in the working directory
        datadir=str(settings.data_dir / "faust"),
        autodiscover=False,
        web_enabled=False,
        topic_disable_leader=True,
        topic_allow_declare=False,
        topic_partitions=k.partitions,
        topic_replication_factor=k.replication_factor,
        stream_wait_empty=False,
        broker_client_id=worker_client_id(k.client_id),  # lets a restart drop it if it dies
        broker_session_timeout=k.session_timeout_s,
        broker_heartbeat_interval=k.heartbeat_interval_s,
        broker_rebalance_timeout=k.rebalance_timeout_s,
        broker_commit_interval=settings.worker.commit_interval_s,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_compression_type=k.producer_compression,
        producer_linger=k.linger_ms / 1000,
        loghandlers=[],
        # faust's stall detector reports a slow partition that still moves as stopped
        # ("Stream stopped processing, or is slow"); memstream's check replaces it
        # (streams.runtime.stalls), so faust's never fires
        stream_processing_timeout=FAUST_STALL_CHECK_OFF_S,
        broker_commit_livelock_soft_timeout=FAUST_STALL_CHECK_OFF_S,
    )
    bound = BoundTopics(app=app, settings=settings, bootstrap=bootstrap)
    for spec in ALL_TOPICS:
        bound.topics[spec.suffix] = app.topic(
            spec.name(settings),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=spec.partition_count(settings),
            internal=False,
        )
    return app, bound


def register_batch_agent(
    bound: BoundTopics,
    spec: TopicSpec | Sequence[TopicSpec],
    name: str,
    handler: BatchHandler,
    stats: StageStats,
    batch_size: int,
    within_s: float,
) -> None:
    """Register a thin agent that holds what it is delivered (``streams.turns``) and a runner
    that hands it to ``handler`` a batch per partition in turn, sends the outputs, then acks.

    ``handler`` owns decoding, retries and dead letters; anything that still escapes
    is logged and the batch is dead-lettered (``handle_batch``): the agent never dies.
    """
    specs = [spec] if isinstance(spec, TopicSpec) else list(spec)
    channel = bound[specs[0]] if len(specs) == 1 else bound.app.topic(
        *[s.name(bound.settings) for s in specs],
        key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
    )
    bound.stalls.watch(name, [s.name(bound.settings) for s in specs], stats)  # in turn
    queue = TurnQueue(bound.settings.worker.intake_queue)
    partitions = bound.settings.worker.partitions_at_once

    async def one(batch: list[Held]) -> None:
        stats.in_flight += 1
        try:
            await handle_batch(bound, name, handler, [h.raw for h in batch])
        finally:
            stats.in_flight -= 1
        for held in batch:
            held.ack()
        stats.processed += len(batch)

    async def run() -> None:
        await serve(queue, batch_size, partitions, one)

    runner = Runner(name, run)

    async def agent(stream: faust.StreamT[Any]) -> AsyncIterator[int]:
        runner.ensure(bound.app)
        async for events in stream.take_events(batch_size, within=within_s):  # type: ignore[attr-defined]
            await queue.put(0, hold(bound.app, events, raw_of))
            yield len(events)

    bound.app.agent(channel, name=name)(agent)



StageLogic = Callable[[Sequence[Record[Any]], Deps], Awaitable[list[Outgoing]]]


def register_stage(
    bound: BoundTopics, deps: Deps, spec: TopicSpec, stage: str, name: str, logic: StageLogic
) -> StageStats:
    """Wire a stage's pure logic to its input topic with batching, retries and dead letters."""
    stats = StageStats()

    async def run(records: Sequence[Record[Any]]) -> list[Outgoing]:
        await check_records(deps, records)  # the user may write (or read) the cube
        return await logic(records, deps)

    handler = make_batch_handler(stage, spec, run, deps.settings.worker, deps.clock, stats,
                                 deps.settings.limits, deps.verifier)  # signatures first
    w = deps.settings.worker
    register_batch_agent(bound, spec, name, handler, stats, w.batch_size, w.batch_within_s)
    return stats
