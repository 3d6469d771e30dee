"""History, time travel and provenance from the log — real broker, FalkorDB, Milvus Lite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from memstream.history.provenance import NodeNotFound
from memstream.topics.events import (
    DeleteNodes,
    ExtractedMemory,
    FreezeNodes,
    LifecycleSweep,
    ReorganizeEvent,
    UpdateNode,
)
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_ITEMS
from tests.support.clock import Clock
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


@pytest_asyncio.fixture
async def timed(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                ) -> AsyncIterator[tuple[Pipeline, Clock]]:
    clock = Clock(T0 + timedelta(hours=1))
    settings = pipeline_settings(
        tmp_path, kafka_broker, falkordb_uri, reorganize={"enabled": False},
        scheduler={"enabled": False}, lifecycle={"archive_after": timedelta(days=30)})
    async for p in run_pipeline(settings, clock=clock):
        yield p, clock


async def held(p: Pipeline, cube: str) -> list[dict[str, Any]]:
    """What the stores hold now (working-memory copies aside), comparable with ``as_of``."""
    graph = await p.deps.store.graph.export_cube(cube)
    return view([n for n in graph.nodes if n.metadata.memory_type != "WorkingMemory"])


def view(nodes: list[MemoryItem]) -> list[dict[str, Any]]:
    return sorted((n.model_dump(mode="json") for n in nodes), key=lambda d: d["id"])


async def applied(p: Pipeline, *events: Any) -> None:
    for event in events:
        token = await (p.client.publish(MEMORY_ITEMS, event) if isinstance(event, ExtractedMemory)
                       else p.client.command(event))
        await p.client.wait_applied(token, timeout=60)
        failure = await p.client.command_failure(token)
        assert failure is None, failure


async def test_as_of_returns_what_the_cube_held_at_three_points(
    timed: tuple[Pipeline, Clock],
) -> None:
    p, clock = timed
    cube = "tt"

    def item(text: str, at: datetime) -> ExtractedMemory:
        return ExtractedMemory(user_id=cube, memory=text, occurred_at=at)

    # 1. two memories
    await applied(p, item("The user lives in Berlin.", T0), item("The user works as a nurse.", T0))
    first = await held(p, cube)
    home = next(d["id"] for d in first if "Berlin" in d["memory"])
    job = next(d["id"] for d in first if "nurse" in d["memory"])
    # 2. a day later: the home is corrected, the job frozen, a pet added
    clock.now = day2 = T0 + timedelta(days=1)
    await applied(p, UpdateNode(user_id=cube, node_id=home, memory="The user lives in Hamburg.",
                                occurred_at=day2),
                  FreezeNodes(user_id=cube, node_ids=(job,), occurred_at=day2),
                  item("The user has a cat named Miso.", day2))
    second = await held(p, cube)
    pet = next(d["id"] for d in second if "Miso" in d["memory"])
    # 3. forty days later: the pet deleted, the unused home archived (the job is frozen)
    clock.now = day40 = T0 + timedelta(days=40)
    await applied(p, DeleteNodes(user_id=cube, node_ids=(pet,), occurred_at=day40),
                  LifecycleSweep(user_id=cube, occurred_at=day40))
    third = await held(p, cube)
    assert len({str(first), str(second), str(third)}) == 3  # three different states
    assert {d["metadata"]["status"] for d in third} == {"archived", "activated"}

    for at, expected in ((T0 + timedelta(hours=2), first), (day2 + timedelta(hours=1), second),
                         (day40 + timedelta(hours=1), third)):
        assert view(await p.client.as_of(cube, at)) == expected
    assert await p.client.as_of(cube, T0) == []  # before anything was stored
    with pytest.raises(ValueError, match="timezone-aware"):
        await p.client.as_of(cube, datetime(2026, 3, 1))  # noqa: DTZ001 - the point of the test

    # the home's history: every change, each with the event that caused it
    changes = await p.client.memory_history(home)
    assert [c.update.action for c in changes] == ["added", "updated", "archived"]
    assert [c.cause_topic for c in changes] == ["memory.items", "memory.commands",
                                                "memory.commands"]
    assert isinstance(changes[1].cause, UpdateNode)
    assert changes[1].cause.memory == "The user lives in Hamburg."
    assert isinstance(changes[2].cause, LifecycleSweep)
    assert [c.update.node.memory for c in changes if c.update.node] == [
        "The user lives in Berlin.", "The user lives in Hamburg.", "The user lives in Hamburg."]
    with pytest.raises(NodeNotFound):
        await p.client.memory_history("no-such-node", cube)


async def test_explain_shows_the_source_messages_and_the_merge(pipeline: Pipeline) -> None:
    p = pipeline
    cube = "why"
    first = await p.client.add_messages(cube, [
        {"role": "user", "content": "I love hiking in the mountains."},
        {"role": "user", "content": "My sister Ana lives in Porto."}], session_id="s1")
    await p.client.wait_applied(first, timeout=120)
    second = await p.client.add_messages(cube, [
        {"role": "user", "content": "I really love hiking in the mountains!"}], session_id="s2")
    await p.client.wait_applied(second, timeout=120)
    nodes = await p.deps.store.graph.all_of_type(cube, "UserMemory", status=None)
    nodes += await p.deps.store.graph.all_of_type(cube, "LongTermMemory", status=None)
    (kept,) = [n for n in nodes if "hiking" in n.memory and n.metadata.status == "activated"]
    (archived,) = [n for n in nodes if "hiking" in n.memory and n.metadata.status == "archived"]

    why = await p.client.explain(kept.id)
    assert why.node is not None and why.node.memory == kept.memory
    assert [s.text for s in why.sources if s.kind == "message"] == [
        "I really love hiking in the mountains!"]
    merged = [step for step in why.lineage if step.kind == "merged"]
    assert [step.source.node_id for step in merged] == [archived.id]
    assert [s.text for s in merged[0].source.sources] == ["I love hiking in the mountains."]
    assert merged[0].reason.startswith(("redundant", "contradictory"))
    episodes = [step.source for step in why.lineage if step.kind == "episode"]
    assert episodes and all(e.node is not None and e.node.metadata.memory_type == "EpisodicMemory"
                            for e in episodes)
    # the sister's memory comes from its own message only
    (sister,) = [n for n in nodes if "Porto" in n.memory]
    assert [s.text for s in (await p.client.explain(sister.id, cube)).sources] == [
        "My sister Ana lives in Porto."]

    # its history: written, superseded by the merge, archived (each caused by the item that
    # did it); edges the optimizer drew to it are changes too, caused by reorganize events
    history = await p.client.memory_history(archived.id)
    own = [c for c in history if c.update.action != "linked"]
    assert [c.update.action for c in own] == ["added", "merged", "archived"]
    assert [c.cause.memory for c in own if isinstance(c.cause, ExtractedMemory)] == [
        "I love hiking in the mountains.", "I really love hiking in the mountains!",
        "I really love hiking in the mountains!"]
    assert all(isinstance(c.cause, ReorganizeEvent) for c in history if c not in own)
