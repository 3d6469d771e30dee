"""Erasure that reaches everywhere — real broker, FalkorDB, Milvus Lite, a worker in-process.

Two cubes use every path that carries text (chat, direct adds, an update with new text,
a search and its reply, scheduler queries and answers, working memory). ``delete_cube``
erases one: no node, vector or working memory of it is left, and a consumer reading every
topic of the test from the beginning — the faust changelog of the scheduler's state
included — finds none of its texts (the embedded broker does not keep values as plain
bytes, so the proof is a read through a consumer, not a byte scan of its files). A replay
of the erased cube produces nothing; the other cube is untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from memstream.sinks.dump import export_cube
from memstream.topics.events import DeleteCube, MemoryUpdate, ReplayCube, UpdateNode
from memstream.topics.registry import (
    ALL_TOPICS,
    BY_SUFFIX,
    MEMORY_UPDATES,
    REPLIES,
    REPLIES_RETENTION_MS,
)
from memstream.topics.sealing import is_sealed, unseal
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import topic_config

T0 = datetime(2026, 5, 4, 10, tzinfo=UTC)
# Words only these users ever say: found in the log before erasure, never after.
EVE = ("Quetzalcoatl", "marzipan", "Oberammergau", "xylophonist")
BOB = ("Kilimanjaro", "pistachio")


@pytest_asyncio.fixture
async def sealed(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 erasure={"enabled": True},
                                 reorganize={"optimize_interval_s": 3600})
    async for p in run_pipeline(settings):
        yield p


async def use(p: Pipeline, cube: str, words: tuple[str, ...]) -> None:
    c = p.client
    first, second, *rest = words
    chat = await c.add_messages(cube, [
        {"role": "user", "content": f"I visited {first} last summer with my family.",
         "timestamp": T0.isoformat()},
        {"role": "user", "content": f"My favourite sweet is {second}.",
         "timestamp": (T0 + timedelta(minutes=1)).isoformat()}], session_id="s1")
    added = await c.add_memories(cube, [f"Keeps a diary about {first} and {second}."])
    await c.wait_applied(chat, timeout=120)
    await c.wait_applied(added, timeout=120)
    nodes = await p.deps.store.graph.all_of_type(cube, "UserMemory")
    nodes += await p.deps.store.graph.all_of_type(cube, "LongTermMemory")
    diary = next(n for n in nodes if "diary" in n.memory)
    more = " ".join(rest) or first
    token = await c.command(UpdateNode(user_id=cube, node_id=diary.id,
                                       memory=f"Keeps a diary about {first}, {more}."))
    await c.wait_applied(token, timeout=60)
    assert [h.item.memory for h in await c.search(cube, f"what about {first}?")]
    await c.schedule(cube, "query", f"Tell me about {first} and {more}")
    await c.schedule(cube, "answer", f"You visited {first}; you like {second}.")


async def read_everything(p: Pipeline) -> list[tuple[str, bytes, str]]:
    """Every record of every topic of this test (registry topics and the faust changelog):
    (topic, raw value, the value as a reader with the keys gets it, or '' if unreadable)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=p.bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[tuple[str, bytes, str]] = []
    try:
        prefix, app = p.settings.kafka.topic_prefix, p.settings.app_id
        names = sorted(t for t in await consumer.topics()
                       if t.startswith(prefix) or t.startswith(app))
        assert len([n for n in names if n.startswith(prefix)]) == len(ALL_TOPICS)
        assert any("changelog" in n for n in names)  # the scheduler's state
        tps = [TopicPartition(n, part) for n in names
               for part in sorted(consumer.partitions_for_topic(n) or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for msg in batch.get(tp, []):
                    if msg.offset < ends[tp] and msg.value is not None:
                        found.append((tp.topic, msg.value, readable(msg.value)))
    finally:
        await consumer.stop()
    return found


def readable(value: bytes) -> str:
    """What a reader holding the keys gets out of a value ('' when it cannot read it)."""
    try:
        if is_sealed(value):
            opened = unseal(value)
            return opened.decode() if isinstance(opened, bytes) else opened
        data = json.loads(value)
        if isinstance(data, dict) and isinstance(data.get("sealed"), str):  # scheduler state
            opened = unseal(data["sealed"])
            return opened.decode() if isinstance(opened, bytes) else opened
        return value.decode(errors="replace")
    except (ValidationError, ValueError):
        return ""


def holding(records: list[tuple[str, bytes, str]], words: tuple[str, ...]) -> set[str]:
    """Suffixes of the topics where any of ``words`` can be read."""
    return {topic for topic, raw, text in records
            if any(w in text or w.encode() in raw for w in words)}


async def test_delete_cube_erases_stores_and_every_topic_and_replay_brings_nothing_back(
    sealed: Pipeline,
) -> None:
    p = sealed
    await use(p, "eve", EVE)
    await use(p, "bob", BOB)
    await asyncio.sleep(1.0)  # let the scheduler act on the queries
    before = await read_everything(p)
    prefix = p.settings.kafka.topic_prefix
    where = holding(before, EVE)
    # the text is readable (with the keys) in every topic that carries it ...
    for suffix in ("conversations", "memory.items", "memory.commands", "memory.updates",
                   "replies", "schedule.query", "schedule.answer"):
        assert prefix + suffix in where, suffix
    assert any("changelog" in t for t in where)
    # ... and never as plain bytes: every field that holds it is sealed
    assert not any(w.encode() in raw for _, raw, _ in before for w in EVE)
    bob_before = await export_cube(p.deps.store, "bob")
    assert await export_cube(p.deps.store, "eve") and bob_before.nodes

    token = await p.client.command(DeleteCube(user_id="eve"))
    await p.client.wait_applied(token, timeout=60)
    assert await p.client.command_failure(token) is None

    graph = await export_cube(p.deps.store, "eve")
    assert not graph.nodes and not graph.edges and not graph.vectors
    assert not any((await p.deps.store.graph.count_by_type("eve", status=None)).values())
    assert await p.deps.store.graph.all_of_type("eve", "WorkingMemory") == []
    after = await read_everything(p)
    assert len(after) > len(before) / 2  # the log is still there, unreadable for eve
    assert holding(after, EVE) == set()
    assert holding(after, BOB) >= {prefix + "conversations", prefix + "memory.items"}
    assert (await export_cube(p.deps.store, "bob")).nodes == bob_before.nodes

    cmd = ReplayCube(user_id="eve")
    token = await p.client.command(cmd)
    await p.client.wait_applied(token, timeout=120)
    [done] = [u for u in await p.client.history(MEMORY_UPDATES, cube_id="eve")
              if isinstance(u, MemoryUpdate) and u.cause_event_id == cmd.event_id
              and u.reason.endswith("(done)")]
    # what eve's records still say is their structure (ids, actions, times); every field that
    # held what was said is unreadable, so a replay finds at most eve's commands, which name
    # ids only (the delete itself), and brings no memory back
    replayed = int(done.reason.split("/")[0])
    commands = [raw for topic, raw, _ in after
                if topic == prefix + "memory.commands" and b'"cube_id":"eve"' in raw]
    assert replayed <= len(commands)
    assert not (await export_cube(p.deps.store, "eve")).nodes


async def test_replies_are_kept_an_hour_and_the_source_of_truth_forever(sealed: Pipeline) -> None:
    s, b = sealed.settings, sealed.bootstrap
    assert await topic_config(b, REPLIES.name(s), "retention.ms") == str(REPLIES_RETENTION_MS)
    for suffix in ("conversations", "memory.items", "memory.commands", "cube-views"):
        assert await topic_config(b, BY_SUFFIX[suffix].name(s), "retention.ms") == "-1"
    assert await topic_config(b, BY_SUFFIX["cube-views"].name(s), "cleanup.policy") == "compact"
