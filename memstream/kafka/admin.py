"""Create the contract's topics before anything produces or consumes, and read offsets and lag.

Topic auto-creation stalls a fresh start (aiokafka's producer loses metadata
for topics it already knew once another topic is auto-created), so every topic of the
registry is created up front, idempotently, and we wait until each partition has a leader.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, for_code

from memstream.topics.registry import ALL_TOPICS, WORKER_INPUTS, TopicSpec, consumer_group
from memstream.topics.settings import Settings

log = logging.getLogger(__name__)

_TOPIC_EXISTS = 36
_UNKNOWN_TOPIC = 3
_CONFIG_REJECTED = frozenset({40, 44})  # INVALID_CONFIG, POLICY_VIOLATION


class TopicAdminError(RuntimeError):
    """A topic could not be created, found or described."""


class GroupOffsetsUnsupported(TopicAdminError):
    """The broker cannot list every committed offset of a consumer group (tansu)."""


@dataclass(frozen=True)
class TopicPlan:
    """What ``ensure_topics`` creates for one registry entry."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


def topic_configs(spec: TopicSpec) -> dict[str, str]:
    """Broker configs for a spec: retention, compaction, then the spec's own overrides."""
    configs: dict[str, str] = {}
    if spec.retention_ms is not None:
        configs["retention.ms"] = str(spec.retention_ms)
    if spec.compacted:
        configs["cleanup.policy"] = "compact"
    configs.update(spec.config)
    return configs


def topic_plans(settings: Settings, specs: Iterable[TopicSpec] = ALL_TOPICS) -> list[TopicPlan]:
    """Full names, partition counts and configs of ``specs`` under ``settings``."""
    return [
        TopicPlan(
            name=spec.name(settings),
            partitions=spec.partition_count(settings),
            replication_factor=settings.kafka.replication_factor,
            configs=topic_configs(spec),
        )
        for spec in specs
    ]


@asynccontextmanager
async def _admin(bootstrap: str, client_id: str = "memstream-admin") -> AsyncIterator[
    AIOKafkaAdminClient
]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    try:
        await admin.start()
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def _offsets_reader(bootstrap: str) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less consumer: reads log offsets without joining or creating anything."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def _describe_all(admin: AIOKafkaAdminClient) -> dict[str, dict[str, Any]]:
    """Metadata of every topic. Naming topics would auto-create them on some brokers."""
    topics = await admin.describe_topics()
    return {t["topic"]: t for t in topics if t["error_code"] == 0}


def _error(code: int, message: str | None) -> str:
    return f"{for_code(code).__name__} ({code}){': ' + message if message else ''}"


async def _create(admin: AIOKafkaAdminClient, plans: Sequence[TopicPlan], timeout_s: float) -> None:
    """Create ``plans``; a topic whose configs the broker rejects is created without them."""
    by_name = {p.name: p for p in plans}
    new = [NewTopic(p.name, p.partitions, p.replication_factor, topic_configs=p.configs or None)
           for p in plans]
    response = await admin.create_topics(new, timeout_ms=int(timeout_s * 1000))
    retry: list[TopicPlan] = []
    for name, code, message in response.topic_errors:
        if code in (0, _TOPIC_EXISTS):
            continue  # created, or created concurrently by another process: both fine
        plan = by_name[name]
        if code in _CONFIG_REJECTED and plan.configs:
            log.warning("broker rejected configs %s of topic %s (%s); creating it without them",
                        plan.configs, name, _error(code, message))
            retry.append(TopicPlan(name, plan.partitions, plan.replication_factor))
            continue
        raise TopicAdminError(f"cannot create topic {name}: {_error(code, message)}")
    if retry:
        await _create(admin, retry, timeout_s)


async def ensure_topics(
    settings: Settings,
    bootstrap: str,
    *,
    specs: Iterable[TopicSpec] = ALL_TOPICS,
    timeout_s: float = 30.0,
) -> dict[str, int]:
    """Create every missing registry topic and wait until each partition has a leader.

    Existing topics are left as they are (a warning when they have fewer partitions than
    configured). Returns full topic name -> partition count as the broker reports it.
    """
    plans = topic_plans(settings, specs)
    async with _admin(bootstrap, f"{settings.kafka.client_id}-admin") as admin:
        existing = await _describe_all(admin)
        for plan in plans:
            found = existing.get(plan.name)
            if found is not None and len(found["partitions"]) < plan.partitions:
                log.warning("topic %s has %d partitions, fewer than the %d configured; "
                            "left as is", plan.name, len(found["partitions"]), plan.partitions)
        missing = [plan for plan in plans if plan.name not in existing]
        if missing:
            log.info("creating %d topics: %s", len(missing), ", ".join(p.name for p in missing))
            await _create(admin, missing, timeout_s)
        return await _wait_for_leaders(admin, [plan.name for plan in plans], timeout_s)


async def ensure_plans(
    bootstrap: str,
    plans: Sequence[TopicPlan],
    *,
    client_id: str = "memstream-admin",
    timeout_s: float = 30.0,
) -> dict[str, int]:
    """Create the missing topics of ``plans`` under their names as given (e.g. a faust table's
    ``<app_id>-<table>-changelog``, which carries no registry prefix) and wait for leaders."""
    async with _admin(bootstrap, client_id) as admin:
        existing = await _describe_all(admin)
        missing = [plan for plan in plans if plan.name not in existing]
        if missing:
            log.info("creating %d topics: %s", len(missing), ", ".join(p.name for p in missing))
            await _create(admin, missing, timeout_s)
        return await _wait_for_leaders(admin, [plan.name for plan in plans], timeout_s)


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, names: Sequence[str], timeout_s: float
) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        described = await _describe_all(admin)
        waiting = [n for n in names if not _has_leaders(described.get(n))]
        if not waiting:
            return {name: len(described[name]["partitions"]) for name in names}
        if loop.time() >= deadline:
            raise TopicAdminError(
                f"topics without a leader for every partition after {timeout_s:.0f}s: "
                + ", ".join(waiting)
            )
        await asyncio.sleep(0.1)


def _has_leaders(topic: dict[str, Any] | None) -> bool:
    if topic is None or not topic["partitions"]:
        return False
    return all(p["error_code"] == 0 and p["leader"] >= 0 for p in topic["partitions"])


async def delete_topics(
    settings: Settings,
    bootstrap: str,
    *,
    specs: Iterable[TopicSpec] = ALL_TOPICS,
    timeout_s: float = 30.0,
) -> list[str]:
    """Delete the registry topics that exist (for tests and ops); returns the deleted names."""
    names = [plan.name for plan in topic_plans(settings, specs)]
    async with _admin(bootstrap, f"{settings.kafka.client_id}-admin") as admin:
        present = [n for n in names if n in await _describe_all(admin)]
        if not present:
            return []
        response = await admin.delete_topics(present, timeout_ms=int(timeout_s * 1000))
        for name, code in response.topic_error_codes:
            if code not in (0, _UNKNOWN_TOPIC):
                raise TopicAdminError(f"cannot delete topic {name}: {_error(code, None)}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while remaining := set(present) & set(await _describe_all(admin)):
            if loop.time() >= deadline:
                raise TopicAdminError(f"topics still listed after delete: {sorted(remaining)}")
            await asyncio.sleep(0.1)
        return present


async def topic_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """End offset (the next offset to be written) of every partition of ``topic``."""
    async with _offsets_reader(bootstrap) as reader:
        if topic not in await reader.topics():
            raise TopicAdminError(f"topic {topic} does not exist on {bootstrap}")
        partitions = [TopicPartition(topic, p) for p in reader.partitions_for_topic(topic) or ()]
        ends = await reader.end_offsets(partitions)
        return {tp.partition: offset for tp, offset in sorted(ends.items())}


@dataclass(frozen=True)
class Position:
    """Where a consumer group stands on one partition: its committed offset (the log's start
    when it never committed) and the partition's end (the next offset to be written)."""

    committed: int
    end: int

    @property
    def lag(self) -> int:
        """Records written and not yet handled (committed) by the group."""
        return max(self.end - self.committed, 0)


Positions = dict[str, dict[int, Position]]  # topic -> partition -> position


def lag_of(positions: Positions) -> dict[str, dict[int, int]]:
    return {topic: {p: pos.lag for p, pos in parts.items()} for topic, parts in positions.items()}


async def group_positions(
    bootstrap: str, group_id: str, topics: Sequence[str] | None = None
) -> Positions:
    """Committed and end offsets of ``group_id``: topic -> partition -> ``Position``.

    Without ``topics``, every partition the group committed to (the broker must list a
    group's offsets: noida and Kafka do, tansu does not). With ``topics``, every partition
    of those topics; one the group never committed counts from the log start.
    """
    async with _admin(bootstrap) as admin, _offsets_reader(bootstrap) as reader:
        return await _positions(admin, reader, bootstrap, group_id, topics)


async def _positions(admin: AIOKafkaAdminClient, reader: AIOKafkaConsumer, bootstrap: str,
                     group_id: str, topics: Sequence[str] | None) -> Positions:
    """``group_positions`` through clients already started."""
    partitions: list[TopicPartition] | None = None
    if topics is not None:
        known = await reader.topics()
        if missing := [t for t in topics if t not in known]:
            raise TopicAdminError(f"topics {missing} do not exist on {bootstrap}")
        partitions = [TopicPartition(t, p) for t in topics
                      for p in sorted(reader.partitions_for_topic(t) or ())]
    try:
        committed = await admin.list_consumer_group_offsets(group_id, partitions=partitions)
    except KafkaConnectionError as exc:
        if partitions is not None:
            raise
        raise GroupOffsetsUnsupported(
            f"the broker at {bootstrap} cannot list the committed offsets of group "
            f"{group_id} (tansu closes the connection on that request); pass topics=[...] "
            "or use noida or Apache Kafka"
        ) from exc
    if not committed:
        return {}
    ends = await reader.end_offsets(list(committed))
    starts = await reader.beginning_offsets(list(committed))
    out: Positions = {}
    for tp, meta in sorted(committed.items()):
        base = meta.offset if meta.offset >= 0 else starts[tp]
        out.setdefault(tp.topic, {})[tp.partition] = Position(base, ends[tp])
    return out


async def group_lag(
    bootstrap: str, group_id: str, topics: Sequence[str] | None = None
) -> dict[str, dict[int, int]]:
    """Messages not yet committed by ``group_id``: topic -> partition -> end minus committed
    (which partitions: ``group_positions``)."""
    return lag_of(await group_positions(bootstrap, group_id, topics))


async def worker_positions(settings: Settings, bootstrap: str) -> Positions:
    """Where the workers stand on every input topic, over every stage's consumer group."""
    groups: dict[str, list[str]] = {}
    for spec in WORKER_INPUTS:
        groups.setdefault(consumer_group(settings, spec), []).append(spec.name(settings))
    positions: Positions = {}
    # one admin client and one offsets reader for every group: each started client is a
    # connection, a bootstrap and a metadata read, and a worker samples every few seconds
    async with _admin(bootstrap) as admin, _offsets_reader(bootstrap) as reader:
        for group, names in groups.items():
            positions.update(await _positions(admin, reader, bootstrap, group, names))
    return positions


async def worker_lag(settings: Settings, bootstrap: str) -> dict[str, dict[int, int]]:
    """Records the workers have not yet processed: input topic -> partition -> lag, over
    every stage's consumer group."""
    return lag_of(await worker_positions(settings, bootstrap))
