"""Bounded sizes — real broker and stores: the client refuses what is over a limit, the
worker dead-letters (or answers with an error) what other producers send, at once, and
the cube behind it goes on; replies stay under the broker's limit (get_all pages)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from memstream.client.client import LimitExceeded, MemoryClient, MemoryServiceError
from memstream.topics.events import DeadLetter
from memstream.topics.registry import CONVERSATIONS, DEAD_LETTER, MEMORY_ITEMS, REQUESTS
from memstream.topics.settings import LimitsSettings
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline
from tests.support.topics import produce_raw, read_topic

TIMESTAMP = "2025-03-01T10:00:00+00:00"


def refused(setting: str) -> Any:
    return pytest.raises(LimitExceeded, match=rf"the limit is [0-9,]+ \({setting}\)")


async def letters_for(pipeline: Pipeline, key: str) -> list[DeadLetter]:
    letters = await read_topic(pipeline.settings, pipeline.bootstrap, DEAD_LETTER)
    return [d for d in letters if isinstance(d, DeadLetter) and d.original_key == key]


async def test_the_client_refuses_each_limit_naming_it(pipeline: Pipeline) -> None:
    client = pipeline.client
    with pytest.raises(LimitExceeded, match=r"message 1 content is 900,000 characters; the "
                       r"limit is 32,000 \(MEMSTREAM_LIMITS__MESSAGE_CHARS\)"):
        await client.add_messages("lim", [{"role": "user", "content": "hi"},
                                          {"role": "user", "content": "x" * 900_000}])
    with refused("MEMSTREAM_LIMITS__CHUNK_MESSAGES"):
        await client.add_messages("lim", [{"role": "user", "content": f"m{i}"}
                                          for i in range(101)])
    with refused("MEMSTREAM_LIMITS__DOCUMENT_CHARS"):
        await client.add_document("lim", "word " * 120_000)
    with refused("MEMSTREAM_LIMITS__EVENT_BYTES"):  # 400k Chinese characters: 1.2 MB of UTF-8
        await client.add_document("lim", "长" * 400_000)
    with pytest.raises(LimitExceeded, match=r"memory 1 text is 200,000 characters.*"
                       "MEMSTREAM_LIMITS__MEMORY_CHARS"):
        await client.add_memories("lim", ["fine", "y" * 200_000])
    with refused("MEMSTREAM_LIMITS__QUERY_CHARS"):
        await client.search("lim", "q" * 100_000)
    with refused("MEMSTREAM_LIMITS__QUERY_CHARS"):
        await client.subgraph("lim", "q" * 2_001)
    with refused("MEMSTREAM_LIMITS__MESSAGE_CHARS"):
        await client.schedule("lim", "query", "z" * 40_000)
    assert issubclass(LimitExceeded, ValueError)
    # nothing reached the log: not even the first, valid memory of add_memories
    for spec in (CONVERSATIONS, MEMORY_ITEMS):
        assert await read_topic(pipeline.settings, pipeline.bootstrap, spec) == []


async def test_oversized_and_over_nested_stage_events_are_dead_lettered_at_once(
    pipeline: Pipeline,
) -> None:
    s, bootstrap = pipeline.settings, pipeline.bootstrap
    chat = {"user_id": "big", "kind": "chat", "messages": [
        {"id": "m1", "role": "user", "content": "I like tea. " * 40_000, "timestamp": TIMESTAMP}]}
    await produce_raw(bootstrap, CONVERSATIONS.name(s), json.dumps(chat).encode(), b"big")
    memory = {"user_id": "big", "memory": "The user likes long walks. " * 7_500}  # 200 KB
    await produce_raw(bootstrap, MEMORY_ITEMS.name(s), json.dumps(memory).encode(), b"big")
    nested = b'{"user_id": "big", "memory": "x", "tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    await produce_raw(bootstrap, MEMORY_ITEMS.name(s), nested, b"big")
    started = time.perf_counter()
    # another cube, right behind them (both cubes land on the same partitions)
    token = await pipeline.client.add_memories("small", ["The user waters the ferns on Fridays."])
    await pipeline.client.wait_applied(token, timeout=15)
    print(f"\nother cube applied {time.perf_counter() - started:.2f}s after the oversized events")

    letters = await letters_for(pipeline, "big")
    assert len(letters) == 3 and all(d.attempts == 1 for d in letters)
    by_stage = sorted((d.stage, d.error) for d in letters)
    assert by_stage[0][0] == "extraction" and "message 0 content is 480,000 characters" in \
        by_stage[0][1] and "MEMSTREAM_LIMITS__MESSAGE_CHARS" in by_stage[0][1]
    errors = " | ".join(e for _, e in by_stage[1:])
    assert "MEMSTREAM_LIMITS__MEMORY_CHARS" in errors
    assert "nesting is 100,001 levels; the limit is 32 (MEMSTREAM_LIMITS__JSON_DEPTH)" in errors
    assert not any((await pipeline.deps.store.graph.count_by_type("big", status=None)).values())


async def test_requests_over_a_limit_get_an_error_reply_or_a_dead_letter(
    pipeline: Pipeline,
) -> None:
    await pipeline.client.wait_applied(
        await pipeline.client.add_memories("req", ["The user likes kites."]), timeout=30)
    # a producer that does not check (here: a client with much larger limits of its own)
    lax = pipeline.settings.model_copy(update={"limits": LimitsSettings(
        query_chars=10_000_000, event_bytes=1_040_000)})
    async with MemoryClient(lax, pipeline.bootstrap) as other:
        with pytest.raises(MemoryServiceError, match=r"LimitExceeded: query is 100,000 "
                           r"characters; the limit is 2,000 \(MEMSTREAM_LIMITS__QUERY_CHARS\)"):
            await other.search("req", "q" * 100_000, timeout=15)
        with pytest.raises(MemoryServiceError, match=r"request payload is [0-9,]+ bytes; the "
                           r"limit is 900,000 \(MEMSTREAM_LIMITS__EVENT_BYTES\)"):
            await other.search("req", "q" * 950_000, timeout=15)
    # nested too deep to read a reply address from: a dead letter with the reason
    nested = b'{"op": "search", "user_id": "req", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    await produce_raw(pipeline.bootstrap, REQUESTS.name(pipeline.settings), nested, b"req")
    found = await pipeline.client.search("req", "kites", timeout=15)  # the lane goes on
    assert found[0].item.memory == "The user likes kites."
    letters = [d for d in await letters_for(pipeline, "req") if d.stage == "search"]
    assert any("request JSON nesting is 100,001 levels; the limit is 32" in d.error
               for d in letters)


@pytest_asyncio.fixture
async def small_pages(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                      ) -> AsyncIterator[Pipeline]:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 limits={"page_nodes": 7, "event_bytes": 12_000},
                                 memory={"conflict_detection": False})
    async for p in run_pipeline(settings):
        yield p


async def test_get_all_pages_through_a_cube_larger_than_a_page(small_pages: Pipeline) -> None:
    client = small_pages.client
    texts = [f"Fact {i}: the user keeps note number {i} about " + "gardening, " * 130
             for i in range(12)]  # ~1,500 characters each: only a few fit in 12 KB
    await client.wait_applied(await client.add_memories("pages", texts), timeout=120)
    first = await client.get_all_page("pages", memory_type="LongTermMemory")
    assert first.total == 12 and first.truncated and first.next_offset == len(first.nodes)
    assert 0 < len(first.nodes) < 7  # fewer than a page: cut to stay under 12,000 bytes
    everything = await client.get_all("pages", memory_type="LongTermMemory")
    assert sorted(n.memory for n in everything) == sorted(texts)
    listed = await client.get_all("pages")  # pages cross from one memory type to the next
    assert len({n.id for n in listed}) == len(listed) == 24  # each has a working-memory copy
    assert len(await client.get_all("pages", limit=5)) == 5
