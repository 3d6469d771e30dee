"""Conversations in, memories stored and announced — real broker, FalkorDB, Milvus Lite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from memstream.samples import DEMO_USER, sample_sessions
from memstream.topics.events import DeadLetter, ExtractedMemory, MemoryUpdate, ReorganizeEvent
from memstream.topics.registry import (
    CONVERSATIONS,
    DEAD_LETTER,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    REORGANIZE_HIGH,
)
from tests.fakes.openai_server import Reply
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import produce_raw, read_topic

START = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


async def publish_sample(pipeline: Pipeline, cube: str = DEMO_USER) -> None:
    for session, messages in sample_sessions(START).items():
        token = await pipeline.client.add_messages(cube, messages, session_id=session)
        await pipeline.client.wait_applied(token, timeout=60)


async def updates_of(pipeline: Pipeline, cube: str) -> list[MemoryUpdate]:
    events = await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_UPDATES)
    return [e for e in events if e.cube_id == cube]


async def test_three_sessions_become_announced_memories_in_graph_and_vectors(
    pipeline: Pipeline,
) -> None:
    await publish_sample(pipeline)

    items = [i for i in await read_topic(pipeline.settings, pipeline.bootstrap, MEMORY_ITEMS)
             if i.cube_id == DEMO_USER]
    assert all(isinstance(i, ExtractedMemory) for i in items)
    assert len(items) >= 6, [i.memory for i in items]
    assert {i.session_id for i in items} == {"trip-planning", "饮食习惯", "work"}
    assert all(i.sources and i.sources[0].message_id for i in items), "provenance on every item"

    announced = [u for u in await updates_of(pipeline, DEMO_USER)
                 if u.action in ("added", "merged")]
    assert sorted(u.node_id for u in announced) == sorted(i.id for i in items)  # one each

    graph, vectors = pipeline.deps.store.graph, pipeline.deps.store.vectors
    nodes = await graph.get_nodes(DEMO_USER, [i.id for i in items])
    assert len(nodes) == len(items)
    by_id = {i.id: i for i in items}
    for node in nodes:
        assert node.metadata.status == "activated"
        assert node.metadata.memory_type == by_id[node.id].memory_type
        assert node.metadata.tags == by_id[node.id].tags and node.metadata.tags
    texts = {n.memory: n.metadata.memory_type for n in nodes}
    assert any("shellfish" in t and kind == "UserMemory" for t, kind in texts.items()), texts
    assert any("flight" in t and kind == "LongTermMemory" for t, kind in texts.items()), texts
    assert any("绿茶" in t for t in texts), "the Chinese session is extracted in Chinese"
    assert not any("Sintra" in t and kind == "UserMemory" for t, kind in texts.items()), \
        "an assistant suggestion is never the user's preference"

    stored = await vectors.get(DEMO_USER, [n.id for n in nodes])
    assert {r.id for r in stored} == {n.id for n in nodes}
    assert all(len(r.vector) == pipeline.deps.embedder.dim for r in stored)
    working = await graph.all_of_type(DEMO_USER, "WorkingMemory")
    # every memory enters working memory (an episode, the chunk's raw turns, does not), and
    # past its capacity the oldest copies leave first
    facts = sorted((n for n in nodes if n.metadata.memory_type != "EpisodicMemory"),
                   key=lambda n: (n.metadata.updated_at, n.id))
    capacity = pipeline.settings.memory.working_memory_capacity
    assert {w.metadata.origin_id for w in working} == {n.id for n in facts[-capacity:]}

    reorganize = [e for e in await read_topic(pipeline.settings, pipeline.bootstrap,
                                              REORGANIZE_HIGH) if e.cube_id == DEMO_USER]
    assert all(isinstance(e, ReorganizeEvent) and e.op == "add" for e in reorganize)
    assert {n for e in reorganize for n in e.node_ids} == {n.id for n in facts}


NAMES = ["Ana", "Bruno", "Chloe", "Dmitri", "Esra", "Felix", "Gita", "Hugo", "Imke", "Jonas",
         "Kenji", "Lea", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar",
         "Vera", "Wen", "Xavier", "Yuki"]
THINGS = ["stamps", "vinyl records", "old maps", "seashells", "comic books", "coins",
          "fountain pens", "postcards", "teapots", "cameras", "board games", "bonsai trees",
          "chess sets", "kites", "clocks", "snow globes", "masks", "vintage radios", "model trains",
          "hats", "rocks", "buttons", "keys", "spoons", "candles"]
# 25 distinct facts (no two are judged duplicates or contradictions, so none merge)
FACTS = [f"{n} from the user's book club collects {t}." for n, t in zip(NAMES, THINGS,
                                                                       strict=True)]


async def test_working_memory_keeps_the_newest_twenty_per_cube(pipeline: Pipeline) -> None:
    client = pipeline.client
    other = await client.add_memories("bob", ["Bob likes rowing.", "Bob owns a red van.",
                                              "Bob's daughter studies law."])
    token = None
    for fact in FACTS:
        token = await client.add_memories("alice", [fact])
    assert token is not None
    await client.wait_applied(token, timeout=60)
    await client.wait_applied(other, timeout=60)

    working = await pipeline.deps.store.graph.all_of_type("alice", "WorkingMemory")
    assert len(working) == 20
    assert sorted(w.memory for w in working) == sorted(FACTS[5:])
    long_term = await pipeline.deps.store.graph.all_of_type("alice", "LongTermMemory")
    assert len(long_term) == 25
    assert len(await pipeline.deps.store.graph.all_of_type("bob", "WorkingMemory")) == 3
    # each evicted copy named once, on the added record of the memory that pushed it out
    updates = await updates_of(pipeline, "alice")
    assert not [u for u in updates if u.action == "removed"]
    gone = [i for u in updates if u.action == "added" for i in u.removed_ids]
    assert len(gone) == len(set(gone)) == 5
    assert await pipeline.deps.store.vectors.get("alice", gone) == []
    assert not await pipeline.deps.store.graph.get_nodes("alice", gone)


async def test_the_same_chunk_twice_leaves_the_same_nodes(pipeline: Pipeline) -> None:
    messages = sample_sessions(START)["trip-planning"]
    first = await pipeline.client.add_messages("carol", messages, session_id="s1")
    await pipeline.client.wait_applied(first, timeout=60)
    before = await pipeline.deps.store.graph.export_cube("carol")
    second = await pipeline.client.add_messages("carol", messages, session_id="s1")
    await pipeline.client.wait_applied(second, timeout=60)
    after = await pipeline.deps.store.graph.export_cube("carol")

    assert {n.id for n in after.nodes} == {n.id for n in before.nodes}
    assert len(after.nodes) == len(before.nodes) > 0
    assert await pipeline.deps.store.vectors.count("carol") == len(before.nodes)
    added = [u for u in await updates_of(pipeline, "carol") if u.action == "added"]
    # announced again under the same event id (consumers dedupe by id), never as a new one
    stored = {n.id for n in before.nodes if n.metadata.memory_type != "WorkingMemory"}
    assert len({u.event_id for u in added}) == len({u.node_id for u in added}) == len(stored)
    assert {u.node_id for u in added} == stored, "every memory announced, under one id"


async def test_bad_payloads_are_dead_lettered_and_the_next_event_is_processed(
    pipeline: Pipeline,
) -> None:
    topic = CONVERSATIONS.name(pipeline.settings)
    await produce_raw(pipeline.bootstrap, topic, b"this is { not json", key=b"dave")
    bad_schema = {"user_id": "dave", "kind": "chat", "messages": [
        {"id": "m1", "role": "user", "content": "hi", "timestamp": "yesterday"}]}
    await produce_raw(pipeline.bootstrap, topic, json.dumps(bad_schema).encode(), key=b"dave")
    good = await pipeline.client.add_messages(
        "dave", [{"role": "user", "content": "I really enjoy playing chess on Sundays.",
                  "timestamp": START + timedelta(hours=1)}])
    await pipeline.client.wait_applied(good, timeout=60)

    letters = [d for d in await read_topic(pipeline.settings, pipeline.bootstrap, DEAD_LETTER)
               if d.original_key == "dave"]
    assert all(isinstance(d, DeadLetter) for d in letters)
    assert len(letters) == 2
    not_json, wrong = letters
    assert not_json.stage == "extraction" and "Invalid JSON" in not_json.error
    assert not_json.payload == "this is { not json"
    assert "timestamp" in wrong.error and "datetime" in wrong.error
    assert json.loads(wrong.payload) == bad_schema
    assert wrong.original_topic == topic and wrong.original_offset is not None

    nodes = await pipeline.deps.store.graph.all_of_type("dave", "UserMemory")
    assert any("chess" in n.memory for n in nodes)


async def test_a_stage_failure_after_retries_is_dead_lettered(
    pipeline_with_llm: Pipeline,
) -> None:
    """The scripted model answers garbage every time: the chunk lands in dead-letter whole."""
    pipeline = pipeline_with_llm
    server = pipeline.llm_server
    server.handler = lambda request: Reply.text("I am not JSON at all, sorry.")
    token = await pipeline.client.add_messages(
        "erin", [{"role": "user", "content": "I moved to Porto last year."}])
    await pipeline.client.wait_applied(token, timeout=90)
    letters = [d for d in await read_topic(pipeline.settings, pipeline.bootstrap, DEAD_LETTER)
               if d.original_key == "erin"]
    assert len(letters) == 1
    assert letters[0].stage == "extraction" and letters[0].error_type == "LLMError"
    assert "Porto" in letters[0].payload
    assert await pipeline.deps.store.graph.all_of_type("erin", "LongTermMemory") == []
    # the stage retried (2 attempts) and the provider retried each (2 calls): 4 requests
    assert len(server.chat_requests) == 4


@pytest.mark.parametrize(("configured", "expected"), [(1, 1), (None, 2)])
async def test_a_worker_caps_its_process_blas_threads_as_configured(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, configured: int | None, expected: int
) -> None:
    # An idle OpenBLAS thread spins after every call and takes a core from the embedder.
    with threadpool_limits(limits=2, user_api="blas"):  # as a fresh process on two cores
        settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                     worker={"blas_threads": configured})
        async for _ in run_pipeline(settings):
            pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
            assert pools, "numpy ships a BLAS"
            threads = {p["filepath"]: p["num_threads"] for p in pools}
            assert set(threads.values()) == {expected}, threads
