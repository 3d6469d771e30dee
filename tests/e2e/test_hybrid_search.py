"""Episodes and hybrid (vector + keyword) search, through the client — real broker and stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstream.client.client import MemoryServiceError
from memstream.topics.events import SearchRequest
from tests.support.pipeline import Pipeline

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def chat(*turns: tuple[str, str | None, str]) -> list[dict[str, object]]:
    """(role, name, content) turns one minute apart, ids m0, m1, …"""
    return [{"id": f"m{i}", "role": role, "content": content,
             "timestamp": T0 + timedelta(minutes=i), **({"name": name} if name else {})}
            for i, (role, name, content) in enumerate(turns)]


async def test_a_chat_chunk_is_kept_as_one_episode_linked_to_its_memories(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    token = await client.add_messages("eve", chat(
        ("user", "Eve", "I adopted a greyhound called Biscuit last week."),
        ("assistant", None, "Lovely! Greyhounds enjoy a quiet flat near Vondelpark."),
        ("user", "Eve", "We walk along the canal every evening."),
    ), session_id="s1")
    await client.wait_applied(token, timeout=60)

    # "Vondelpark" was said only by the (unnamed) assistant: no memory holds it, the episode does
    found = await client.search("eve", "Vondelpark", top_k=3)
    episode = found[0].item
    assert episode.metadata.memory_type == "EpisodicMemory"
    assert episode.memory.splitlines() == [
        "[2023-05-08 13:56] Eve: I adopted a greyhound called Biscuit last week.",
        "[2023-05-08 13:57] Assistant: Lovely! Greyhounds enjoy a quiet flat near Vondelpark.",
        "[2023-05-08 13:58] Eve: We walk along the canal every evening.",
    ]
    assert {r.message_id for r in episode.metadata.sources if r.message_id} == {"m0", "m1", "m2"}
    assert episode.metadata.session_id == "s1"
    # the people named (not a bare "Assistant") and the main words said
    assert episode.metadata.tags[0] == "Eve" and "Assistant" not in episode.metadata.tags
    assert "greyhound" in episode.metadata.tags

    # provenance both ways: each extracted memory names the episode and has an edge to it
    facts = await client.get_all("eve", memory_type="LongTermMemory") + \
        await client.get_all("eve", memory_type="UserMemory")
    assert facts
    for fact in facts:
        assert any(r.kind == "memory" and r.memory_id == episode.id
                   for r in fact.metadata.sources)
    edges = await pipeline.deps.store.graph.edges_of("eve", episode.id, direction="in",
                                               types=["EXTRACTED_FROM"])
    assert {e.source for e in edges} == {f.id for f in facts}

    # typed: the type and a filter include or exclude episodes; none in working memory
    only = await client.search("eve", "greyhound", memory_type="EpisodicMemory")
    assert [s.item.id for s in only] == [episode.id]
    facts_only = await client.search("eve", "Vondelpark", memory_type="LongTermMemory")
    assert episode.id not in {s.item.id for s in facts_only}
    no_episodes = await client.search(
        "eve", "greyhound", search_filter={"memory_type": {"!=": "EpisodicMemory"}})
    assert no_episodes and episode.id not in {s.item.id for s in no_episodes}
    working = await client.working_memory("eve")
    assert working and all(w.metadata.origin_id != episode.id for w in working)


async def test_a_chinese_keyword_finds_a_chinese_memory_through_full_text(
    pipeline: Pipeline,
) -> None:
    client = pipeline.client
    token = await client.add_memories("zh-kw", [
        "我每天早上喝一杯绿茶。",
        "我养了一只叫小白的猫，它三岁了。",
        "我的车需要换轮胎。",
        "周末我常去公园跑步。",
    ])
    await client.wait_applied(token, timeout=60)
    # keyword recall (the graph's full-text index) finds the memory holding the word, only it
    hits = await pipeline.deps.query.keyword_ids("zh-kw", "小白", 3, ["LongTermMemory"])
    assert [n.memory for n in await client.get("zh-kw", [i for i, _ in hits])] == [
        "我养了一只叫小白的猫，它三岁了。"]
    found = await client.search("zh-kw", "小白", top_k=3, memory_type="LongTermMemory")
    assert found[0].item.memory == "我养了一只叫小白的猫，它三岁了。"


async def test_keyword_and_vector_recall_are_fused(pipeline: Pipeline) -> None:
    client = pipeline.client
    token = await client.add_memories("fuse", [
        "My locker combination at the Eastside gym is 4-19-33.",
        "I keep spare gym clothes in the car.",
        "I swim at the Eastside pool on Mondays.",
        "The dentist appointment is on Friday.",
    ])
    await client.wait_applied(token, timeout=60)
    found = await client.search("fuse", "locker combination", top_k=4,
                                memory_type="LongTermMemory")
    assert found[0].item.memory == "My locker combination at the Eastside gym is 4-19-33."
    assert found[0].score == pytest.approx(1.0)  # first in both lists
    assert all(a.score >= b.score for a, b in zip(found, found[1:], strict=False))


@pytest.mark.parametrize(("query", "top_k", "message"), [
    ("   ", 5, "query must contain text"),
    ("\n\t", 5, "query must contain text"),
    ("kites", 0, "greater than or equal to 1"),
    ("kites", 500, "less than or equal to 200"),
])
async def test_bad_queries_get_an_error_reply_naming_the_limit(
    pipeline: Pipeline, query: str, top_k: int, message: str,
) -> None:
    client = pipeline.client
    token = await client.add_memories("limits", ["I like kites."])
    await client.wait_applied(token, timeout=60)
    valid = SearchRequest(user_id="limits", query="kites").model_dump()
    with pytest.raises(MemoryServiceError, match=message):
        await client.request(SearchRequest.model_construct(
            **{**valid, "query": query, "top_k": top_k}))
    with pytest.raises(ValueError, match=message):  # the client refuses before publishing
        await client.search("limits", query, top_k=top_k)
