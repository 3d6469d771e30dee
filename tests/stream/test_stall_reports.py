"""Stall reports against a real broker, with the optimizer's own processor and agents
(``streams/reorganize/agent.py``) and the worker's stall check (``streams/runtime/stalls.py``)
fed by the same lag sampler as in a worker. Its store is slowed: every read takes a while
(a slow optimizer), or blocks for good on the first batch (a stage that really stopped).

A slow optimizer catching up on a backlog of ``reorganize.low`` logs nothing about stalls,
stopped or slow streams above INFO, from faust or memstream; a stopped one is reported once,
above INFO, with the stage, the topic and partition and the records waiting, and at INFO
when it moves again."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from memstream.kafka.admin import ensure_topics, worker_positions
from memstream.kafka.progress import Progress
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.streams.app import create_app
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.ops.metrics import WorkerMetrics
from memstream.streams.reorganize.agent import register
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ReorganizeEvent
from memstream.topics.models import MemoryItem
from memstream.topics.registry import REORGANIZE_LOW
from memstream.topics.settings import Settings
from tests.stream.broker_fixtures import stream_settings
from tests.support.doubles import ManualClock, local_embedder

pytestmark = pytest.mark.timeout(120)

BACKLOG = 24
STALL_AFTER_S = 2.0
STALL_WORDS = re.compile(r"stall|stopped|slow", re.IGNORECASE)


class GatedGraph(InMemoryGraphStore):
    """The optimizer's store: each read of nodes waits ``delay_s``, and ``gate`` (once
    cleared) holds every read until it is set again."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.gate = asyncio.Event()
        self.gate.set()
        self.reads = 0

    async def get_nodes(self, cube_id: str, ids: Sequence[str]) -> list[MemoryItem]:
        self.reads += 1
        await asyncio.sleep(self.delay_s)
        await self.gate.wait()
        return await super().get_nodes(cube_id, ids)


@dataclass
class Optimizer:
    settings: Settings
    graph: GatedGraph
    handled: list[str]
    producer: AIOKafkaProducer

    @property
    def topic(self) -> str:
        return REORGANIZE_LOW.name(self.settings)

    async def backlog(self, n: int) -> None:
        for i in range(n):
            event = ReorganizeEvent(op="add", node_ids=(f"n{i}",), user_id="u", cube_id="u")
            await self.producer.send(self.topic, REORGANIZE_LOW.encode(event), key=b"u")
        await self.producer.flush()


async def optimizer(broker: str, prefix: str, tmp: Path, delay_s: float,
                    closed: bool = False, partitions: int = 1) -> AsyncIterator[Optimizer]:
    """The optimizer's agents on one worker, its stall check on, ``delay_s`` per store read;
    ``closed``: the gate is shut before it starts (its first batch never ends)."""
    settings = stream_settings(broker, prefix, tmp, partitions=partitions)
    w = settings.worker
    w.commit_interval_s, w.stall_after_s, w.low_priority_batch, w.intake_queue = 0.2, \
        STALL_AFTER_S, 2, 4  # the agent waits for room most of the time, as under a long load
    settings.metrics.enabled, settings.metrics.sample_interval_s = False, 0.25
    await ensure_topics(settings, broker)
    app, bound = create_app(settings, broker)
    emb = local_embedder()

    async def no_wait(_seconds: float) -> None:
        return None

    graph = GatedGraph(delay_s)
    if closed:
        graph.gate.clear()
    deps = Deps(settings=settings, llm=RulesLLM(), embedder=emb, clock=ManualClock(),
                store=MemoryStore(graph, InMemoryVectorStore(dim=emb.dim), sleep=no_wait))
    progress = Progress(settings, broker)
    _, processor = register(bound, deps, progress)
    handled: list[str] = []
    processor.observers.append(lambda event: handled.append(event.event_id))
    metrics = WorkerMetrics(settings)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    await app.start()
    metrics.start(lambda: worker_positions(settings, broker), bound.stalls)
    try:
        yield Optimizer(settings, graph, handled, producer)
    finally:
        graph.gate.set()
        await metrics.stop()
        await producer.stop()
        await app.stop()
        await progress.close()


@pytest.fixture
async def slow(kafka_broker: str, topic_prefix: str, tmp_path: Path) -> AsyncIterator[Optimizer]:
    async for o in optimizer(kafka_broker, topic_prefix, tmp_path, delay_s=0.1):
        yield o


@pytest.fixture
async def wide(kafka_broker: str, topic_prefix: str, tmp_path: Path) -> AsyncIterator[Optimizer]:
    """A worker holding many partitions, as a real one does (every stage's topics)."""
    async for o in optimizer(kafka_broker, topic_prefix, tmp_path, delay_s=0.0, partitions=12):
        yield o


@pytest.fixture
async def stopped(kafka_broker: str, topic_prefix: str,
                  tmp_path: Path) -> AsyncIterator[Optimizer]:
    async for o in optimizer(kafka_broker, topic_prefix, tmp_path, delay_s=0.0, closed=True):
        yield o


def above_info(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno > logging.INFO]


async def until(check: object, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check() and loop.time() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.1)


async def test_a_slow_optimizer_catching_up_is_never_reported_stalled(
        slow: Optimizer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    await slow.backlog(BACKLOG)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await until(lambda: len(slow.handled) >= BACKLOG, 90)
    took = loop.time() - started
    assert len(slow.handled) == BACKLOG, "the optimizer did not catch up"
    assert took > 2 * STALL_AFTER_S, f"caught up in {took:.1f}s: not behind for long enough"
    await asyncio.sleep(1.0)  # a few more checks after the last batch
    noise = [f"{r.name} {r.levelname}: {r.getMessage()}" for r in above_info(caplog)
             if STALL_WORDS.search(r.getMessage())]
    assert noise == []


async def test_a_busy_event_loop_makes_no_warning_on_a_worker_that_moves(
        wide: Optimizer, caplog: pytest.LogCaptureFixture) -> None:
    """The worker's loop is busy in turns of 60 ms (as when the embedder's batches and a
    cube's load share it) while the optimizer works through a backlog: nothing is logged
    above INFO, neither a stall nor a timer of faust's that ran over its interval."""
    caplog.set_level(logging.INFO)
    loop = asyncio.get_running_loop()
    busy_until = loop.time() + 4.0

    async def hog() -> None:
        while loop.time() < busy_until:
            time.sleep(0.06)  # noqa: ASYNC251 - the loop is meant to be held
            await asyncio.sleep(0)

    hogging = asyncio.create_task(hog())
    await wide.backlog(BACKLOG)
    await hogging
    await until(lambda: len(wide.handled) >= BACKLOG, 60)
    assert len(wide.handled) == BACKLOG, "the optimizer did not catch up"
    await asyncio.sleep(1.0)
    assert [f"{r.name} {r.levelname}: {r.getMessage()}" for r in above_info(caplog)] == []


async def test_a_stopped_optimizer_is_reported_once_then_again_when_it_moves(
        stopped: Optimizer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    await stopped.backlog(BACKLOG)
    await until(lambda: above_info(caplog), 30)
    await asyncio.sleep(4 * STALL_AFTER_S)  # many more checks: still one report
    reports = [r for r in above_info(caplog) if STALL_WORDS.search(r.getMessage())]
    assert [(r.name, r.levelname) for r in reports] == [("memstream.stalls", "ERROR")]
    message = reports[0].getMessage()
    assert message.startswith(f"reorganize: stalled on {stopped.topic}[0]: {BACKLOG} records "
                              "wait and none was handled for "), message
    assert "1 batch of the stage in progress" in message
    assert stopped.handled == []
    stopped.graph.gate.set()  # what it waited for is back
    await until(lambda: len(stopped.handled) >= BACKLOG, 60)

    def moved_reports() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name == "memstream.stalls" and r.levelno == logging.INFO]

    # the report needs a commit and a sample of the group's offsets after the last batch:
    # a few tenths of a second alone, seconds on a loaded machine
    await until(moved_reports, 30)
    moved = moved_reports()
    assert moved and moved[0].startswith(f"reorganize: {stopped.topic}[0] moves again after "), \
        moved
    assert len([r for r in above_info(caplog) if STALL_WORDS.search(r.getMessage())]) == 1
