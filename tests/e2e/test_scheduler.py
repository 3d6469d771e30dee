"""The memory scheduler over real topics and stores: label routing, retrieval decisions,
working-memory replacement through the sink, per-cube order and state, activation memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from memstream.client.client import MemoryClient
from memstream.kafka.admin import topic_offsets
from memstream.streams.worker import Worker
from memstream.topics.context import render_context
from memstream.topics.events import (
    ActivationMemory,
    MemoryUpdate,
    ReplaceWorkingMemory,
    ScheduleMessage,
    WorkingMemoryReplacement,
    WriteToken,
)
from memstream.topics.ids import derived_event_id
from memstream.topics.models import utcnow
from memstream.topics.registry import (
    ACTIVATION_MEMORY,
    DEAD_LETTER,
    MEMORY_UPDATES,
    SCHEDULE_ADD,
    SCHEDULE_ANSWER,
    SCHEDULE_QUERY,
    WORKING_MEMORY,
    TopicSpec,
)
from memstream.topics.settings import Settings
from tests.support.pipeline import Pipeline, pipeline_settings
from tests.support.topics import produce_raw, read_topic, topic_config

DIET = [
    "The user is vegetarian and avoids meat.",
    "The user loves spicy Sichuan tofu.",
]
TRAVEL = [
    "The user's flight to Lisbon leaves on May 14.",
    "The user booked a hotel in Alfama for the Lisbon trip.",
]


class ShiftedClock:
    """The wall clock plus an offset a test can advance (the scheduler's injected clock)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


async def start_pipeline(settings: Settings, clock: ShiftedClock | None = None,
                         llm_server: Any = None) -> Pipeline:
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap is not None and settings.graph.uri is not None
    worker = Worker(settings, bootstrap, settings.graph.uri, clock=clock or utcnow)
    await worker.start()
    client = MemoryClient(settings, bootstrap)
    await client.start()
    return Pipeline(settings, bootstrap, worker, client, llm_server)


async def stop_pipeline(p: Pipeline) -> None:
    await p.client.close()
    await p.worker.stop()


@pytest_asyncio.fixture(scope="module")
async def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest_asyncio.fixture(scope="module")
async def sched(tmp_path_factory: pytest.TempPathFactory, kafka_broker: str,
                falkordb_uri: str, clock: ShiftedClock) -> AsyncIterator[Pipeline]:
    """One rules-mode pipeline for the module (each test uses its own cubes)."""
    settings = pipeline_settings(
        tmp_path_factory.mktemp("sched"), kafka_broker, falkordb_uri,
        memory={"conflict_detection": False, "working_memory_capacity": 6},
        scheduler={"retrieval_interval_s": 600, "activation_interval_s": 0.3},
    )
    p = await start_pipeline(settings, clock)
    try:
        yield p
    finally:
        await stop_pipeline(p)


# --------------------------------------------------------------------------- helpers


async def remember(p: Pipeline, cube: str, memories: list[Any]) -> None:
    token = await p.client.add_memories(cube, memories)
    await p.client.wait_applied(token, timeout=60)


async def ask(p: Pipeline, cube: str, text: str, label: str = "query",
              spec: TopicSpec = SCHEDULE_QUERY) -> tuple[ScheduleMessage, WriteToken]:
    msg = ScheduleMessage(user_id=cube, label=label, content=text)
    return msg, await p.client.publish(spec, msg)


async def poll(fetch: Any, timeout: float = 30.0, what: str = "event") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await fetch()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        await asyncio.sleep(0.1)


async def replacement_for(p: Pipeline, msg: ScheduleMessage,
                          timeout: float = 30.0) -> WorkingMemoryReplacement:
    """The working-memory event a query produced, once the sink has applied it."""
    wanted = derived_event_id("working-memory", msg.event_id)

    async def fetch() -> list[Any]:
        return [e for e in await read_topic(p.settings, p.bootstrap, WORKING_MEMORY)
                if e.event_id == wanted]

    (event,) = await poll(fetch, timeout, f"working-memory event for {msg.content!r}")

    async def applied() -> list[MemoryUpdate]:
        return [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
                if u.action == "working_memory_replaced" and u.cause_event_id == wanted]

    await poll(applied, timeout, "working_memory_replaced announcement")
    assert isinstance(event, WorkingMemoryReplacement)
    return event


async def working_texts(p: Pipeline, cube: str) -> list[str]:
    return [n.memory for n in await p.client.working_memory(cube)]


# --------------------------------------------------------------------------- rules mode


async def test_a_cooking_question_ranks_diet_memories_above_travel(sched: Pipeline) -> None:
    await remember(sched, "cook", [*TRAVEL, *DIET])
    msg, _ = await ask(sched, "cook", "what should I cook tonight?")
    event = await replacement_for(sched, msg)
    texts = [i.memory for i in event.items]
    assert set(DIET) <= set(texts), texts
    last_diet = max(texts.index(t) for t in DIET)
    assert all(texts.index(t) > last_diet for t in TRAVEL if t in texts), texts
    # the sink applied it: working memory reads back in the replacement's order
    assert await working_texts(sched, "cook") == texts
    assert event.queries == ("what should I cook tonight?",)


async def test_near_duplicates_short_items_and_repeats_never_reach_working_memory(
    sched: Pipeline,
) -> None:
    dinners = [
        "The user cooks pasta with garlic for dinner on Fridays.",
        "The user's favourite dinner is a vegetable curry.",
        "The user likes to cook risotto for dinner guests.",
        "The user cooks with fresh basil from the balcony.",
        "The user had dinner at a ramen bar last week.",
        "The user wants to learn to cook Thai green curry.",
        "The user cooks a big pot of soup every Sunday.",
    ]
    variants = [
        "The user is vegetarian and avoids meat at dinner.",
        "The user is a vegetarian who does not eat meat at dinner.",
        "The user doesn't eat meat at dinner; they are vegetarian.",
    ]
    await remember(sched, "dups", dinners)
    await remember(sched, "dups", [*variants, "Tofu.", "Kale!", dinners[0]])
    before = await working_texts(sched, "dups")
    assert "Tofu." in before and sum(v in before for v in variants) == 3  # all in, capacity 6

    msg, _ = await ask(sched, "dups", "what should I cook for dinner with friends?")
    event = await replacement_for(sched, msg)
    texts = [i.memory for i in event.items]
    after = await working_texts(sched, "dups")
    assert after == texts
    assert len(texts) == 6  # more related memories than room: cut to the capacity
    assert "Tofu." not in texts and "Kale!" not in texts
    assert sum(v in texts for v in variants) <= 1  # rewordings are one memory
    assert len(set(texts)) == len(texts)
    assert "near-duplicate" in event.reason and "over capacity" in event.reason


async def test_labels_are_routed_and_bad_messages_dead_lettered(sched: Pipeline) -> None:
    bad = [
        (ScheduleMessage(user_id="lbl", label="bogus", content="hi"), SCHEDULE_QUERY),
        (ScheduleMessage(user_id="lbl", label="answer", content="hi"), SCHEDULE_QUERY),
        (ScheduleMessage(user_id="lbl", label="query", content="   "), SCHEDULE_QUERY),
        (ScheduleMessage(user_id="lbl", label="query", content="hi"), SCHEDULE_ANSWER),
    ]
    tokens = [await sched.client.publish(spec, msg) for msg, spec in bad]
    await produce_raw(sched.bootstrap, SCHEDULE_ADD.name(sched.settings), b"not json", b"lbl")
    await remember(sched, "lbl", DIET)
    good, _ = await ask(sched, "lbl", "what should I cook tonight?")
    assert (await replacement_for(sched, good)).items  # the worker kept going
    errors = [await sched.client.command_failure(t) for t in tokens]
    assert errors[0] is not None and "unknown schedule label 'bogus'" in errors[0]
    assert errors[1] is not None and "label 'answer' arrived on" in errors[1]
    assert "carries 'query' messages" in errors[1]
    assert errors[2] is not None and "needs content" in errors[2]
    assert errors[3] is not None and "label 'query' arrived on" in errors[3]
    letters = [d for d in await read_topic(sched.settings, sched.bootstrap, DEAD_LETTER)
               if d.stage == "scheduler" and d.payload == "not json"]
    assert letters and "JSON" in letters[0].error


async def test_add_messages_announce_the_listed_long_term_memories(sched: Pipeline) -> None:
    await remember(sched, "added", DIET)
    long_term = await sched.client.get_all("added", memory_type="LongTermMemory")
    copies = await sched.client.working_memory("added")
    ids = [n.id for n in long_term]
    msg = ScheduleMessage(user_id="added", label="add",
                          memory_ids=(*ids, copies[0].id, "no-such-id"))
    await sched.client.wait_applied(await sched.client.publish(SCHEDULE_ADD, msg))
    announced = [u for u in await read_topic(sched.settings, sched.bootstrap, MEMORY_UPDATES)
                 if u.cause_event_id == msg.event_id]
    assert sorted(u.node_id for u in announced) == sorted(ids)
    assert all(u.action == "added" and u.stage == "scheduler" and u.node for u in announced)


async def test_replace_working_memory_command_and_replayed_replacements_are_idempotent(
    sched: Pipeline,
) -> None:
    await remember(sched, "cmd", [*DIET, *TRAVEL])
    by_text = {n.memory: n.id for n in await sched.client.get_all(
        "cmd", memory_type="LongTermMemory")}
    wanted = (by_text[TRAVEL[1]], by_text[DIET[0]])
    cmd = ReplaceWorkingMemory(user_id="cmd", node_ids=wanted)
    await sched.client.wait_applied(await sched.client.command(cmd))
    assert await working_texts(sched, "cmd") == [TRAVEL[1], DIET[0]]
    snapshot = await sched.client.working_memory("cmd")
    assert [n.metadata.origin_id for n in snapshot] == list(wanted)
    await sched.client.wait_applied(await sched.client.command(cmd))  # redelivered
    assert await sched.client.working_memory("cmd") == snapshot
    updates = [u for u in await read_topic(sched.settings, sched.bootstrap, MEMORY_UPDATES)
               if u.cause_event_id == cmd.event_id]
    assert {u.action for u in updates} == {"working_memory_replaced"}
    assert len({u.event_id for u in updates}) == 1  # the replay re-announces the same event
    assert updates[0].related_ids == tuple(n.id for n in snapshot)

    unknown = ReplaceWorkingMemory(user_id="cmd", node_ids=(wanted[0], "ghost"))
    token = await sched.client.command(unknown)
    await sched.client.wait_applied(token)
    assert "no node ghost" in (await sched.client.command_failure(token) or "")
    assert await sched.client.working_memory("cmd") == snapshot

    msg, _ = await ask(sched, "cmd", "when does my flight to Lisbon leave?")
    event = await replacement_for(sched, msg)
    applied = await sched.client.working_memory("cmd")
    vectors = await sched.deps.store.vectors.count("cmd")
    await sched.client.wait_applied(await sched.client.publish(WORKING_MEMORY, event))
    assert await sched.client.working_memory("cmd") == applied  # same nodes, same stamps
    assert await sched.deps.store.vectors.count("cmd") == vectors


async def test_activation_memory_renders_active_cubes(sched: Pipeline) -> None:
    await remember(sched, "quiet", DIET)  # memories, but no scheduler activity
    await remember(sched, "act", [*DIET, *TRAVEL])
    msg, _ = await ask(sched, "act", "what should I cook tonight?")
    await replacement_for(sched, msg)
    memory = await sched.client.working_memory("act")
    # the search's context block over the working memory, in its order (topics/context.py)
    expected = render_context(memory, sched.settings.scheduler.activation_budget,
                              header="Known about the user:", empty="").text
    assert all(n.memory in expected for n in memory) and "#" in expected

    async def rendered() -> list[ActivationMemory]:
        return [e for e in await read_topic(sched.settings, sched.bootstrap, ACTIVATION_MEMORY)
                if e.cube_id == "act" and e.text == expected]

    (block, *_) = await poll(rendered, 10, "activation memory of cube 'act'")
    assert block.node_ids == tuple(n.metadata.origin_id or n.id for n in memory)
    everything = await read_topic(sched.settings, sched.bootstrap, ACTIVATION_MEMORY)
    assert not [e for e in everything if e.cube_id == "quiet"]


async def test_the_agent_loop_from_the_readme(sched: Pipeline) -> None:
    client = sched.client
    await remember(sched, "loop", [*DIET, *TRAVEL])
    question = "When does my plane to Lisbon depart?"
    token = await client.schedule("loop", "query", question)
    await client.wait_applied(token)  # the scheduler has decided and emitted its replacement
    replaced = await poll(lambda: _replaced(sched, "loop"), 30, "working-memory refresh")
    memory = await client.working_memory("loop")
    assert [n.id for n in memory] == list(replaced[-1].related_ids)
    assert TRAVEL[0] in [n.memory for n in memory]
    await client.schedule("loop", "answer", "Your flight to Lisbon leaves on May 14.")


async def _replaced(p: Pipeline, cube: str) -> list[MemoryUpdate]:
    return [u for u in await read_topic(p.settings, p.bootstrap, MEMORY_UPDATES)
            if u.cube_id == cube and u.action == "working_memory_replaced"]


async def test_a_covered_query_retrieves_nothing_until_the_timer_fires(
    sched: Pipeline, clock: ShiftedClock,
) -> None:
    """Last in the module: it moves the shared clock forward."""
    await remember(sched, "cov", [*DIET, *TRAVEL])
    first, _ = await ask(sched, "cov", "what should I cook tonight with spicy tofu?")
    assert "decision" in (await replacement_for(sched, first)).reason

    # every keyword is in one working-memory item, and was asked about just before
    covered, token = await ask(sched, "cov", "spicy tofu")
    await sched.client.wait_applied(token)
    later, _ = await ask(sched, "cov", "what should I cook tonight?")
    await replacement_for(sched, later)
    events = [e.event_id for e in await read_topic(sched.settings, sched.bootstrap,
                                                    WORKING_MEMORY) if e.cube_id == "cov"]
    assert derived_event_id("working-memory", covered.event_id) not in events
    assert len(events) == 2

    clock.advance(sched.settings.scheduler.retrieval_interval_s + 1)
    again, _ = await ask(sched, "cov", "spicy tofu")
    event = await replacement_for(sched, again)
    assert "timer: last retrieval" in event.reason and "decision" not in event.reason


# --------------------------------------------------------------------------- restart


async def test_the_query_history_survives_a_worker_restart(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str
) -> None:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri)
    first = await start_pipeline(settings)
    try:
        await remember(first, "rst", [*DIET, *TRAVEL])
        before, _ = await ask(first, "rst", "what should I cook tonight?")
        assert (await replacement_for(first, before)).queries == (before.content,)
    finally:
        await stop_pipeline(first)
    changelog = f"{settings.app_id}-scheduler-cubes-changelog"
    partitions = await topic_offsets(kafka_broker, changelog)
    assert len(partitions) == settings.kafka.partitions and sum(partitions.values()) >= 1
    assert await topic_config(kafka_broker, changelog, "cleanup.policy") == "compact"

    second = await start_pipeline(settings)  # same app id: state comes back from the changelog
    try:
        after, _ = await ask(second, "rst", "when does my flight to Lisbon leave?")
        event = await replacement_for(second, after)
        assert event.queries == (before.content, after.content)
        assert TRAVEL[0] in [i.memory for i in event.items]
    finally:
        await stop_pipeline(second)


