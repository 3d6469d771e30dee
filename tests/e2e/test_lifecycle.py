"""Lifecycle as events — archive, expire, freeze — with the worker's clock injected; real
broker, FalkorDB and Milvus Lite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest_asyncio

from memstream.topics.events import (
    ExtractedMemory,
    FreezeNodes,
    LifecycleSweep,
    MemoryUpdate,
    ReorganizeEvent,
    UnfreezeNodes,
    UpdateNode,
    WriteToken,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import (
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    REORGANIZE_NORMAL,
)
from tests.support.clock import Clock
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import read_topic

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
CUBE = "life"


@pytest_asyncio.fixture
async def timed(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                ) -> AsyncIterator[tuple[Pipeline, Clock]]:
    """Archive after 30 days unused, expire 60 days after; the optimizer and scheduler off so
    the stores hold only what the add stage and the lifecycle wrote."""
    clock = Clock(T0 + timedelta(hours=1))
    settings = pipeline_settings(
        tmp_path, kafka_broker, falkordb_uri, reorganize={"enabled": False},
        scheduler={"enabled": False},
        lifecycle={"archive_after": timedelta(days=30), "expire_after": timedelta(days=60)})
    async for p in run_pipeline(settings, clock=clock):
        yield p, clock


async def add(p: Pipeline, *texts: str, at: datetime = T0) -> None:
    token = None
    for text in texts:
        token = await p.client.publish(MEMORY_ITEMS, ExtractedMemory(
            user_id=CUBE, memory=text, occurred_at=at))
    assert token is not None
    await p.client.wait_applied(token, timeout=60)


async def node(p: Pipeline, text: str) -> MemoryItem:
    for memory_type in ("LongTermMemory", "UserMemory"):
        for n in await p.deps.store.graph.all_of_type(CUBE, memory_type, status=None):
            if n.memory == text:
                return n
    raise AssertionError(f"no node {text!r}")


async def by_id(p: Pipeline, node_id: str) -> MemoryItem:
    found = await p.deps.store.graph.get_node(CUBE, node_id)
    assert found is not None
    return found


async def tick(p: Pipeline) -> list[WriteToken]:
    """One lifecycle timer tick (what the faust timer runs), then wait until it is applied."""
    tokens: list[WriteToken] = await p.worker.bound.services["lifecycle"]()  # type: ignore[union-attr]
    for token in tokens:
        await p.client.wait_applied(token, timeout=60)
    return tokens


async def updates(p: Pipeline) -> list[MemoryUpdate]:
    return [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
            if u.cube_id == CUBE]


async def found_ids(p: Pipeline, query: str, **kw: object) -> set[str]:
    """Ids of the long-term memories a search returns (working-memory copies aside)."""
    return {s.item.id for s in await p.client.search(
        CUBE, query, memory_type="LongTermMemory", **kw)}  # type: ignore[arg-type]


CHESS = "The user plays chess every Sunday with his neighbour."
COLOUR = "The user's favourite colour is dark green."
ALLERGY = "The user is allergic to penicillin."


async def test_unused_memories_are_archived_then_expired_and_a_frozen_one_survives(
    timed: tuple[Pipeline, Clock],
) -> None:
    p, clock = timed
    await add(p, CHESS, COLOUR, ALLERGY)
    chess, colour, allergy = [await node(p, t) for t in (CHESS, COLOUR, ALLERGY)]
    frozen = await p.client.command(FreezeNodes(user_id=CUBE, node_ids=(allergy.id,),
                                                reason="legal hold"))
    await p.client.wait_applied(frozen, timeout=60)
    assert (await by_id(p, allergy.id)).metadata.frozen

    # day 10: a search returns the chess memory, which counts as use
    clock.now = T0 + timedelta(days=10)
    assert chess.id in await found_ids(p, "chess on Sunday", top_k=1)
    for _ in range(100):
        if (await by_id(p, chess.id)).metadata.usage:
            break
        await asyncio.sleep(0.05)
    assert (await by_id(p, chess.id)).metadata.usage[-1].at == clock.now

    # day 35: the colour memory has been unused for 35 days (> 30): archived
    clock.now = T0 + timedelta(days=35)
    first_sweep = await tick(p)
    assert len(first_sweep) == 1
    assert (await by_id(p, colour.id)).metadata.status == "archived"
    assert (await by_id(p, chess.id)).metadata.status == "activated"  # used 25 days ago
    assert (await by_id(p, allergy.id)).metadata.status == "activated"
    assert await p.deps.store.graph.get_node(CUBE, working_copy_id(colour.id)) is None
    # default search leaves it out; a status filter opts in
    assert colour.id not in await found_ids(p, "favourite colour green")
    assert colour.id in await found_ids(p, "favourite colour green",
                                        search_filter={"status": "archived"})
    archived = [u for u in await updates(p) if u.action == "archived"]
    assert [u.node_id for u in archived] == [colour.id]
    assert "lifecycle.archive_after" in archived[0].reason and archived[0].stage == "lifecycle"

    # day 100: chess unused for 90 days: archived; colour archived 65 days ago: expired
    clock.now = T0 + timedelta(days=100)
    await tick(p)
    assert (await by_id(p, chess.id)).metadata.status == "archived"
    audit = await by_id(p, colour.id)
    assert audit.metadata.status == "expired"
    assert COLOUR not in audit.memory and "green" not in audit.memory
    assert (audit.metadata.key, audit.metadata.tags, audit.metadata.usage) == ("", (), ())
    assert (audit.id, audit.metadata.created_at, audit.metadata.sources) == (
        colour.id, colour.metadata.created_at, colour.metadata.sources)
    assert await p.deps.store.vectors.get(CUBE, [colour.id]) == []
    assert colour.id not in await found_ids(p, "favourite colour green",
                                            search_filter={"status": {"in": [
                                                "archived", "expired"]}})
    expired = [u for u in await updates(p) if u.action == "expired"]
    assert [u.node_id for u in expired] == [colour.id]
    assert expired[0].node is not None and COLOUR not in expired[0].node.memory

    # day 200: everything unfrozen is expired; the frozen memory is untouched
    clock.now = T0 + timedelta(days=200)
    await tick(p)
    assert (await by_id(p, chess.id)).metadata.status == "expired"
    kept = await by_id(p, allergy.id)
    assert (kept.memory, kept.metadata.status, kept.metadata.frozen) == (
        ALLERGY, "activated", True)
    assert len(await p.deps.store.vectors.get(CUBE, [allergy.id])) == 1
    assert allergy.id in await found_ids(p, "penicillin allergy")

    # a merge attempt on the frozen memory is refused, with the reason
    await add(p, ALLERGY, at=T0 + timedelta(days=200))
    kept = await by_id(p, allergy.id)
    assert (kept.memory, kept.metadata.status) == (ALLERGY, "activated")
    refusals = [u for u in await updates(p) if u.action == "refused"]
    assert [u.node_id for u in refusals] == [allergy.id]
    assert "frozen" in refusals[0].reason and "merge" in refusals[0].reason
    newcomer = refusals[0].related_ids[0]
    assert (await by_id(p, newcomer)).metadata.status == "activated"
    # an update is refused, and the refusal names the reason
    token = await p.client.command(UpdateNode(user_id=CUBE, node_id=allergy.id,
                                              memory="The user is not allergic."))
    await p.client.wait_applied(token, timeout=60)
    failure = await p.client.command_failure(token)
    assert failure is not None and "frozen" in failure
    assert (await by_id(p, allergy.id)).memory == ALLERGY

    # unfrozen, the lifecycle applies to it again
    token = await p.client.command(UnfreezeNodes(user_id=CUBE, node_ids=(allergy.id,)))
    await p.client.wait_applied(token, timeout=60)
    clock.now = T0 + timedelta(days=240)
    await tick(p)
    assert (await by_id(p, allergy.id)).metadata.status == "archived"
    actions = [u.action for u in await updates(p) if u.node_id == allergy.id]
    assert actions[:2] == ["added", "frozen"] and "unfrozen" in actions


async def test_an_explicit_merge_of_a_frozen_memory_is_refused(pipeline: Pipeline) -> None:
    """The optimizer's merge op (reorganize.normal) spares a frozen node and says why."""
    p = pipeline
    for text in (ALLERGY, "The user's sister lives in Rome."):
        token = await p.client.publish(MEMORY_ITEMS, ExtractedMemory(
            user_id="frz", memory=text, occurred_at=T0, memory_type="UserMemory"))
        await p.client.wait_applied(token, timeout=60)
    nodes = await p.deps.store.graph.all_of_type("frz", "UserMemory")
    assert len(nodes) >= 1
    target = next(n for n in nodes if n.memory == ALLERGY)
    others = [n for n in nodes if n.id != target.id]
    token = await p.client.command(FreezeNodes(user_id="frz", node_ids=(target.id,)))
    await p.client.wait_applied(token, timeout=60)
    partner = others[0].id if others else "missing"
    await p.client.publish(REORGANIZE_NORMAL, ReorganizeEvent(
        user_id="frz", op="merge", node_ids=(target.id, partner), reason="duplicate"))
    refusal: list[MemoryUpdate] = []
    for _ in range(200):
        refusal = [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
                   if u.cube_id == "frz" and u.action == "refused"]
        if refusal:
            break
        await asyncio.sleep(0.05)
    assert [u.node_id for u in refusal] == [target.id]
    assert "frozen" in refusal[0].reason and f"merge with {partner}" in refusal[0].reason
    kept = await p.deps.store.graph.get_node("frz", target.id)
    assert kept is not None and kept.metadata.status == "activated" and kept.memory == ALLERGY


async def test_the_timer_sweeps_every_cube_by_itself(tmp_path: Path, kafka_broker: str,
                                                     falkordb_uri: str) -> None:
    """No tick by hand: the worker's timer publishes the sweeps (wall clock, short interval)."""
    settings = pipeline_settings(
        tmp_path, kafka_broker, falkordb_uri, reorganize={"enabled": False},
        scheduler={"enabled": False},
        lifecycle={"archive_after": timedelta(days=30), "interval_s": 0.5})
    async for p in run_pipeline(settings):
        await add(p, COLOUR)  # stated on T0, long before today
        colour = await node(p, COLOUR)
        for _ in range(200):
            if (await by_id(p, colour.id)).metadata.status == "archived":
                break
            await asyncio.sleep(0.1)
        assert (await by_id(p, colour.id)).metadata.status == "archived"
        sweeps = [c for c in await read_topic(p.settings, p.bootstrap, MEMORY_COMMANDS)
                  if isinstance(c, LifecycleSweep)]
        assert sweeps and {s.cube_id for s in sweeps} == {CUBE}
