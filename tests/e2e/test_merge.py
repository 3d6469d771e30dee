"""Conflict detection and merging in the add stream — real broker and stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest_asyncio

from memstream.topics.events import ExtractedMemory
from memstream.topics.models import Edge, MemoryItem
from memstream.topics.registry import MEMORY_ITEMS, MEMORY_UPDATES
from tests.fakes.openai_server import Reply
from tests.support.pipeline import Pipeline, facts_by_status, pipeline_settings, run_pipeline
from tests.support.topics import read_topic

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


async def say(pipeline: Pipeline, cube: str, *texts: str, **fields: Any) -> None:
    """Each text as its own event, a day apart, and wait until all are applied."""
    token = None
    for i, text in enumerate(texts):
        item = ExtractedMemory(user_id=cube, memory=text, occurred_at=T0 + timedelta(days=i),
                               **fields)
        token = await pipeline.client.publish(MEMORY_ITEMS, item)
    assert token is not None
    await pipeline.client.wait_applied(token, timeout=60)


async def merged_to(pipeline: Pipeline, cube: str, archived: MemoryItem) -> list[str]:
    edges = await pipeline.deps.store.graph.edges_of(cube, archived.id, ["MERGED_TO"], "out")
    return [e.target for e in edges]


async def test_a_rewording_leaves_one_active_and_one_archived_node(pipeline: Pipeline) -> None:
    await say(pipeline, "p1", "The user loves hiking in the mountains.",
              "The user really enjoys mountain hiking.")
    nodes = await facts_by_status(pipeline, "p1")
    (active,), (archived,) = nodes["activated"], nodes["archived"]
    assert archived.memory == "The user loves hiking in the mountains."
    assert await merged_to(pipeline, "p1", archived) == [active.id]
    # working memory holds only the current statement
    working = await pipeline.deps.store.graph.all_of_type("p1", "WorkingMemory")
    assert [w.metadata.origin_id for w in working] == [active.id]
    updates = [u for u in await read_topic(pipeline.settings, pipeline.bootstrap,
                                           MEMORY_UPDATES) if u.cube_id == "p1"]
    merged = [u for u in updates if u.action == "merged"]
    assert len(merged) == 1 and merged[0].related_ids == (archived.id,)
    assert merged[0].reason.startswith("redundant")
    assert [u.node_id for u in updates if u.action == "archived"] == [archived.id]
    # archived memories are not returned by search
    found = await pipeline.client.search("p1", "hiking")
    assert archived.id not in {s.item.id for s in found}
    assert active.id in {s.item.id for s in found}


async def test_edges_of_the_merged_node_move_to_the_new_node(pipeline: Pipeline) -> None:
    await say(pipeline, "p6", "The user loves hiking in the mountains.",
              "The user bought new hiking boots.")
    old = next(n for n in (await facts_by_status(pipeline, "p6"))["activated"]
               if "loves" in n.memory)
    other = next(n for n in (await facts_by_status(pipeline, "p6"))["activated"]
                 if "boots" in n.memory)
    graph = pipeline.deps.store.graph
    await graph.add_edges("p6", [Edge(source=other.id, target=old.id, type="CAUSE"),
                                 Edge(source=old.id, target=other.id, type="RELATE_TO")])
    await say(pipeline, "p6", "The user really enjoys mountain hiking.")
    nodes = await facts_by_status(pipeline, "p6")
    (archived,) = nodes["archived"]
    assert archived.id == old.id
    (new_id,) = await merged_to(pipeline, "p6", archived)
    assert await graph.edge_exists("p6", other.id, new_id, "CAUSE")
    assert await graph.edge_exists("p6", new_id, other.id, "RELATE_TO")
    assert not await graph.edge_exists("p6", other.id, old.id, "CAUSE")


@pytest_asyncio.fixture
async def add_stage_only(tmp_path: Path, kafka_broker: str, falkordb_uri: str,
                         ) -> AsyncIterator[Pipeline]:
    """The optimizer off: it derives nodes from these items at its own pace (the kill test
    and the optimizer's replay test cover it), and snapshots here must be the add stage's."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


async def test_replaying_the_input_changes_nothing(add_stage_only: Pipeline) -> None:
    pipeline = add_stage_only
    texts = ["Alice lives in Berlin.", "The user loves hiking in the mountains.",
             "Alice lives in Lisbon.", "The user really enjoys mountain hiking.",
             "用户的朋友小王住在上海。", "小王搬到了北京。"]
    items = [ExtractedMemory(user_id="p7", memory=t, occurred_at=T0 + timedelta(days=i))
             for i, t in enumerate(texts)]
    for item in items:
        token = await pipeline.client.publish(MEMORY_ITEMS, item)
    await pipeline.client.wait_applied(token, timeout=60)
    before = await pipeline.deps.store.graph.export_cube("p7")
    updates_before = await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_UPDATES)
    for item in items:  # the very same events again: a replay or a redelivery
        token = await pipeline.client.publish(MEMORY_ITEMS, item)
    await pipeline.client.wait_applied(token, timeout=60)
    after = await pipeline.deps.store.graph.export_cube("p7")
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert sorted(after.edges, key=str) == sorted(before.edges, key=str)
    # the rewording merges; two homes without a word of change are a CONFLICT edge without a
    # model; a move said outright closes the old home (SUPERSEDES)
    assert len([n for n in after.nodes if n.metadata.status == "archived"]) == 1
    assert len([e for e in after.edges if e.type == "CONFLICT"]) == 1
    assert len([e for e in after.edges if e.type == "SUPERSEDES"]) == 1
    assert len([n for n in after.nodes if n.metadata.valid_until is not None]) == 1
    updates_after = await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_UPDATES)
    # the replay announces again what the first run announced, under the same ids
    assert len(updates_after) == 2 * len(updates_before)
    first = {u.event_id: (u.action, u.node_id, u.related_ids) for u in updates_before}
    again = {u.event_id: (u.action, u.node_id, u.related_ids) for u in updates_after}
    assert again == first


async def test_the_scripted_model_fuses_a_contradiction(pipeline_with_llm: Pipeline) -> None:
    pipeline = pipeline_with_llm
    server = pipeline.llm_server
    # judged and fused in one answer
    server.route("New memories were just extracted", Reply.json({"decisions": [
        {"item": 0, "candidate": 0, "relation": "contradictory", "reason": "moved",
         "memory": "Alice moved from Berlin to Lisbon.", "key": "Alice residence",
         "tags": ["residence"]}]}), where="system")
    server.handler = lambda request: Reply.json({"links": [], "concepts": [], "summaries": []})
    await say(pipeline, "p9", "Alice lives in Berlin.", "Alice moved to Lisbon.",
              tags=("alice",))
    nodes = await facts_by_status(pipeline, "p9")
    (active,), (archived,) = nodes["activated"], nodes["archived"]
    assert archived.memory == "Alice lives in Berlin."
    assert active.memory == "Alice moved from Berlin to Lisbon."
    assert set(active.metadata.tags) == {"residence", "alice"}
    assert active.metadata.updated_at == T0 + timedelta(days=1)
    assert active.metadata.created_at == T0
    vec = (await pipeline.deps.store.vectors.get("p9", [active.id]))[0].vector
    expected = (await pipeline.deps.embedder.embed_passages([active.memory]))[0]
    assert abs(sum(a * b for a, b in zip(vec, expected, strict=True)) - 1.0) < 1e-3
