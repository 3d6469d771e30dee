"""Answering requests (streams/search/logic.py): each on its reply topic, pages that say when
more follow, errors answered instead of silence, replies within the byte limit."""

from __future__ import annotations

import asyncio
import base64
import random
from pathlib import Path
from typing import Any

from memstream.security.access import CubeAccess
from memstream.sinks.freshness import reads_relaxed
from memstream.sinks.ports import VectorHit, VectorQuery
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps, RawRecord
from memstream.streams.search.logic import Answer, _bounded, answer
from memstream.streams.search.usage import UsageWriter
from memstream.topics.events import (
    DeadLetter,
    ExtractedMemory,
    GetAllRequest,
    GetRequest,
    NodesResult,
    Reply,
    ScoredMemory,
    SearchRequest,
    SearchResult,
    SubgraphRequest,
    SubgraphResult,
    WorkingMemoryRequest,
    WriteToken,
)
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata
from memstream.topics.registry import REPLIES, REQUESTS
from memstream.topics.settings import LimitsSettings
from tests.support.doubles import memory_deps, record, remember
from tests.support.facts import FACTS

CUBE = "bob"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}


def ask(query: str, **fields: Any) -> SearchRequest:
    return SearchRequest(**{"user_id": CUBE, "query": query, **fields})


async def no_wait(_token: WriteToken, _timeout: float) -> None:
    return None


def raw_request(request: Any) -> RawRecord:
    return RawRecord(topic="t.requests", partition=0, offset=0, key=CUBE.encode(),
                     value=REQUESTS.encode(request))


async def result_of(deps: Deps, request: Any) -> Any:
    """The result of an answered request (which must have succeeded)."""
    reply = reply_of(await answer(raw_request(request), deps, no_wait))
    assert reply.ok, reply.error
    return reply.result


def reply_of(result: Answer) -> Reply:
    (out,) = [o.event for o in result.outgoing if isinstance(o.event, Reply)]
    assert isinstance(out, Reply)
    return out


async def test_a_search_request_is_answered_on_its_reply_topic(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    req = ask("peanut allergy", top_k=1, reply_to="my.replies", reply_partition=3,
              requester="agent-7")
    result = await answer(raw_request(req), deps, no_wait)
    (out,) = result.outgoing
    assert (out.topic, out.partition, out.key) == ("my.replies", 3, b"agent-7")
    reply = reply_of(result)
    assert reply.ok and reply.correlation_id == req.correlation_id
    assert isinstance(reply.result, SearchResult)
    assert [s.item.id for s in reply.result.memories] == [nodes[0].id]
    assert [i.id for i in result.used] == [nodes[0].id]
    # usage is recorded after the reply, on the node returned
    usage = UsageWriter(deps)
    usage.add(req, result.used)
    await usage.close()
    (node,) = await deps.query.get_nodes(CUBE, [nodes[0].id])
    assert [(u.requester, u.query) for u in node.metadata.usage] == [("agent-7", req.query)]


async def test_uses_are_written_together_and_replies_leave_the_history_out(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    (allergy, *_) = await remember(deps, CUBE, *FACTS)
    usage = UsageWriter(deps)
    writes: list[dict[str, Any]] = []
    record = deps.store.graph.record_usage

    async def counted(cube_id: str, uses: Any, keep: int, seen: Any = ()) -> int:
        writes.append(dict(uses))
        return await record(cube_id, uses, keep, seen)

    deps.store.graph.record_usage = counted  # type: ignore[method-assign]
    for query in ("peanut allergy", "what am I allergic to"):
        req = ask(query, top_k=1, requester="agent-7")
        result = await answer(raw_request(req), deps, no_wait)
        assert [i.id for i in result.used] == [allergy.id]
        usage.add(req, result.used)
    assert writes == []  # not one write per search ...
    await asyncio.sleep(deps.settings.search.usage_flush_s + 0.3)
    assert len(writes) == 1  # ... but one for both, each use in order
    (node,) = await deps.query.get_nodes(CUBE, [allergy.id])
    assert [u.query for u in node.metadata.usage] == ["peanut allergy", "what am I allergic to"]
    # the history grows with every search: a search reply leaves it out, `get` carries it
    found = await result_of(deps, ask("peanut allergy", top_k=1))
    assert found.memories[0].item.id == allergy.id and found.memories[0].item.metadata.usage == ()
    (got,) = (await result_of(deps, GetRequest(**ME, ids=(allergy.id,)))).nodes
    assert len(got.metadata.usage) == 2
    await usage.close()


async def test_get_all_pages_say_when_more_follow(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    seen: list[str] = []
    offset, pages = 0, []
    while True:
        req = GetAllRequest(**ME, memory_type="LongTermMemory", offset=offset, limit=2)
        page = await result_of(deps, req)
        assert isinstance(page, NodesResult)
        pages.append((len(page.nodes), page.total, page.truncated, page.next_offset))
        seen += [n.memory for n in page.nodes]
        if page.next_offset is None:
            break
        offset = page.next_offset
    assert pages == [(2, 5, True, 2), (2, 5, True, 4), (1, 5, False, None)]
    assert sorted(seen) == sorted(FACTS)


async def test_a_page_is_capped_by_the_page_limit_and_says_so(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, limits={"page_nodes": 3})
    await remember(deps, CUBE, *FACTS)
    page = await result_of(deps, GetAllRequest(**ME))
    assert isinstance(page, NodesResult)
    assert (len(page.nodes), page.total, page.truncated, page.next_offset) == (3, 5, True, 3)


async def test_a_page_too_big_for_one_message_is_cut_and_continues(tmp_path: Path) -> None:
    """No reply exceeds ``limits.event_bytes``; following ``next_offset`` still reads every
    memory exactly once."""
    deps = memory_deps(tmp_path, limits={"event_bytes": 4096})
    texts = [f"Memory {i}: " + "the user likes long walks along the river. " * 8
             for i in range(12)]
    await remember(deps, CUBE, *texts)
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        request = GetAllRequest(**ME, memory_type="LongTermMemory", offset=offset)
        reply = reply_of(await answer(raw_request(request), deps, no_wait))
        assert reply.ok and len(REPLIES.encode(reply)) <= 4096
        page = reply.result
        assert isinstance(page, NodesResult) and page.total == 12 and page.nodes
        assert page.truncated == (page.next_offset is not None)
        seen += [n.memory for n in page.nodes]
        offset = page.next_offset
    assert sorted(seen) == sorted(texts)


async def test_get_all_leaves_out_inactive_memories_unless_asked(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS[:3])
    await deps.store.set_status(CUBE, [nodes[0].id], "archived")
    active = await result_of(deps, GetAllRequest(**ME))
    every = await result_of(deps, GetAllRequest(**ME, include_inactive=True))
    assert isinstance(active, NodesResult) and isinstance(every, NodesResult)
    assert nodes[0].id not in {n.id for n in active.nodes} and active.total == 2
    assert nodes[0].id in {n.id for n in every.nodes} and every.total == 3


async def test_an_unknown_cube_gets_an_error_reply_not_silence(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nobody: dict[str, Any] = {"user_id": "nobody", "cube_id": "nobody"}
    for req in (GetAllRequest(**nobody), ask("anything", **nobody)):
        reply = reply_of(await answer(raw_request(req), deps, no_wait))
        assert not reply.ok and reply.error is not None
        assert reply.error.type == "UnknownCube" and "nobody" in reply.error.message


async def test_an_invalid_request_gets_an_error_reply_and_a_dead_letter(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    raw = RawRecord(topic="t.requests", partition=0, offset=9, key=None,
                    value=b'{"op": "search", "user_id": "bob", "correlation_id": "c-1", '
                          b'"query": "x", "top_k": 0}')
    result = await answer(raw, deps, no_wait)
    reply = reply_of(result)
    assert not reply.ok and reply.correlation_id == "c-1" and reply.error is not None
    assert "top_k" in reply.error.message
    (letter,) = [o.event for o in result.outgoing if isinstance(o.event, DeadLetter)]
    assert isinstance(letter, DeadLetter) and letter.original_offset == 9


async def test_a_bad_search_filter_is_answered_with_its_reason(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    req = ask("peanuts", search_filter={"colour": "red"})
    reply = reply_of(await answer(raw_request(req), deps, no_wait))
    assert not reply.ok and reply.error is not None and "colour" in reply.error.message


async def test_get_and_working_memory_requests(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS[:2])
    got = await result_of(deps, GetRequest(**ME, ids=(nodes[1].id, "x")))
    assert isinstance(got, NodesResult) and [n.id for n in got.nodes] == [nodes[1].id]
    await add_memories([record(ExtractedMemory(**ME, memory=FACTS[4]))], deps)
    working = await result_of(deps, WorkingMemoryRequest(**ME))
    assert isinstance(working, NodesResult)
    assert [n.memory for n in working.nodes] == [FACTS[4]]


async def test_a_subgraph_holds_the_best_match_and_its_neighbours(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    edge = Edge(source=nodes[0].id, target=nodes[4].id, type="RELATE_TO")
    await deps.store.add_edges(CUBE, [edge])
    req = SubgraphRequest(**ME, query="peanut allergy", top_k=1, depth=1)
    result = await result_of(deps, req)
    assert isinstance(result, SubgraphResult)
    sub = result.subgraph
    assert sub.core_id == nodes[0].id
    assert {n.id for n in sub.nodes} == {nodes[0].id, nodes[4].id}
    assert [(e.source, e.target, e.type) for e in sub.edges] == [
        (nodes[0].id, nodes[4].id, "RELATE_TO")]


LIMITS = LimitsSettings()


def test_a_reply_over_the_byte_limit_becomes_an_error_naming_it() -> None:
    # texts that do not compress (replies are compressed before they are measured)
    rng = random.Random(1)
    items = [MemoryItem(id=f"n{i}", memory=base64.b64encode(rng.randbytes(2_250)).decode(),
                        metadata=MemoryMetadata(user_id="u", cube_id="u",
                                                memory_type="LongTermMemory"))  # type: ignore[call-arg]
             for i in range(3)]
    result = SearchResult(memories=tuple(ScoredMemory(item=item, score=1.0) for item in items))
    reply = Reply(user_id="u", correlation_id="c", ok=True, result=result)  # type: ignore[call-arg]
    small = LimitsSettings(event_bytes=5_000)
    bounded, encoded = _bounded(reply, small)
    assert not bounded.ok and bounded.result is None and bounded.error is not None
    assert "the limit is 5,000 (MEMSTREAM_LIMITS__EVENT_BYTES)" in bounded.error.message
    assert encoded is None  # the error is encoded when sent
    kept, encoded = _bounded(reply, LIMITS)
    # a reply within the limit goes as it came, encoded once: as the topic would encode it
    assert kept is reply and encoded == REPLIES.encode(reply)


async def test_a_search_without_after_reads_vectors_relaxed_and_one_with_after_exactly(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    await remember(deps, "bob-notes", *FACTS)
    await deps.store.graph.set_cube_access(CubeAccess(cube_id="bob-notes", owner=CUBE))
    vectors = deps.store.vectors
    search = vectors.search
    relaxed: list[bool] = []

    async def watched(cube_id: str, query: VectorQuery) -> list[VectorHit]:
        relaxed.append(reads_relaxed())
        return await search(cube_id, query)

    vectors.search = watched  # type: ignore[method-assign]
    after = WriteToken(topic="t.memory.items", partition=0, offset=1)
    for cubes in ((), ("bob-notes",)):  # one cube, and several searched as one
        for request, relaxes in ((ask("peanut allergy", cube_ids=cubes), True),
                                 (ask("peanut allergy", cube_ids=cubes, after=after), False)):
            relaxed.clear()
            await result_of(deps, request)
            assert len(relaxed) >= len(request.cubes)
            assert all(r == relaxes for r in relaxed), (cubes, relaxes)
    assert not reads_relaxed()
