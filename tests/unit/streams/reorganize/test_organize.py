"""The optimizer's organizing of new facts (streams/reorganize/organize.py), in batches: a
backlogged optimizer organizes consecutive add events together (one model call), a replay
organizes them one at a time. Both must leave the same graph, or a replay of the
log does not rebuild what the live worker built (issue 40: concepts and their members
differed after a replay of chats ingested behind a busy optimizer)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from memstream.streams.extraction.logic import extract_chunk
from memstream.streams.memory.logic import add_memories
from memstream.streams.reorganize.logic import on_add
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ConversationChunk, ReorganizeEvent
from tests.support.doubles import events_of, memory_deps, record, sent
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from history_data import chunks, pool_sentences  # noqa: E402

TURNS = 100  # the smallest history of the bench's generated chats that showed the defect
EDGES = ["RELATE_TO", "AGGREGATE_TO", "CAUSE", "CONDITION", "FOLLOWS", "CONFLICT",
         "MERGED_TO", "INFERRED_FROM"]


async def ingested(deps: Deps) -> tuple[str, list[ReorganizeEvent]]:
    """One speaker's cube of generated chats through extraction and the add stage (rules);
    the optimizer's add events, in log order, not yet handled."""
    pool = pool_sentences(365, 7)
    cube, events = "", []
    for offset, chunk in enumerate(chunks(0, TURNS, pool, 7, prefix="live", encoded=False)):
        cube = sorted(chunk.chats)[0]
        session, messages = chunk.chats[cube]
        event = ConversationChunk(user_id=cube, cube_id=cube, session_id=session,
                                  messages=messages, event_id=f"c{cube}{offset:05d}",
                                  occurred_at=messages[-1].timestamp)
        items = await extract_chunk(event, record(event, "conversations", 0, offset).origin,
                                    deps)
        out = await sent(await add_memories(
            [record(i, "conversations", 0, offset) for i in items], deps))
        events += [e for e in events_of(out, ReorganizeEvent) if e.op == "add"]
    return cube, events


async def graph(deps: Deps, cube: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """Every node (id, level, text) and every edge between them."""
    nodes = [*await deps.query.all_of_type(cube, "LongTermMemory"),
             *await deps.query.all_of_type(cube, "UserMemory")]
    edges = await deps.query.edges_from(cube, sorted(n.id for n in nodes), EDGES)
    return (sorted((n.id, n.metadata.hierarchy_level, n.memory) for n in nodes),
            sorted((e.type, e.source, e.target) for e in edges))


async def organized(tmp_path: Path, batch: int) -> tuple[Sequence[object], Sequence[object]]:
    deps = memory_deps(tmp_path / f"batch-{batch}")
    cube, events = await ingested(deps)
    for start in range(0, len(events), batch):
        await on_add(events[start:start + batch], deps)
    return await graph(deps, cube)


async def test_adds_organized_in_batches_leave_what_they_leave_one_at_a_time(
        tmp_path: Path) -> None:
    one_by_one = await organized(tmp_path, 1)
    nodes, edges = one_by_one
    assert any(level == "concept" for _, level, _ in nodes)
    assert any(kind == "AGGREGATE_TO" for kind, _, _ in edges)
    assert await organized(tmp_path, 16) == one_by_one
