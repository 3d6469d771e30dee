"""Search over request/reply topics through the MemoryClient — real broker and stores."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.topics.events import SearchRequest
from memstream.topics.registry import DEAD_LETTER, REQUESTS
from tests.fakes.openai_server import Reply
from tests.support.pipeline import Pipeline
from tests.support.topics import produce_raw, read_topic

FOOD = [
    "The user is vegetarian and avoids meat.",
    "The user loves spicy Sichuan tofu.",
    "The user drinks green tea every morning.",
]
TRAVEL = [
    "The user's flight to Lisbon leaves on May 14.",
    "The user booked a hotel in Alfama for the Lisbon trip.",
]


async def add_and_wait(pipeline: Pipeline, user: str, memories: list[Any],
                       cube: str | None = None) -> None:
    token = await pipeline.client.add_memories(user, memories, cube_id=cube)
    await pipeline.client.wait_applied(token, timeout=60)


async def test_fine_search_uses_the_goal_parser_and_the_reasoner(
    pipeline_with_llm: Pipeline,
) -> None:
    pipeline = pipeline_with_llm
    server = pipeline.llm_server
    await add_and_wait(pipeline, "fine", FOOD + TRAVEL)

    server.route("You prepare memory searches", Reply.json({
        "keys": ["dinner"], "tags": ["food", "diet"], "goal_type": "qa",
        "rephrased_instruction": "Suggest a dinner that fits the user's diet.",
        "internet_search": False,
        "memories": ["The user is vegetarian.", "The user likes spicy tofu."],
    }))

    def reasoner(request: dict[str, Any]) -> Reply:
        body = request["messages"][-1]["content"]
        wanted = re.search(r"\[([0-9a-f-]{36})\] The user is vegetarian", body)
        assert wanted is not None, body
        # a chatty answer: the ids must be recovered from free text
        return Reply.text(f"Sure! The useful memory is {wanted.group(1)} since it is about diet.")

    server.route("You choose which memories", reasoner)
    found = await pipeline.client.search("fine", "what should I cook tonight?", mode="fine")
    assert [s.item.memory for s in found] == [FOOD[0]]
    prompts = [json.dumps(r) for r in server.chat_requests]
    assert any("what should I cook tonight?" in p and "You prepare memory searches" in p
               for p in prompts)


async def test_fine_search_falls_back_to_fast_when_the_model_fails(
    pipeline_with_llm: Pipeline,
) -> None:
    pipeline = pipeline_with_llm
    pipeline.llm_server.handler = lambda request: Reply.http_error(500)
    await add_and_wait(pipeline, "flaky", FOOD + TRAVEL)
    found = await pipeline.client.search("flaky", "Lisbon flight", mode="fine", top_k=2)
    assert found[0].item.memory == TRAVEL[0]


async def test_cubes_are_isolated_for_search_subgraph_and_get(pipeline: Pipeline) -> None:
    text = "The user keeps a spare key under the blue flowerpot."
    await add_and_wait(pipeline, "owner", [text], cube="cube-a")
    await add_and_wait(pipeline, "owner", [text], cube="cube-b")
    client = pipeline.client
    a_nodes = await client.get_all("owner", cube_id="cube-a")
    b_nodes = await client.get_all("owner", cube_id="cube-b")
    a_ids, b_ids = {n.id for n in a_nodes}, {n.id for n in b_nodes}
    assert a_ids and b_ids and not a_ids & b_ids

    found = await client.search("owner", "where is the spare key?", cube_id="cube-a")
    assert found and {s.item.id for s in found} <= a_ids
    assert all(s.item.metadata.cube_id == "cube-a" for s in found)
    sub = await client.subgraph("owner", "spare key", cube_id="cube-a")
    assert sub.nodes and {n.id for n in sub.nodes} <= a_ids
    assert await client.get("owner", sorted(b_ids), cube_id="cube-a") == []
    assert {n.id for n in await client.get("owner", sorted(b_ids), cube_id="cube-b")} == b_ids


async def test_memory_type_and_search_filter_restrict_results(pipeline: Pipeline) -> None:
    await add_and_wait(pipeline, "flt", [
        {"memory": "The user prefers aisle seats on long flights.", "memory_type": "UserMemory",
         "tags": ["travel", "preference"]},
        {"memory": "The user's flight to Oslo is on June 3.", "tags": ["travel", "plan"]},
        {"memory": "The user's passport expires in 2031.", "tags": ["documents"]},
    ], cube=None)
    client = pipeline.client
    users = await client.search("flt", "flight", memory_type="UserMemory")
    assert [s.item.memory for s in users] == ["The user prefers aisle seats on long flights."]
    working = await client.search("flt", "flight", memory_type="WorkingMemory")
    assert working and all(s.item.metadata.memory_type == "WorkingMemory" for s in working)
    tagged = await client.search("flt", "flight", search_filter={"tags": {"contains": "plan"}})
    assert {s.item.memory for s in tagged} == {"The user's flight to Oslo is on June 3."}
    typed = await client.search("flt", "flight", memory_type="LongTermMemory",
                                search_filter={"tags": {"in": ["documents", "plan"]}})
    assert {s.item.memory for s in typed} == {"The user's flight to Oslo is on June 3.",
                                              "The user's passport expires in 2031."}
    with pytest.raises(MemoryServiceError, match="unknown field 'colour'"):
        await client.search("flt", "flight", search_filter={"colour": "red"})


async def test_malformed_requests_get_error_replies_naming_the_problem(pipeline: Pipeline) -> None:
    client = pipeline.client
    await add_and_wait(pipeline, "bad", ["The user likes kites."])
    with pytest.raises(MemoryServiceError, match="top_k"):
        await client.request(SearchRequest.model_construct(
            **{**SearchRequest(user_id="bad", query="kites").model_dump(), "top_k": 0}))
    with pytest.raises(MemoryServiceError, match="has no memories"):
        await client.search("nobody-here", "kites")
    # a payload that is not even JSON cannot be answered: it is dead-lettered
    await produce_raw(pipeline.bootstrap, REQUESTS.name(pipeline.settings), b"{{{", b"bad")
    assert (await client.search("bad", "kites"))[0].item.memory == "The user likes kites."
    letters = [d for d in await read_topic(pipeline.settings, pipeline.bootstrap, DEAD_LETTER)
               if d.stage == "search"]
    assert any(d.payload == "{{{" for d in letters)


async def test_search_after_a_write_token_sees_that_write(pipeline: Pipeline) -> None:
    await add_and_wait(pipeline, "ryw", ["The user's locker code is 4821."])
    token = await pipeline.client.add_memories("ryw", ["The user's new bike is a red Brompton."])
    found = await pipeline.client.search("ryw", "what bike do I have?", top_k=1, after=token)
    assert found[0].item.memory == "The user's new bike is a red Brompton."


async def test_a_chinese_query_finds_chinese_and_english_memories(pipeline: Pipeline) -> None:
    await add_and_wait(pipeline, "zh", [
        "用户每天早上喝一杯绿茶。",
        "The user drinks green tea every morning before work.",
        "The user's car needs new tyres.",
        "用户的车需要换轮胎。",
    ])
    found = await pipeline.client.search("zh", "我早上喝什么茶？", top_k=3,
                                         memory_type="LongTermMemory")
    texts = [s.item.memory for s in found]
    # e5-small ranks same-language text higher, so the English match shares the top 3 with
    # another Chinese memory, but the unrelated English memory never makes it.
    assert texts[0] == "用户每天早上喝一杯绿茶。"
    assert "The user drinks green tea every morning before work." in texts
    assert "The user's car needs new tyres." not in texts


async def test_the_graph_has_the_last_word_over_a_stale_vector_record(pipeline: Pipeline) -> None:
    # Vector hits are ranked before their nodes are read. A node archived in the graph whose
    # vector record still says activated (a write under way) is never returned, and the
    # search reads further down the ranking to still fill top_k.
    await add_and_wait(pipeline, "stale", FOOD + TRAVEL)
    graph = pipeline.deps.store.graph
    before = await pipeline.client.search("stale", "what tea do I drink?", top_k=3,
                                          memory_type="LongTermMemory")
    archived = [s.item for s in before[:2]]
    for item in archived:
        meta = item.metadata.model_copy(update={"status": "archived"})
        await graph.update_node("stale", item.model_copy(update={"metadata": meta}))
    after = await pipeline.client.search("stale", "what tea do I drink?", top_k=3,
                                         memory_type="LongTermMemory")
    assert len(after) == 3
    assert {s.item.id for s in after}.isdisjoint({i.id for i in archived})
    assert before[2].item.id == after[0].item.id


async def test_concurrent_first_requests_of_a_new_client_all_get_replies(
    pipeline: Pipeline,
) -> None:
    """Requests sent at once before the client has listened for replies all get answered
    (each new client picks its reply partition at random, so several clients are tried)."""
    await add_and_wait(pipeline, "eager", FOOD)
    for _ in range(6):
        async with MemoryClient(pipeline.settings, pipeline.bootstrap) as client:
            found = await asyncio.gather(*(client.search("eager", q, top_k=1, timeout=20)
                                           for q in ("tea", "tofu", "meat")))
        assert [hits[0].item.memory for hits in found] == [FOOD[2], FOOD[1], FOOD[0]]
