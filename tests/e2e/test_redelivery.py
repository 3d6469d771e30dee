"""Effectively once in the add stage — real broker, FalkorDB and Milvus Lite.

Each test leaves the stores as a crash at one point of the first delivery would (written
directly through the stores, or by running the stage logic and dropping its outputs), then
delivers the same ``memory.items`` record again, and checks that every output the first
delivery should have made is there exactly once, under the ids a full run gives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest_asyncio

from memstream.streams.core.merge import Merge, merge_note
from memstream.streams.core.working_memory import working_copy
from memstream.streams.memory.logic import add_memories, build_node, node_id_for
from memstream.streams.runtime.stage import Outgoing, RawRecord, Record
from memstream.topics.events import ExtractedMemory, MemoryUpdate, Origin, ReorganizeEvent
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import Edge, MemoryItem
from memstream.topics.registry import MEMORY_ITEMS, MEMORY_UPDATES, REORGANIZE_HIGH
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import read_topic

T0 = datetime(2026, 4, 1, 9, tzinfo=UTC)


@pytest_asyncio.fixture
async def quiet(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    """The pipeline without the optimizer, so the stores hold only what the add stage wrote."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


def item(cube: str, text: str, day: int = 0) -> ExtractedMemory:
    return ExtractedMemory(user_id=cube, cube_id=cube, memory=text,
                           occurred_at=T0 + timedelta(days=day))


async def deliver(p: Pipeline, *items: ExtractedMemory) -> None:
    token = None
    for one in items:
        token = await p.client.publish(MEMORY_ITEMS, one)
    assert token is not None
    await p.client.wait_applied(token, timeout=60)


async def vector_of(p: Pipeline, text: str) -> list[float]:
    return [float(x) for x in (await p.deps.embedder.embed_passages([text]))[0]]


def as_record(value: ExtractedMemory, offset: int = 0) -> Record[ExtractedMemory]:
    raw = RawRecord("memory.items", 0, offset, value.cube_id.encode(), b"")
    return Record(value, Origin(topic="memory.items", partition=0, offset=offset), raw)


async def first_delivery_without_sends(p: Pipeline, *items: ExtractedMemory) -> list[Outgoing]:
    """The stage's logic on the real stores, its outputs never sent: a crash after every
    write and before the sends."""
    return await add_memories([as_record(one, i) for i, one in enumerate(items)], p.deps)


async def updates(p: Pipeline, cube: str) -> list[MemoryUpdate]:
    return [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
            if isinstance(u, MemoryUpdate) and u.cube_id == cube]


async def reorganize(p: Pipeline, cube: str) -> list[ReorganizeEvent]:
    return [e for e in await read_topic(p.settings, p.bootstrap, REORGANIZE_HIGH)
            if isinstance(e, ReorganizeEvent) and e.cube_id == cube]


async def long_term(p: Pipeline, cube: str) -> list[MemoryItem]:
    return await p.deps.store.graph.all_of_type(cube, "LongTermMemory", status=None)


async def merges_like(p: Pipeline, cube: str, reference: str) -> list[tuple[str, str]]:
    """The MERGED_TO edges of ``cube``, once its nodes are found to be those of ``reference``
    (the same texts, statuses and types: their ids differ with the cube)."""

    def shape(nodes: Sequence[MemoryItem]) -> list[tuple[str, str, str]]:
        return sorted((n.memory, n.metadata.status, n.metadata.memory_type) for n in nodes)

    graph = p.deps.store.graph
    got, want = await graph.export_cube(cube), await graph.export_cube(reference)
    assert shape(got.nodes) == shape(want.nodes)
    return [(e.source, e.target) for e in got.edges if e.type == "MERGED_TO"]


async def assert_complete(p: Pipeline, cube: str, node_id: str) -> None:
    """One activated node with its vector and its working copy with its vector; announced
    once as ``added`` and once to the optimizer, under the ids a full run gives."""
    (node,) = await long_term(p, cube)
    assert node.id == node_id and node.metadata.status == "activated"
    ids = {r.id for r in await p.deps.store.vectors.get(cube, [node_id, working_copy_id(node_id)])}
    assert ids == {node_id, working_copy_id(node_id)}
    assert await p.deps.store.vectors.count(cube) == 2  # the node's and its working copy's
    assert (await p.deps.store.repair(cube)).consistent
    added = [u for u in await updates(p, cube) if u.action == "added"]
    assert {u.event_id for u in added} == {derived_event_id("added", node_id)}
    assert [u.node_id for u in added] == [node_id]
    events = await reorganize(p, cube)
    assert {e.event_id for e in events} == {derived_event_id("reorganize-add", node_id)}
    assert [e.node_ids for e in events] == [(node_id,)]
    found = await p.client.search(cube, node.memory)
    assert [s.item.id for s in found if s.item.id == node_id] == [node_id]


async def test_a_node_in_the_graph_without_its_vector_gets_it_and_is_announced(
    quiet: Pipeline,
) -> None:
    """Crash between the graph write and the vector write of a new node: written
    ``generated`` to be judged, or (conflict detection off, or an older worker) activated
    with its working copy in the same graph write."""
    p = quiet
    for cube, status in (("half-generated", "generated"), ("half-activated", "activated")):
        one = item(cube, "The user keeps bees in the garden.")
        node = build_node(one)
        written = [node.evolve(status="generated")] if status == "generated" else [
            node, working_copy(node)]
        await p.deps.store.graph.upsert_nodes(cube, written)
        assert await p.deps.store.vectors.get(cube, [node.id]) == []
        await deliver(p, one)
        await assert_complete(p, cube, node.id)


async def test_a_complete_node_never_announced_is_announced_under_the_same_ids(
    quiet: Pipeline,
) -> None:
    """Crash after node, vector and working copy were written, before any send."""
    p = quiet
    cube = "unsent"
    one = item(cube, "The user's dog is called Pixel.")
    node = build_node(one)
    vector = await vector_of(p, node.memory)
    await p.deps.store.write([(working_copy(node), vector), (node, vector)])
    before = await p.deps.store.graph.export_cube(cube)
    await deliver(p, one)
    after = await p.deps.store.graph.export_cube(cube)
    assert after.nodes == before.nodes  # nothing rewritten
    await assert_complete(p, cube, node.id)


async def test_dropped_outputs_are_sent_by_the_redelivery_and_nothing_is_written_twice(
    quiet: Pipeline,
) -> None:
    """The stage logic ran to its end (three facts, one merge, one change that closes an older
    statement); the worker died before sending."""
    p = quiet
    cube = "dropped"
    old = item(cube, "The user loves hiking in the mountains.", day=0)
    home = item(cube, "Alice lives in Berlin.", day=0)
    await deliver(p, old, home)
    batch = (item(cube, "The user really enjoys mountain hiking.", day=1),
             item(cube, "The user plays the cello.", day=2),
             item(cube, "Alice moved to Lisbon.", day=3))
    dropped = await first_delivery_without_sends(p, *batch)
    expected = {o.event.event_id for o in dropped}
    assert {type(o.event).__name__ for o in dropped} == {"MemoryUpdate", "ReorganizeEvent"}
    before = await p.deps.store.graph.export_cube(cube)
    vectors_before = await p.deps.store.vectors.count(cube)

    await deliver(p, *batch)
    after = await p.deps.store.graph.export_cube(cube)
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert sorted(after.edges, key=str) == sorted(before.edges, key=str)
    assert await p.deps.store.vectors.count(cube) == vectors_before
    assert (await p.deps.store.repair(cube)).consistent
    sent = {u.event_id for u in await updates(p, cube)} | {
        e.event_id for e in await reorganize(p, cube)}
    assert expected <= sent
    moved = node_id_for(batch[0])
    merged = [u for u in await updates(p, cube) if u.action == "merged"]
    assert [(u.node_id, u.related_ids) for u in merged] == [(moved, (node_id_for(old),))]
    assert not [u for u in await updates(p, cube) if u.action == "added" and u.node_id == moved]
    # the move closes the old home (SUPERSEDES), announced again under the same id
    closed = [u for u in await updates(p, cube) if u.action == "superseded"]
    assert [(u.node_id, u.related_ids) for u in closed] == [
        (node_id_for(home), (node_id_for(batch[2]),))]
    assert closed[0].event_id in expected


async def test_a_recorded_merge_is_applied_not_decided_again(quiet: Pipeline) -> None:
    """Crash after the merge decision was recorded (its MERGED_TO edge), before it was
    applied: the redelivery applies that decision, and the result is an uninterrupted run's."""
    p = quiet
    texts = ("The user loves hiking in the mountains.", "The user really enjoys mountain hiking.")
    reference, cube = "merge-ref", "merge-cut"
    await deliver(p, item(reference, texts[0]), item(reference, texts[1], day=1))

    old, new = item(cube, texts[0]), item(cube, texts[1], day=1)
    await deliver(p, old)
    node = build_node(new)
    await p.deps.store.write([(node.evolve(status="generated"), await vector_of(p, node.memory))])
    note = merge_note(Merge(node, (), build_node(old), "redundant", "recorded", False),
                      decided_for=node.id)
    await p.deps.store.graph.add_edges(cube, [Edge(source=node_id_for(old), target=node.id,
                                             type="MERGED_TO", reason=note)])
    await deliver(p, new)
    assert await merges_like(p, cube, reference) == [(node_id_for(old), node.id)]
    assert (await p.deps.store.repair(cube)).consistent
    actions: dict[str, Any] = {u.event_id: (u.action, u.node_id) for u in await updates(p, cube)}
    assert actions[derived_event_id("merged", node.id, node_id_for(old))] == ("merged", node.id)
    assert actions[derived_event_id("archived", node_id_for(old))] == (
        "archived", node_id_for(old))
    assert derived_event_id("added", node.id) not in actions
    found = await p.client.search(cube, "Where does the user like to hike?")
    assert node_id_for(old) not in {s.item.id for s in found}


async def test_a_batch_cut_between_two_items_ends_as_an_uninterrupted_run(
    quiet: Pipeline,
) -> None:
    """The first item decided and written, the second written ``generated`` and not judged
    yet: the redelivered batch announces the first again and judges the second once, against
    what came before it (here it merges with the first)."""
    p = quiet
    texts = ("The user loves hiking in the mountains.", "The user really enjoys mountain hiking.")
    reference, cube = "batch-ref", "batch-cut"
    await deliver(p, item(reference, texts[0]), item(reference, texts[1], day=1))
    first, second = item(cube, texts[0]), item(cube, texts[1], day=1)
    dropped = await first_delivery_without_sends(p, first)
    node = build_node(second)
    await p.deps.store.write([(node.evolve(status="generated"), await vector_of(p, node.memory))])
    await deliver(p, first, second)
    assert await merges_like(p, cube, reference) == [(node_id_for(first), node.id)]
    assert (await p.deps.store.repair(cube)).consistent
    announced = await updates(p, cube)
    assert {o.event.event_id for o in dropped} <= {u.event_id for u in announced} | {
        e.event_id for e in await reorganize(p, cube)}
    by_id = {u.event_id: u.action for u in announced}
    assert sorted(by_id.values()) == sorted(
        {u.event_id: u.action for u in await updates(p, reference)}.values())
    assert by_id[derived_event_id("merged", node.id, node_id_for(first))] == "merged"


async def test_an_eviction_cut_short_by_a_crash_is_announced_and_done_by_the_redelivery(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str,
) -> None:
    """Working memory holds 2: the third item evicts the first one's copy, named on the third
    item's ``added`` (``removed_ids``). The first delivery of the third item stops after its
    sends and before its deletions (a crash there); the redelivery announces the same
    ``added`` again, under the same id, naming the same copy, and removes it."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"enabled": False},
                                 memory={"working_memory_capacity": 2})
    async for p in run_pipeline(settings):
        first, second, third = (item("ev", text, day=n) for n, text in enumerate([
            "Rosa grows tomatoes.", "Tariq collects stamps.", "Mei swims at dawn."]))
        await deliver(p, first, second)
        outputs = await first_delivery_without_sends(p, third)
        evicted = working_copy_id(node_id_for(first))
        evicting = [o for o in outputs if isinstance(o.event, MemoryUpdate)
                    and o.event.removed_ids]
        assert not [o for o in outputs if isinstance(o.event, MemoryUpdate)
                    and o.event.action == "removed"]  # no record per evicted copy
        assert [(o.event.action, o.event.node_id, o.event.removed_ids) for o in evicting
                if isinstance(o.event, MemoryUpdate)] == [
            ("added", node_id_for(third), (evicted,))]
        assert evicting[-1].then is not None  # the deletion waits for the announcement
        assert await p.deps.store.graph.get_node("ev", evicted) is not None  # not yet removed
        await deliver(p, third)  # the redelivery, through the stage
        assert await p.deps.store.graph.get_node("ev", evicted) is None
        assert await p.deps.store.vectors.get("ev", [evicted]) == []
        announced = [u for u in await updates(p, "ev") if u.removed_ids]
        assert {u.event_id for u in announced} == {derived_event_id("added", node_id_for(third))}
        assert {u.removed_ids for u in announced} == {(evicted,)}
