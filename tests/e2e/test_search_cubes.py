"""One search over several cubes (``SearchRequest.cube_ids``): one ranking on one score
scale, each turn once, access checked per cube — real broker, FalkorDB and Milvus Lite."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.agents.memory_tools import Identity, MemoryTools
from memstream.client.client import MemoryServiceError
from memstream.topics.events import MAX_SEARCH_CUBES, ShareCube
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline

TEAM = ["Carol lives in Oslo.", "Dan lives in Rome.", "The team meets on Thursdays.",
        "The office coffee machine is broken."]


async def _share(pipeline: Pipeline, owner: str, cube: str, reader: str) -> None:
    client = pipeline.client
    token = await client.command(ShareCube(user_id=owner, cube_id=cube, with_user_id=reader))
    await client.wait_applied(token, timeout=60)
    assert await client.command_failure(token) is None


async def test_one_ranking_on_one_scale_across_a_users_cube_and_a_shared_one(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    # alice's own cube holds one memory: alone, it is first in every ranking of its cube
    await client.wait_applied(await client.add_memories("alice", ["Alice is vegetarian."],
                                                        cube_id="alice-diet"), timeout=60)
    await client.wait_applied(await client.add_memories("carol", TEAM, cube_id="team"),
                              timeout=60)
    await _share(pipeline, "carol", "team", "alice")

    hits = await client.search("alice", "Who lives in Oslo?", cube_ids=["alice-diet", "team"])
    assert [h.item.memory for h in hits][:1] == ["Carol lives in Oslo."], \
        [(h.item.memory, h.score) for h in hits]
    assert {h.item.metadata.cube_id for h in hits} == {"alice-diet", "team"}
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    by_text = {h.item.memory: h.score for h in hits}
    # the cube that holds nothing on Oslo is not scored as if it were the answer
    assert by_text["Alice is vegetarian."] < by_text["Carol lives in Oslo."]

    oslo_id = hits[0].item.id
    hits = await client.search("alice", "Is Alice vegetarian?", cube_ids=["team", "alice-diet"])
    assert hits[0].item.memory == "Alice is vegetarian.", [(h.item.memory, h.score)
                                                           for h in hits]

    # each returned memory's use is recorded in its own cube

    async def used_in_team() -> bool:
        oslo = await pipeline.deps.store.graph.get_node("team", oslo_id)
        assert oslo is not None
        return any(u.query == "Who lives in Oslo?" for u in oslo.metadata.usage)

    for _ in range(100):
        if await used_in_team():
            break
        await asyncio.sleep(0.1)
    assert await used_in_team(), "the use of a memory of the shared cube was not recorded there"


async def test_two_cubes_holding_the_same_turns_return_each_turn_once(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    start = datetime(2026, 3, 1, 18, 0, tzinfo=UTC)
    said = [("Maya", "I adopted a grey cat called Pebble last week."),
            ("Tom", "Lovely! Does Pebble get along with your dog?"),
            ("Maya", "Mostly, though the dog still hides under the bed."),
            ("Tom", "I am training for the Berlin marathon in September."),
            ("Maya", "Good luck, you ran Paris last spring too, right?"),
            ("Tom", "Yes, and my knee hurt for weeks after that one.")]
    for speaker in ("maya", "tom"):  # both speakers' cubes hold the conversation
        messages = [{"id": f"t{i}", "role": "user" if name.lower() == speaker else "assistant",
                     "name": name, "content": text, "timestamp": start + timedelta(minutes=i)}
                    for i, (name, text) in enumerate(said)]
        await client.wait_applied(await client.add_messages(speaker, messages, session_id="s1"),
                                  timeout=60)
    await _share(pipeline, "tom", "tom", "maya")

    for query in ("What is the name of Maya's cat?", "Which marathon is Tom training for?"):
        both = await client.search("maya", query, cube_ids=["maya", "tom"], top_k=10)
        assert both, query
        returned = [turn for hit in both for turn in hit.excerpt_ids]
        assert len(returned) == len(set(returned)), (query, [(h.excerpt, h.item.memory)
                                                             for h in both])
        one = await client.search("maya", query, cube_id="maya", top_k=10)
        best_alone = set(one[0].excerpt_ids) or {one[0].item.id}
        best_both = set(both[0].excerpt_ids) or {both[0].item.id}
        assert best_alone & best_both, "the answer of one cube fell from the top with two"


async def test_every_cube_is_checked_and_the_refusal_names_it(pipeline: Pipeline) -> None:
    client = pipeline.client
    await client.wait_applied(await client.add_memories("erin", ["Erin's locker is 42."],
                                                        cube_id="erin"), timeout=60)
    await client.wait_applied(await client.add_memories("frank", ["Frank's PIN is 1234."],
                                                        cube_id="frank"), timeout=60)
    with pytest.raises(MemoryServiceError) as refused:
        await client.search("erin", "PIN", cube_ids=["erin", "frank"])
    assert "may not read cube 'frank'" in refused.value.message, refused.value.message

    with pytest.raises(MemoryServiceError) as unknown:
        await client.search("erin", "anything", cube_ids=["nobody-1", "nobody-2"])
    assert "none of the cubes 'nobody-1', 'nobody-2' has memories" in unknown.value.message

    with pytest.raises(ValidationError, match="cube_ids"):
        await client.search("erin", "PIN", cube_ids=[f"c{i}" for i in range(MAX_SEARCH_CUBES + 1)])


async def test_an_mcp_server_given_a_shared_cube_searches_it_with_its_own(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    await client.wait_applied(await client.add_memories("gina", ["Gina runs on Mondays."]),
                              timeout=60)
    await client.wait_applied(await client.add_memories(
        "hugo", ["The chess club meets in room 4 on Fridays."], cube_id="club"), timeout=60)
    await _share(pipeline, "hugo", "club", "gina")
    alone = MemoryTools(client, Identity("gina", "gina"))
    reading = MemoryTools(client, Identity("gina", "gina", read_cubes=("club",)))
    query = "where does the chess club meet?"
    assert "room 4" not in str(await alone.search(query, 5, None, "All", None, ()))
    found = (await reading.search(query, 5, None, "All", None, ()))["results"]
    assert found[0]["memory"] == "The chess club meets in room 4 on Fridays.", found
    block = await reading.context(query, 400, "chars")
    assert block["context"].count("room 4") == 1 and block["ids"], block


async def test_the_command_line_shares_a_cube_and_searches_it_with_ones_own(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    await client.wait_applied(await client.add_memories("ivy", ["Ivy drinks oat milk."]),
                              timeout=60)
    await client.wait_applied(await client.add_memories(
        "jon", ["The band rehearses in the garage on Wednesdays."], cube_id="band"), timeout=60)
    env = pipeline_env(pipeline)
    search = ("search", "when does the band rehearse?", "--user", "ivy", "--cube", "ivy",
              "--cube", "band")
    refused = await run_cli(env, *search)
    assert refused.code == 1 and "may not read cube 'band'" in refused.err, refused.text
    not_owner = await run_cli(env, "share", "band", "--user", "ivy", "--with", "ivy")
    assert not_owner.code == 1 and "only the owner of cube 'band'" in not_owner.err
    shared = await run_cli(env, "share", "band", "--user", "jon", "--with", "ivy")
    assert shared.code == 0 and "cube 'band' shared with ivy (read)" in shared.out, shared.text
    found = await run_cli(env, *search, "--top-k", "2")
    assert found.code == 0, found.text
    assert found.out.index("rehearses in the garage") < found.out.index("oat milk")
    assert "band" in found.out and "ivy" in found.out  # each hit's cube
    gone = await run_cli(env, "unshare", "band", "--user", "jon", "--with", "ivy")
    assert gone.code == 0, gone.text
    assert (await run_cli(env, *search)).code == 1
