"""Replay from the retained log — real broker, FalkorDB and Milvus Lite, a worker in-process.

A cube is fed through the live pipeline (chat chunks, direct adds, an update and a delete);
its views are then wiped and rebuilt with ``replay``, and must come back as the live run
left them: the same node ids, texts, statuses and metadata, the same vectors, the same
working memory, the same edges. A second replay adds nothing, other cubes are untouched.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import TopicPartition

from memstream.archive.archiver import archive_once
from memstream.kafka.progress import Progress
from memstream.sinks.dump import export_cube
from memstream.streams.replay import logic as replay_logic
from memstream.streams.replay.logic import progress_of
from memstream.streams.worker import replay_stages
from memstream.topics.events import (
    ConversationChunk,
    DeleteNodes,
    DropViews,
    MemoryUpdate,
    Message,
    PromoteCube,
    ReplayCube,
    UpdateNode,
    WriteToken,
)
from memstream.topics.models import CubeGraph
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES, REORGANIZE_HIGH
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
TRIP = [
    ("The user booked a flight to Berlin for the client meeting.", ["flight", "berlin", "client"]),
    ("The user's flight to Berlin was delayed by three hours.", ["flight", "berlin", "delay"]),
    ("The user missed the 2 pm meeting with the client in Berlin because of the flight delay.",
     ["meeting", "client", "berlin"]),
]
# What the fed cube holds besides nodes: provenance, a merge and the optimizer's links.
EDGE_TYPES = {"EXTRACTED_FROM", "MERGED_TO", "FOLLOWS", "RELATE_TO", "CAUSE", "CONFLICT",
              "SUPERSEDES"}
RELATIONS = {"RELATE_TO", "CAUSE", "CONDITION", "CONFLICT"}




def chat(day: int, *lines: tuple[str, str]) -> list[dict[str, str]]:
    at = T0 + timedelta(days=day)
    return [{"role": role, "content": text,
             "timestamp": (at + timedelta(minutes=i)).isoformat()}
            for i, (role, text) in enumerate(lines)]


async def feed(p: Pipeline, cube: str, name: str) -> None:
    """What one user tells the pipeline over a few days, then an update and a delete."""
    c = p.client
    await c.add_messages(cube, chat(
        0, ("user", f"My name is {name} and I live in Porto."),
        ("assistant", "Nice to meet you!"),
        ("user", "I'm allergic to peanuts, so I never eat satay.")), session_id="s1")
    chats = await c.add_messages(cube, chat(
        1, ("user", "I started learning the cello last month."),
        ("user", "My sister Ana is a nurse in Lisbon.")), session_id="s2")
    token = await c.add_memories(cube, ["Prefers tea to coffee in the morning.",
                                        "Runs five kilometres every Sunday."])
    await c.wait_applied(chats, timeout=120)
    await c.wait_applied(token, timeout=120)
    # Related facts (CAUSE, RELATE_TO, FOLLOWS), a move said outright (it closes the old
    # home: SUPERSEDES) and a rewording that archives a node (MERGED_TO).
    await c.add_memories(cube, [{"memory": text, "tags": tags} for text, tags in TRIP],
                         session_id="trip")
    await c.add_memories(cube, [f"{name}'s friend Alice lives in Berlin."])
    await c.add_memories(cube, [f"{name}'s friend Alice moved to Lisbon."])
    await c.add_memories(cube, [f"{name} loves hiking in the mountains."])
    token = await c.add_memories(cube, [f"{name} really enjoys mountain hiking."])
    await c.wait_applied(token, timeout=120)
    await settle(p, cube)
    nodes = await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    nodes += await p.deps.store.graph.all_of_type(cube, "UserMemory")
    cello = next(n for n in nodes if "cello" in n.memory)
    tea = next(n for n in nodes if "tea" in n.memory)
    await c.command(UpdateNode(user_id=cube, node_id=cello.id, tags=("music", "cello"),
                               occurred_at=T0 + timedelta(days=2)))
    token = await c.command(DeleteNodes(user_id=cube, node_ids=(tea.id,),
                                        occurred_at=T0 + timedelta(days=3)))
    await c.wait_applied(token, timeout=60)
    assert await c.command_failure(token) is None
    await settle(p, cube)


async def settle(p: Pipeline, cube: str) -> None:
    """The optimizer has handled every add/remove event of the cube published so far."""
    events = await p.client.history(REORGANIZE_HIGH, cube_id=cube)
    if not events:
        return
    progress = Progress(p.settings, p.bootstrap)
    try:
        for partition in range(p.settings.kafka.partitions):
            tp = TopicPartition(REORGANIZE_HIGH.name(p.settings), partition)
            end = await progress.end_offset(tp)
            if end:
                await progress.wait_applied(WriteToken(topic=tp.topic, partition=partition,
                                                       offset=end - 1), timeout=120)
    finally:
        await progress.close()


async def replay(p: Pipeline, cube: str, **kw: object) -> list[MemoryUpdate]:
    """Run a replay command through the worker; returns its progress announcements."""
    cmd = ReplayCube(user_id=cube, cube_id=cube, **kw)  # type: ignore[arg-type]
    token = await p.client.command(cmd)
    await p.client.wait_applied(token, timeout=300)
    assert await p.client.command_failure(token) is None
    return [u for u in await p.client.history(MEMORY_UPDATES, cube_id=cube)
            if isinstance(u, MemoryUpdate) and u.cause_event_id == cmd.event_id]


def view(cube: CubeGraph) -> tuple[dict[str, str], dict[str, tuple[float, ...]],
                                   set[tuple[str, str, str]]]:
    # everything but usage, which searches record (a replay has no searches to repeat)
    nodes = {n.id: n.model_dump_json(exclude={"metadata": {"usage"}}) for n in cube.nodes}
    vectors = {k: tuple(round(x, 6) for x in v) for k, v in cube.vectors.items()}
    edges = {(e.source, e.target, e.type) for e in cube.edges}
    return nodes, vectors, edges


async def test_replay_rebuilds_wiped_stores_exactly_and_twice_adds_nothing(
    live: Pipeline,
) -> None:
    p = live
    await feed(p, "ines", "Ines")
    await feed(p, "tomas", "Tomas")
    before = await export_cube(p.deps.store, "ines")
    other = await export_cube(p.deps.store, "tomas")
    working = [(n.id, n.memory)
               for n in await p.deps.store.graph.all_of_type("ines", "WorkingMemory")]
    assert len(before.nodes) >= 10 and working
    assert {n.metadata.status for n in before.nodes} == {"activated", "archived"}

    # Wipe the views, as after a lost disk: nothing of the cube is left.
    token = await p.client.command(DropViews(user_id="ines"))
    await p.client.wait_applied(token, timeout=60)
    assert not (await export_cube(p.deps.store, "ines")).nodes

    updates = await replay(p, "ines")
    after = await export_cube(p.deps.store, "ines")
    nodes_b, vectors_b, edges_b = view(before)
    nodes_a, vectors_a, edges_a = view(after)
    assert nodes_a.keys() == nodes_b.keys()
    for node_id, dumped in nodes_b.items():  # ids, texts, statuses, metadata: all of it
        assert nodes_a[node_id] == dumped
    assert vectors_a == vectors_b
    assert {e[2] for e in edges_b} == EDGE_TYPES
    assert edges_a == edges_b, (
        f"missing after replay: {sorted(edges_b - edges_a)}; new: {sorted(edges_a - edges_b)}")
    assert [(n.id, n.memory) for n in
            await p.deps.store.graph.all_of_type("ines", "WorkingMemory")] == working
    done = [progress_of(u) for u in updates]
    assert done and done[-1] is not None and done[-1][0] == done[-1][1] > 0

    # A second replay over the rebuilt stores adds nothing and changes nothing.
    await replay(p, "ines")
    again = await export_cube(p.deps.store, "ines")
    assert view(again) == view(after)
    # The other cube was never touched.
    assert view(await export_cube(p.deps.store, "tomas")) == view(other)


async def test_replay_reads_the_archived_and_the_live_log_as_one(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str,
) -> None:
    """Most of the cube's records moved off the broker into segment files, a few added after
    stay on it: a replay over wiped stores rebuilds exactly what was there."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"optimize_interval_s": 3600},
                                 archive={"min_records": 1})
    async for p in run_pipeline(settings):
        await feed(p, "nadia", "Nadia")
        moved = await archive_once(p.settings, p.bootstrap, after_s=0)
        assert moved.archived.get(MEMORY_ITEMS.name(p.settings), 0) >= 10, moved
        token = await p.client.add_memories("nadia", ["Nadia keeps bees on her roof."])
        await p.client.wait_applied(token, timeout=120)
        await settle(p, "nadia")
        before = await export_cube(p.deps.store, "nadia")
        assert any("bees" in n.memory for n in before.nodes)  # the live part
        token = await p.client.command(DropViews(user_id="nadia"))
        await p.client.wait_applied(token, timeout=60)
        assert not (await export_cube(p.deps.store, "nadia")).nodes

        await replay(p, "nadia")
        assert view(await export_cube(p.deps.store, "nadia")) == view(before)


async def test_replay_from_a_point_keeps_the_views_and_applies_what_follows(
    live: Pipeline,
) -> None:
    p = live
    await feed(p, "lea", "Lea")
    before = view(await export_cube(p.deps.store, "lea"))
    [update] = [u for u in await replay(p, "lea", from_offset=10**9)
                if progress_of(u) is not None and "(done)" in u.reason]
    assert progress_of(update) == (0, 0)  # nothing after that offset, nothing dropped
    assert view(await export_cube(p.deps.store, "lea")) == before


def shadow_model(server: ScriptedOpenAI) -> None:
    """The second model: one memory per chunk, written its own way; every judge says
    'independent', relations and concepts are declined."""

    def extraction(request: dict[str, Any]) -> dict[str, Any]:
        said = re.findall(r"My (\w+)|I'm (\w+)|I (\w+)", last_user_message(request))
        words = "-".join(w for match in said for w in match if w) or "nothing"
        return {"memories": [{"value": f"Shadow model notes: the user mentioned {words}.",
                              "memory_type": "UserMemory", "tags": ["shadow", words]}],
                "summary": "shadow"}

    server.route("A newly extracted memory resembles",
                 Reply.json({"relation": "independent", "reason": "different facts"}))
    server.route("Below is a stretch of conversation", extraction)
    server.handler = lambda request: {"relation": "NONE", "create": False, "fact": None}


async def search_ids(p: Pipeline, cube: str, query: str) -> set[str]:
    return {hit.item.id for hit in await p.client.search(cube, query, top_k=20)}


async def test_shadow_replay_with_another_model_then_promote_switches_search(
    live: Pipeline, scripted_openai: ScriptedOpenAI,
) -> None:
    p = live
    await feed(p, "rosa", "Rosa")
    original = view(await export_cube(p.deps.store, "rosa"))
    shadow_model(scripted_openai)

    await replay(p, "rosa", shadow="rosa-v2", llm_base_url=scripted_openai.base_url,
                 llm_model="shadow-model")
    shadow = await export_cube(p.deps.store, "rosa-v2")
    notes = {n.id for n in shadow.nodes if n.memory.startswith("Shadow model notes")
             and n.metadata.memory_type == "UserMemory"}
    chunks = await p.client.history(CONVERSATIONS, cube_id="rosa")
    assert len(notes) == len(chunks) >= 2  # one per chat chunk, from the second model
    assert notes.isdisjoint(original[0])
    # the memories added directly (not extracted) are carried over as they were
    assert any("five kilometres" in n.memory for n in shadow.nodes)
    assert any("Shadow model" in str(r.get("model", "")) or r.get("model") == "shadow-model"
               for r in scripted_openai.chat_requests)
    # the shadow's extraction is in the log under its own cube, so it replays too
    assert {i.id for i in await p.client.history(MEMORY_ITEMS, cube_id="rosa-v2")} >= notes
    assert view(await export_cube(p.deps.store, "rosa")) == original  # untouched

    before = await search_ids(p, "rosa", "what did the user mention")
    assert before and before <= set(original[0])
    token = await p.client.command(PromoteCube(user_id="rosa", view="rosa-v2"))
    await p.client.wait_applied(token, timeout=60)
    assert await p.client.command_failure(token) is None
    after = await search_ids(p, "rosa", "what did the user mention")
    assert after and after <= {n.id for n in shadow.nodes} and after & notes
    assert view(await export_cube(p.deps.store, "rosa")) == original  # kept until dropped

    token = await p.client.command(DropViews(user_id="rosa"))
    await p.client.wait_applied(token, timeout=60)
    assert not (await export_cube(p.deps.store, "rosa")).nodes
    assert await search_ids(p, "rosa", "what did the user mention") == after

    token = await p.client.command(PromoteCube(user_id="rosa", view="nobody"))
    await p.client.wait_applied(token, timeout=60)
    assert "cube 'nobody' has no memories" in (await p.client.command_failure(token) or "")


async def test_an_interrupted_replay_resumes_where_it_stopped(
    live: Pipeline, monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = live
    await feed(p, "noor", "Noor")
    before = view(await export_cube(p.deps.store, "noor"))
    token = await p.client.command(DropViews(user_id="noor"))
    await p.client.wait_applied(token, timeout=60)

    monkeypatch.setattr(replay_logic, "BATCH", 3)  # several steps, so there is a middle
    applied: list[int] = []
    real_apply = replay_logic._apply

    async def crash_after_three(step: list[Any], *args: Any) -> None:
        if len(applied) == 3:
            raise ConnectionError("the worker stopped")
        await real_apply(step, *args)
        applied.append(len(step))

    monkeypatch.setattr(replay_logic, "_apply", crash_after_three)
    cmd = ReplayCube(user_id="noor")
    with pytest.raises(ConnectionError):
        await replay_logic.replay_cube(cmd, p.deps, replay_stages())
    checkpoint = replay_logic.Checkpoint.load(p.deps, "noor", cmd.event_id)
    assert checkpoint is not None and checkpoint.applied == sum(applied) > 0
    assert (await export_cube(p.deps.store, "noor")).nodes  # part of the cube is back

    monkeypatch.setattr(replay_logic, "_apply", real_apply)
    resumed: list[int] = []

    async def counting(step: list[Any], *args: Any) -> None:
        await real_apply(step, *args)
        resumed.append(len(step))

    monkeypatch.setattr(replay_logic, "_apply", counting)
    await replay_logic.replay_cube(cmd, p.deps, replay_stages())  # delivered again
    total = sum(applied) + sum(resumed)
    assert resumed and sum(resumed) < total  # only what was left
    after = view(await export_cube(p.deps.store, "noor"))
    assert after[:2] == before[:2]  # nodes and vectors
    # every edge, relations included: the optimizer judges a node against the facts the log
    # had before it (``reorganize/asof.py``), not against what a step happened to store
    assert {e for e in before[2] if e[2] in RELATIONS}, "the input makes no relation edge"
    assert after[2] == before[2], (sorted(after[2] - before[2]), sorted(before[2] - after[2]))
    assert replay_logic.Checkpoint.load(p.deps, "noor", cmd.event_id) is None


@pytest_asyncio.fixture
async def windowed(tmp_path: Path, kafka_broker: str,
                   falkordb_uri: str) -> AsyncIterator[Pipeline]:
    """The pipeline with structure optimization every hour of the log's event time."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"optimize_interval_s": 3600})
    async for p in run_pipeline(settings):
        yield p


async def test_replay_makes_the_live_runs_concept_summaries_again(windowed: Pipeline) -> None:
    """Chats an hour apart cross the optimizer's windows of event time: the live run makes
    concept summaries (PARENT edges) as each window is entered, and a replay, which groups
    the facts into other steps, makes the same ones at the same points."""
    p = windowed
    tokens = []
    for hour, (dish, place) in enumerate([("ramen", "Tokyo"), ("pho", "Hanoi"),
                                          ("paella", "Valencia"), ("tagine", "Marrakesh")]):
        at = T0 + timedelta(hours=hour)
        said = [f"I cooked {dish} at home on Friday.", f"I learned to cook {dish} in {place}.",
                f"My favourite dish is {dish}."]
        # the chunk's event time is fixed, as when an application publishes a recorded chat
        tokens.append(await p.client.publish(CONVERSATIONS, ConversationChunk(
            event_id=f"hana-{hour}", user_id="hana", session_id=f"h{hour}",
            occurred_at=at + timedelta(minutes=5),
            messages=tuple(Message(id=f"hana-{hour}-{i}", role="user", content=text,
                                   timestamp=at + timedelta(minutes=i))
                           for i, text in enumerate(said)))))
    for token in tokens:
        await p.client.wait_applied(token, timeout=120)
    await settle(p, "hana")
    before = view(await export_cube(p.deps.store, "hana"))
    assert any(e[2] == "PARENT" for e in before[2]), "no window made a summary"
    await p.client.wait_applied(await p.client.command(DropViews(user_id="hana")), timeout=60)
    assert not (await export_cube(p.deps.store, "hana")).nodes
    await replay(p, "hana")
    after = view(await export_cube(p.deps.store, "hana"))
    assert after[0] == before[0]
    assert after[1].keys() == before[1].keys()
    assert after[2] == before[2], (sorted(after[2] - before[2]), sorted(before[2] - after[2]))


async def test_a_shadow_model_without_an_endpoint_is_refused_not_ignored(live: Pipeline) -> None:
    """The worker has no model endpoint (the rules stand-in): a shadow replay asking for a
    model fails naming why, instead of re-extracting with the stand-in as if it were it."""
    p = live
    token = await p.client.add_memories("uma", ["Uma plays the oboe."])
    await p.client.wait_applied(token, timeout=60)
    cmd = ReplayCube(user_id="uma", cube_id="uma", shadow="uma-v2", llm_model="gpt-x")
    token = await p.client.command(cmd)
    await p.client.wait_applied(token, timeout=120)
    failure = await p.client.command_failure(token) or ""
    assert "model 'gpt-x' needs an OpenAI-compatible endpoint" in failure, failure
    assert not (await export_cube(p.deps.store, "uma-v2")).nodes
