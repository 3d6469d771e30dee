"""The optimizer agent — real broker and stores; rules and the scripted model."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import TopicPartition

from memstream.kafka.progress import Progress
from memstream.streams.reorganize.agent import Processor
from memstream.streams.worker import Worker
from memstream.topics.events import ExtractedMemory, ReorganizeEvent, WriteToken
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_ITEMS, MEMORY_UPDATES, REORGANIZE_HIGH, REORGANIZE_LOW
from tests.fakes.openai_server import Reply
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import read_topic

T0 = datetime(2026, 4, 2, 8, tzinfo=UTC)
TRIP = [
    ("The user booked a flight to Berlin for the client meeting.", ["flight", "berlin", "client"]),
    ("The user's flight to Berlin was delayed by three hours.", ["flight", "berlin", "delay"]),
    ("The user missed the 2 pm meeting with the client in Berlin because of the flight delay.",
     ["meeting", "client", "berlin"]),
]
SUBJECTS = json.loads((Path(__file__).parents[1] / "data" / "three_subjects.json")
                      .read_text(encoding="utf-8"))["subjects"]


@pytest_asyncio.fixture
async def unmerged(tmp_path: Path, kafka_broker: str, falkordb_uri: str,
                   ) -> AsyncIterator[Pipeline]:
    """Conflict detection off: the rules merge judge reads "delayed" as a change of state and
    would fuse the trip statements, which is beside the point of these optimizer tests."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 memory={"conflict_detection": False},
                                 # one window of event time: the tree is the `end`'s run
                                 reorganize={"optimize_interval_s": 86400})
    async for p in run_pipeline(settings):
        yield p


def processor(pipeline: Pipeline | Worker) -> Processor:
    worker = pipeline.worker if isinstance(pipeline, Pipeline) else pipeline
    assert worker.bound is not None
    proc = worker.bound.services["reorganize"]
    assert isinstance(proc, Processor)
    return proc


async def tell(pipeline: Pipeline, cube: str, items: list[tuple[str, list[str]]],
               session: str = "trip") -> list[str]:
    token = None
    for i, (text, tags) in enumerate(items):
        token = await pipeline.client.publish(MEMORY_ITEMS, ExtractedMemory(
            user_id=cube, memory=text, tags=tuple(tags), session_id=session,
            occurred_at=T0 + timedelta(hours=i)))
    assert token is not None
    await pipeline.client.wait_applied(token, timeout=60)
    return [n.id for n in await pipeline.deps.store.graph.all_of_type(cube, "LongTermMemory")]


async def settle(pipeline: Pipeline, cube: str) -> None:
    """Every reorganize event of the cube published so far is handled, then an `end`."""
    high = await pipeline.client.history(REORGANIZE_HIGH, cube_id=cube)
    progress = Progress(pipeline.settings, pipeline.bootstrap)
    try:
        token = await pipeline.client.publish(
            REORGANIZE_LOW, ReorganizeEvent(user_id=cube, op="end"))
        if high:  # the cube's high-priority partition is the end token's partition number
            tp = TopicPartition(REORGANIZE_HIGH.name(pipeline.settings), token.partition)
            end = await progress.end_offset(tp)
            await progress.wait_applied(
                WriteToken(topic=tp.topic, partition=tp.partition, offset=end - 1), timeout=90)
        await progress.wait_applied(token, timeout=90)
    finally:
        await progress.close()


def by_text(nodes: list[MemoryItem], fragment: str) -> MemoryItem:
    """The fact containing ``fragment`` (summary nodes quote their members)."""
    return next(n for n in nodes if fragment in n.memory and n.metadata.hierarchy_level == "fact"
                and n.metadata.type != "reasoning")


async def test_the_model_infers_one_reasoning_node_from_a_cause(
    pipeline_with_llm: Pipeline,
) -> None:
    pipeline = pipeline_with_llm
    server = pipeline.llm_server

    def organize(request: dict[str, Any]) -> Reply:
        """CAUSE for the delay/missed pair, pointing from the delay whichever side it is on,
        with the fact it implies; no other link, no concept."""
        user = request["messages"][-1]["content"]
        texts = dict(re.findall(r"^\[(\d+)\][^\n]*\n(?:  (?!text:)[^\n]*\n)*  text: ([^\n]*)",
                                user, re.M))
        links = []
        for n, a, b in re.findall(r"^pair (\d+): \[(\d+)\] \(new\) with \[(\d+)\]", user,
                                  re.M):
            first, second = texts[a], texts[b]
            if {"delayed by" in first, "delayed by" in second} == {True, False} \
                    and "missed the" in first + second:
                links.append({
                    "pair": int(n), "relation": "CAUSE",
                    "direction": "new_to_old" if "delayed by" in first else "old_to_new",
                    "reason": "the delay made the user miss the meeting",
                    "inferred": "It can be inferred that the user's client relationship in "
                                "Berlin may need repair after the missed meeting."})
        return Reply.json({"links": links, "concepts": []})

    server.route("New memories were just extracted", Reply.json({"decisions": []}))
    server.route("New memories were just stored", organize)
    server.handler = lambda request: Reply.json({"summaries": []})
    await tell(pipeline, "trip2", TRIP)
    await settle(pipeline, "trip2")
    graph = pipeline.deps.store.graph
    nodes = await graph.all_of_type("trip2", "LongTermMemory")
    delay, missed = by_text(nodes, "delayed"), by_text(nodes, "missed")
    assert await graph.edge_exists("trip2", delay.id, missed.id, "CAUSE")
    (reasoning,) = [n for n in nodes if n.metadata.type == "reasoning"]
    assert reasoning.memory.startswith("It can be inferred that")
    targets = {e.target for e in await graph.edges_of("trip2", reasoning.id,
                                                      ["INFERRED_FROM"], "out")}
    assert targets == {delay.id, missed.id}


async def test_optimization_groups_sixty_memories_by_subject(unmerged: Pipeline) -> None:
    pipeline = unmerged
    subject_of: dict[str, str] = {}
    token = None
    for subject, texts in SUBJECTS.items():
        for i, text in enumerate(texts):
            subject_of[text] = subject
            token = await pipeline.client.publish(MEMORY_ITEMS, ExtractedMemory(
                user_id="tree", memory=text, occurred_at=T0 + timedelta(minutes=len(subject_of)),
                index=i))
    assert token is not None
    await pipeline.client.wait_applied(token, timeout=120)
    await settle(pipeline, "tree")

    graph = pipeline.deps.store.graph
    nodes = await graph.all_of_type("tree", "LongTermMemory")
    facts = {n.id: n for n in nodes if n.metadata.hierarchy_level == "fact"}
    concepts = [n for n in nodes if n.metadata.hierarchy_level == "concept"]
    topics = [n for n in nodes if n.metadata.hierarchy_level == "topic"]
    assert concepts, "summary nodes were written"
    placed: Counter[str] = Counter()
    majority_total = members_total = 0
    for concept in concepts:
        members = [facts[c.id] for c in await graph.children("tree", concept.id)
                   if c.id in facts]
        assert len(members) >= 2
        subjects = Counter(subject_of[m.memory] for m in members if m.memory in subject_of)
        top, count = subjects.most_common(1)[0]
        assert count / len(members) >= 0.75, (concept.memory, subjects)
        majority_total += count
        members_total += len(members)
        placed[top] += count
    assert majority_total / members_total >= 0.9  # purity over all summaries
    for subject in SUBJECTS:
        assert placed[subject] >= 0.8 * len(SUBJECTS[subject]), placed
    for topic in topics:  # at most topic → concept → fact
        children = await graph.children("tree", topic.id)
        assert children and all(c.metadata.hierarchy_level == "concept" for c in children)
    for concept in concepts:
        children = await graph.children("tree", concept.id)
        assert all(c.metadata.hierarchy_level == "fact" for c in children)
    # a second run over the same members writes nothing new
    before = await graph.export_cube("tree")
    pipeline.worker.bound.services["reorganize"].scopes.mark(  # type: ignore[union-attr]
        ("tree", "tree", "LongTermMemory"))
    await settle(pipeline, "tree")
    after = await graph.export_cube("tree")
    assert len(after.nodes) == len(before.nodes) and len(after.edges) == len(before.edges)


async def test_a_new_add_overtakes_a_thousand_queued_low_priority_events(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (node_id,) = await tell(pipeline, "busy", TRIP[:1])
    await pipeline.worker.stop()  # queue everything while no worker runs
    client = pipeline.client
    for i in range(1000):
        await client.publish(REORGANIZE_LOW, ReorganizeEvent(user_id=f"low{i % 7}", op="end"))
    urgent = ReorganizeEvent(user_id="busy", op="add", node_ids=(node_id,))
    token = await client.publish(REORGANIZE_HIGH, urgent)
    handled: list[str] = []  # every event the new worker's optimizer handles, in order
    built = Processor.__init__

    def observed(self: Processor, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        self.observers.append(lambda e: handled.append(f"{e.op}:{e.event_id}"))

    monkeypatch.setattr(Processor, "__init__", observed)
    worker = Worker(pipeline.settings, pipeline.bootstrap, pipeline.settings.graph.uri or "")
    await worker.start()
    try:
        await client.wait_applied(token, timeout=60)
        position = handled.index(f"add:{urgent.event_id}")
        batch = pipeline.settings.worker.low_priority_batch
        assert position <= 2 * batch, f"the add waited behind {position} events"
    finally:
        await worker.stop()


async def test_an_add_published_while_low_priority_work_runs_goes_next(
    pipeline: Pipeline,
) -> None:
    """The urgent event arrives while the optimizer is busy with less urgent events: those
    topics are paused until it is delivered, so it waits behind at most the batch in progress
    and the one already taken."""
    (node_id,) = await tell(pipeline, "busy", TRIP[:1])
    handled: list[str] = []
    processor(pipeline).observers.append(lambda e: handled.append(f"{e.op}:{e.event_id}"))
    client = pipeline.client
    lows = [ReorganizeEvent(user_id=f"low{i % 7}", op="end") for i in range(3000)]
    await asyncio.gather(*(client.publish(REORGANIZE_LOW, e) for e in lows))
    while len(handled) < 50:  # the optimizer is working through them
        await asyncio.sleep(0.01)
    urgent = ReorganizeEvent(user_id="busy", op="add", node_ids=(node_id,))
    token = await client.publish(REORGANIZE_HIGH, urgent)
    published_at = len(handled)
    await client.wait_applied(token, timeout=60)
    waited = handled.index(f"add:{urgent.event_id}") - published_at
    assert waited < len(lows) - published_at, "the low-priority flood was done first"
    batch = pipeline.settings.worker.low_priority_batch
    assert waited <= 3 * batch, f"the add waited behind {waited} events published before it"


async def test_replaying_the_reorganize_topic_changes_nothing(unmerged: Pipeline) -> None:
    pipeline = unmerged
    await tell(pipeline, "replay", TRIP)
    await settle(pipeline, "replay")
    graph = pipeline.deps.store.graph
    before = await graph.export_cube("replay")
    updates_before = {u.event_id for u in await read_topic(pipeline.settings, pipeline.bootstrap,
                                                            MEMORY_UPDATES)}
    token = None
    for event in await read_topic(pipeline.settings, pipeline.bootstrap, REORGANIZE_HIGH):
        if event.cube_id == "replay":
            token = await pipeline.client.publish(REORGANIZE_HIGH, event)
    assert token is not None
    await pipeline.client.wait_applied(token, timeout=60)
    await settle(pipeline, "replay")
    after = await graph.export_cube("replay")
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert sorted(after.edges, key=str) == sorted(before.edges, key=str)
    # announced again under the same ids (consumers dedupe by id): nothing new
    assert {u.event_id for u in await read_topic(pipeline.settings, pipeline.bootstrap,
                                                 MEMORY_UPDATES)} == updates_before
