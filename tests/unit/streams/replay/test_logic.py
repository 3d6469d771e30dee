"""A replay's step (streams/replay/logic.py) does what the live runtime does with a stage's
outputs: the actions that follow their announcement (capacity evictions) are carried out,
so a replayed cube holds no more working-memory copies than the live one did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstream.sinks.ports import Filter
from memstream.streams.reorganize.inline import InlineOptimizer
from memstream.streams.replay.log import LogRecord
from memstream.streams.replay.logic import Announcer, _apply
from memstream.streams.worker import replay_stages
from memstream.topics.events import ExtractedMemory, ReplayCube
from memstream.topics.registry import MEMORY_ITEMS
from tests.support.doubles import memory_deps, record

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
CUBE = "alice"
TEXTS = ["Alice adopted a beagle named Pepper.", "Alice works as a nurse in Porto.",
         "Alice is allergic to peanuts.", "Alice is learning Japanese on her commute."]


async def test_a_replayed_step_evicts_working_memory_beyond_its_capacity(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, memory={"working_memory_capacity": 2},
                       reorganize={"enabled": False})
    cmd = ReplayCube(user_id=CUBE)
    step = [LogRecord(MEMORY_ITEMS, 0, int((T0 + timedelta(minutes=i)).timestamp() * 1000),
                      record(ExtractedMemory(user_id=CUBE, memory=text,
                                             occurred_at=T0 + timedelta(minutes=i)),
                             topic=MEMORY_ITEMS.suffix))
            for i, text in enumerate(TEXTS)]

    await _apply(step, cmd, deps, Announcer(deps, cmd, CUBE), replay_stages(),
                 InlineOptimizer())

    facts = await deps.store.graph.find_nodes(CUBE, [Filter("memory_type", "=",
                                                            "LongTermMemory")])
    copies = await deps.store.graph.find_nodes(CUBE, [Filter("memory_type", "=",
                                                             "WorkingMemory")])
    assert len(facts) == len(TEXTS)
    assert len(copies) == 2  # the capacity: the older copies were evicted, as live
