"""The optimizer's processor (streams/reorganize/agent.py): it gives way to ingestion (while
extraction or the add stage has work it rests after each batch a share of the time the batch
took, ``worker.optimizer_yield_ratio``, none by default), takes partitions in turn, and a
retried batch runs the optimization its failed attempt had placed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memstream.streams.reorganize.agent import Processor
from memstream.streams.runtime.stage import Outgoing, RawRecord, StageStats
from memstream.topics.events import MemoryUpdate, ReorganizeEvent
from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings
from tests.support.doubles import events_of, memory_deps, records, remember
from tests.support.paths import DATA

BATCH_S = 0.2


def processor(ingestion: tuple[StageStats, ...], max_yield_s: float = 5.0,
              ratio: float | None = None) -> Processor:
    async def send(outgoing: Sequence[Outgoing]) -> None:
        return None

    worker: dict[str, float] = {"optimizer_max_yield_s": max_yield_s}
    if ratio is not None:
        worker["optimizer_yield_ratio"] = ratio
    settings = Settings(worker=worker)
    bound = SimpleNamespace(services={"ingestion": ingestion}, send=send, app=None,
                            settings=settings)
    deps = SimpleNamespace(settings=settings, clock=None)
    proc = Processor(bound, deps, StageStats(), progress=None)  # type: ignore[arg-type]

    async def handle(raws: Sequence[RawRecord]) -> list[Outgoing]:
        await asyncio.sleep(BATCH_S)  # the optimizer's work on one batch
        return []

    proc._handles = dict.fromkeys((0, 1, 2), handle)
    return proc


async def three_batches(proc: Processor) -> float:
    """Seconds until three urgent batches submitted one after the other are done."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        for i in range(3):
            await proc.submit(0, [RawRecord("t", 0, i, b"k", b"{}")])
        return loop.time() - t0
    finally:
        await proc.stop()


async def test_runs_flat_out_when_ingestion_is_idle() -> None:
    idle = StageStats()
    proc = processor((idle,))
    proc.ingesting()  # the optimizer has seen the idle stage once
    assert await three_batches(proc) < 3 * BATCH_S + 0.25


async def test_rests_a_share_of_each_batch_while_ingestion_has_work() -> None:
    busy = StageStats(in_flight=1)
    # by default no rest: the optimizer keeps up with ingestion instead of trailing it
    assert Settings().worker.optimizer_yield_ratio == 0
    assert await three_batches(processor((busy,))) < 3 * BATCH_S + 0.25
    # a quarter of the batch's time follows each batch (after its ack): 3 batches, 2 rests
    took = await three_batches(processor((busy,), ratio=0.25))
    assert (3 + 2 * 0.25) * BATCH_S - 0.05 <= took < (3 + 2 * 0.25) * BATCH_S + 0.25
    # as long as the batch with a ratio of 1
    took = await three_batches(processor((busy,), ratio=1.0))
    assert 5 * BATCH_S - 0.05 <= took < 5 * BATCH_S + 0.5
    # the rest is bounded (worker.optimizer_max_yield_s)
    assert await three_batches(processor((busy,), max_yield_s=0.05, ratio=1.0)) \
        < 3 * (BATCH_S + 0.05) + 0.25


async def test_counts_a_batch_finished_since_it_last_looked_as_ingestion() -> None:
    add = StageStats()
    proc = processor((add,))
    assert proc.ingesting()  # first look: nothing known yet
    assert not proc.ingesting()
    add.processed += 32
    assert proc.ingesting()
    assert not proc.ingesting()


async def test_partitions_take_turns_so_a_later_backlog_is_not_left_behind() -> None:
    """One partition's backlog arrived first; another partition's events, delivered after
    it, go next rather than after the whole backlog (each partition's order is kept)."""
    proc = processor((StageStats(),))
    proc.ingesting()
    handled: list[list[tuple[int, int]]] = []
    first = asyncio.Event()

    async def handle(raws: Sequence[RawRecord]) -> list[Outgoing]:
        handled.append([(r.partition, r.offset) for r in raws])
        first.set()
        await asyncio.sleep(0.01)
        return []

    proc._handles = dict.fromkeys((0, 1, 2), handle)
    try:
        backlog = asyncio.create_task(
            proc.submit(0, [RawRecord("t", 2, i, b"k", b"{}") for i in range(12)]))
        await first.wait()
        await proc.submit(0, [RawRecord("t", 0, i, b"k", b"{}") for i in range(2)])
        await backlog
    finally:
        await proc.stop()
    size = Settings().worker.high_priority_batch
    assert handled[0] == [(2, i) for i in range(size)]
    assert handled[1] == [(0, i) for i in range(min(size, 2))]  # next, before the backlog
    assert [o for batch in handled if batch[0][0] == 2 for _, o in batch] == list(range(12))


CUBE = "trip"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}
T0 = datetime(2026, 4, 2, 8, tzinfo=UTC)
SUBJECTS: dict[str, list[str]] = json.loads(
    (DATA / "three_subjects.json").read_text(encoding="utf-8"))[
        "subjects"]


def added(*nodes: MemoryItem) -> ReorganizeEvent:
    return ReorganizeEvent(**ME, op="add", node_ids=tuple(n.id for n in nodes),
                           memory_type="LongTermMemory")


async def test_a_retried_batch_runs_and_announces_its_optimization_again(
    tmp_path: Path,
) -> None:
    """An optimization placed by the first event of a batch whose later event fails (a store
    outage) is run and announced again by the retry: the failed attempt sent nothing."""
    deps = memory_deps(tmp_path)
    earlier = await remember(deps, CUBE, *SUBJECTS["food"][:8], at=T0)
    interval = deps.settings.reorganize.optimize_interval_s
    later = await remember(deps, CUBE, "I bought a kayak.", "I paddle on Sundays.",
                           at=T0 + timedelta(seconds=3 * interval))
    processor = Processor(None, deps, StageStats(), None)  # type: ignore[arg-type]
    batch = records([added(earlier[0]), added(later[0]), added(later[1])])
    get_nodes, outage = deps.query.get_nodes, [True]

    async def down_once(cube: str, ids: Sequence[str]) -> list[MemoryItem]:
        if list(ids) == [later[1].id] and outage:
            outage.clear()
            raise ConnectionError("graph store unreachable")
        return await get_nodes(cube, ids)

    deps.query.get_nodes = down_once  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await processor.logic(batch)
    retried = await processor.logic(batch)
    summaries = [u for u in events_of(retried, MemoryUpdate)
                 if u.stage == "optimizer" and u.action == "added"]
    assert summaries, "the retry did not run the optimization the failed attempt had placed"
    uninterrupted = memory_deps(tmp_path / "again")
    await remember(uninterrupted, CUBE, *SUBJECTS["food"][:8], at=T0)
    await remember(uninterrupted, CUBE, "I bought a kayak.", "I paddle on Sundays.",
                   at=T0 + timedelta(seconds=3 * interval))
    once = await Processor(None, uninterrupted, StageStats(), None).logic(  # type: ignore[arg-type]
        records([added(earlier[0]), added(later[0]), added(later[1])]))
    assert {o.event.event_id for o in retried} == {o.event.event_id for o in once}
