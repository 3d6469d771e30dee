"""History, explain and as-of on the default setup: every record sealed with its cube's key
(issue #27: the raw-bytes filter found no node id inside sealed records, so ``history``
never worked and ``explain`` only with ``--cube``). Through the Python client and the command
line, with and without the cube, for a memory that was added, merged and archived, and with
another cube's records in the same log. Real broker, FalkorDB, Milvus Lite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio

from memstream.history.indexed import AmbiguousId
from memstream.history.log_index import LogRefQuery
from memstream.history.provenance import NodeNotFound
from memstream.topics.events import DeleteCube, ExtractedMemory, MemoryUpdate
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES
from memstream.topics.sealing import is_sealed
from tests.support.cli import pipeline_env, run_cli
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline

CUBE = "sealed"


@pytest_asyncio.fixture
async def sealed(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                 ) -> AsyncIterator[Pipeline]:
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 erasure={"enabled": True}, scheduler={"enabled": False})
    async for p in run_pipeline(settings):
        yield p


async def stored(p: Pipeline, cube: str) -> list[MemoryItem]:
    graph = p.deps.store.graph
    return [n for t in ("UserMemory", "LongTermMemory")
            for n in await graph.all_of_type(cube, t, status=None)]  # type: ignore[arg-type]


async def test_history_explain_and_as_of_read_sealed_records(sealed: Pipeline,
                                                             tmp_path: Path) -> None:
    p, client = sealed, sealed.client
    noise = await client.add_messages("noise", [  # another cube's records in the same log
        {"role": "user", "content": "I love hiking in the mountains."}], session_id="n1")
    first = await client.add_messages(CUBE, [
        {"role": "user", "content": "I love hiking in the mountains."},
        {"role": "user", "content": "My sister Ana lives in Porto."}], session_id="s1")
    await client.wait_applied(noise, timeout=120)
    await client.wait_applied(first, timeout=120)
    second = await client.add_messages(CUBE, [
        {"role": "user", "content": "I really love hiking in the mountains!"}], session_id="s2")
    await client.wait_applied(second, timeout=120)
    nodes = await stored(p, CUBE)
    (kept,) = [n for n in nodes if "hiking" in n.memory and n.metadata.status == "activated"]
    (archived,) = [n for n in nodes if "hiking" in n.memory and n.metadata.status == "archived"]

    # the log holds what was said sealed: an update that carries a node's text is sealed
    raw = [u for u in await client.history(MEMORY_UPDATES, cube_id=CUBE)]
    assert raw and all(isinstance(u, MemoryUpdate) for u in raw)
    with_text = [u for u in raw if u.node is not None]
    assert with_text and all(is_sealed(MEMORY_UPDATES.encode(u)) for u in with_text)

    for cube in (None, CUBE):  # with and without the cube
        history = await client.memory_history(archived.id, cube)
        own = [c for c in history if c.update.action != "linked"]
        assert [c.update.action for c in own] == ["added", "merged", "archived"]
        assert [c.cause.memory for c in own if isinstance(c.cause, ExtractedMemory)] == [
            "I love hiking in the mountains.", "I really love hiking in the mountains!",
            "I really love hiking in the mountains!"]
        assert {c.update.cube_id for c in history} == {CUBE}

        why = await client.explain(kept.id, cube)
        assert why.node is not None and why.node.memory == kept.memory
        assert [s.text for s in why.sources if s.kind == "message"] == [
            "I really love hiking in the mountains!"]
        merged = [step for step in why.lineage if step.kind == "merged"]
        assert [step.source.node_id for step in merged] == [archived.id]
        assert [s.text for s in merged[0].source.sources] == ["I love hiking in the mountains."]
        assert any(step.kind == "episode" and step.source.node is not None
                   for step in why.lineage)

    held = {n.id: n.metadata.status for n in await client.as_of(CUBE, datetime.now(UTC))}
    assert held[kept.id] == "activated" and held[archived.id] == "archived"
    assert {n.id for n in nodes} <= set(held)
    assert await client.as_of(CUBE, datetime(2001, 1, 1, tzinfo=UTC)) == []

    # the 8-character ids that as-of and explain print are accepted
    short = archived.id[:8]
    assert [c.update.action for c in await client.memory_history(short)
            if c.update.action != "linked"] == ["added", "merged", "archived"]
    assert (await client.explain(kept.id[:8], CUBE)).node_id == kept.id
    assert [n.id for n in await client.get(CUBE, [short])] == [archived.id]
    with pytest.raises(NodeNotFound):
        await client.memory_history("no-such-memory", CUBE)

    # the command line, as a user runs it on the embedded default (erasure on)
    env = {**pipeline_env(p), "MEMSTREAM_ERASURE__ENABLED": "true"}
    for extra in ((), ("--cube", CUBE)):
        done = await run_cli(env, "history", short, *extra)
        assert done.code == 0, done.text
        assert " added " in done.out and " merged " in done.out and " archived " in done.out
        done = await run_cli(env, "explain", kept.id[:8], *extra)
        assert done.code == 0, done.text
        assert "I really love hiking in the mountains!" in done.out and "merged from" in done.out
    done = await run_cli(env, "as-of", datetime.now(UTC).isoformat(), "--user", CUBE)
    assert done.code == 0 and short in done.out and "archived" in done.out, done.text
    done = await run_cli(env, "get", short, "--user", CUBE)
    assert done.code == 0 and archived.id in done.out, done.text

    # erased: the index forgets where the cube's records sat, and nothing can be read back
    await client.wait_applied(await client.command(DeleteCube(user_id=CUBE)), timeout=60)
    with pytest.raises(NodeNotFound):
        await client.memory_history(archived.id, CUBE)
    left = await p.deps.store.graph.log_refs(LogRefQuery(cube_id=CUBE, node_id=archived.id))
    assert left == []
    assert [c.update.action for c in await client.memory_history(
        [n.id for n in await stored(p, "noise")][0], "noise")][:1] == ["added"]  # untouched


async def test_an_ambiguous_id_prefix_is_refused_with_a_clear_error(sealed: Pipeline) -> None:
    client = sealed.client
    token = await client.add_memories("twins", [
        {"memory": "The user plays the violin.", "id": "abcdefgh-0001"},
        {"memory": "The user grows tomatoes.", "id": "abcdefgh-0002"}])
    await client.wait_applied(token, timeout=120)
    with pytest.raises(AmbiguousId, match=r"id prefix 'abcdefgh' matches several memories"):
        await client.memory_history("abcdefgh", "twins")
    from memstream.client.client import MemoryServiceError

    with pytest.raises(MemoryServiceError, match=r"id prefix 'abcdefgh' matches several"):
        await client.get("twins", ["abcdefgh"])
    assert [n.memory for n in await client.get("twins", ["abcdefgh-0002"])] == [
        "The user grows tomatoes."]
    assert [c.update.action for c in await client.memory_history("abcdefgh-0001")][:1] == [
        "added"]
