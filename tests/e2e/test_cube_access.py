"""Cube access: a cube belongs to its first writer and is shared by its owner;
every request and write is checked — real broker, FalkorDB and Milvus Lite."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.client.client import MemoryServiceError
from memstream.streams.memory.logic import build_node
from memstream.topics.events import DumpCube, ExtractedMemory, MemoryUpdate, ShareCube, UnshareCube
from memstream.topics.registry import MEMORY_UPDATES
from tests.support.pipeline import Pipeline

ALICE = ["Alice keeps the spare key under the blue flowerpot.",
         "Alice's bank PIN is written in the green notebook."]


async def _bob_reads(pipeline: Pipeline, ids: list[str], dump: Path) -> dict[str, str | None]:
    """What bob gets for each read of alice's cube: None if allowed, else the error."""
    client = pipeline.client
    outcome: dict[str, str | None] = {}
    for name, call in (
        ("search", lambda: client.search("bob", "where is the spare key?", cube_id="alice")),
        ("get", lambda: client.get("bob", ids, cube_id="alice")),
        ("subgraph", lambda: client.subgraph("bob", "spare key", cube_id="alice")),
    ):
        try:
            found = await call()
            outcome[name] = None
            assert found, f"{name} by bob returned nothing although it was allowed"
        except MemoryServiceError as exc:
            outcome[name] = exc.message
    dump.unlink(missing_ok=True)
    token = await client.command(DumpCube(user_id="bob", cube_id="alice", path=str(dump)))
    await client.wait_applied(token, timeout=60)
    outcome["dump"] = await client.command_failure(token)
    assert (outcome["dump"] is None) == dump.exists()
    return outcome


async def test_bob_reads_alices_cube_only_while_she_shares_it(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    client = pipeline.client
    token = await client.add_memories("alice", ALICE)
    await client.wait_applied(token, timeout=60)
    ids = [n.id for n in await client.get_all("alice")]
    assert ids
    dump = tmp_path / "bob-dump.json"

    refused = await _bob_reads(pipeline, ids, dump)
    for what, error in refused.items():
        assert error is not None, f"bob could {what} alice's cube before it was shared"
        assert "'alice'" in error and "bob" in error, error  # names the cube and the user

    # a write by bob is refused too, and changes nothing
    token = await client.add_memories("bob", ["Bob was here."], cube_id="alice")
    await client.wait_applied(token, timeout=60)
    assert "may not write cube 'alice'" in (await client.command_failure(token) or "")
    assert sorted(n.id for n in await client.get_all("alice")) == sorted(ids)
    # so is a scheduler message (it would pull alice's memories into working memory)
    token = await client.schedule("bob", "query", "where is the key?", cube_id="alice")
    await client.wait_applied(token, timeout=60)
    assert "may not write cube 'alice'" in (await client.command_failure(token) or "")

    # only the owner may share
    token = await client.command(ShareCube(user_id="bob", cube_id="alice", with_user_id="bob"))
    await client.wait_applied(token, timeout=60)
    assert "only the owner of cube 'alice'" in (await client.command_failure(token) or "")

    token = await client.command(ShareCube(user_id="alice", cube_id="alice", with_user_id="bob"))
    await client.wait_applied(token, timeout=60)
    assert await client.command_failure(token) is None
    allowed = await _bob_reads(pipeline, ids, dump)
    assert allowed == {"search": None, "get": None, "subgraph": None, "dump": None}
    # read sharing is not write sharing
    token = await client.add_memories("bob", ["Bob was here."], cube_id="alice")
    await client.wait_applied(token, timeout=60)
    assert "for writing" in (await client.command_failure(token) or "")

    token = await client.command(UnshareCube(user_id="alice", cube_id="alice",
                                             with_user_id="bob"))
    await client.wait_applied(token, timeout=60)
    again = await _bob_reads(pipeline, ids, dump)
    assert all(error is not None and "'alice'" in error for error in again.values()), again

    # alice herself was never refused, and the shares were announced
    assert [s.item.memory for s in await client.search("alice", "spare key", top_k=1)] \
        == [ALICE[0]]
    shared = [u.reason for u in await client.history(MEMORY_UPDATES, cube_id="alice")
              if isinstance(u, MemoryUpdate) and u.action == "shared"]
    assert shared == ["shared with bob (read)", "unshared from bob"]


async def test_a_cube_shared_for_writing_takes_the_writers_memories(pipeline: Pipeline) -> None:
    client = pipeline.client
    token = await client.add_memories("carol", ["Carol's team meets on Mondays."],
                                      cube_id="team")
    await client.wait_applied(token, timeout=60)
    token = await client.command(ShareCube(user_id="carol", cube_id="team", with_user_id="dan",
                                           permission="write"))
    await client.wait_applied(token, timeout=60)
    token = await client.add_memories("dan", ["Dan brings coffee to the Monday meeting."],
                                      cube_id="team")
    await client.wait_applied(token, timeout=60)
    assert await client.command_failure(token) is None
    texts = {n.memory for n in await client.get_all("dan", cube_id="team",
                                                    memory_type="LongTermMemory")}
    assert texts == {"Carol's team meets on Mondays.",
                     "Dan brings coffee to the Monday meeting."}


async def test_a_cube_written_before_access_records_belongs_to_its_memories_user(
    pipeline: Pipeline,
) -> None:
    # memories stored as an earlier version did: no access record for the cube
    node = build_node(ExtractedMemory(user_id="olga", cube_id="family",
                                      memory="Olga's daughter starts school in September."))
    vector = [float(x) for x in (await pipeline.deps.embedder.embed_passages([node.memory]))[0]]
    await pipeline.deps.store.write([(node, vector)])
    assert await pipeline.deps.store.graph.get_cube_access("family") is None

    client = pipeline.client
    with pytest.raises(MemoryServiceError, match="may not read cube 'family' .*owned by 'olga'"):
        await client.search("bob", "school", cube_id="family")
    found = await client.search("olga", "when does school start?", cube_id="family")
    assert [s.item.id for s in found] == [node.id]
    token = await client.add_memories("bob", ["Bob moved in."], cube_id="family")
    await client.wait_applied(token, timeout=60)
    assert "may not write cube 'family'" in (await client.command_failure(token) or "")
    access = await pipeline.deps.store.graph.get_cube_access("family")
    assert access is not None and access.owner == "olga"  # recorded at the first write
