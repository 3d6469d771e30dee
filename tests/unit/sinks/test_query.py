"""One search's reads of the stores (sinks/query.py)."""

from __future__ import annotations

import asyncio

from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.query import MemoryQuery, NodeReads
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.topics.models import MemoryItem, MemoryMetadata


async def test_a_search_reads_each_node_once_and_gets_what_get_nodes_gets() -> None:
    """``NodeReads`` (one search's reads of a cube's nodes): asked for overlapping ids at
    once and later, it returns what ``get_nodes`` returns, in the order asked, missing ids
    left out, and reads each node from the graph once."""
    graph = InMemoryGraphStore()
    await graph.upsert_nodes("cube0", [MemoryItem(
        id=f"n{i}", memory=f"fact {i}", metadata=MemoryMetadata(
            user_id="u", cube_id="cube0", memory_type="LongTermMemory"))  # type: ignore[call-arg]
        for i in range(6)])
    query = MemoryQuery(graph, InMemoryVectorStore(8))
    read: list[str] = []
    get_nodes = query.get_nodes

    async def counted(cube_id: str, ids: list[str]) -> list[MemoryItem]:
        read.extend(ids)
        return await get_nodes(cube_id, ids)

    query.get_nodes = counted  # type: ignore[method-assign]
    reads = NodeReads(query, "cube0")
    first, second = await asyncio.gather(reads.get(["n3", "n1", "gone"]), reads.get(["n1", "n4"]))
    third = await reads.get(["n4", "n3", "n5"])
    assert [n.id for n in first] == ["n3", "n1"] and [n.id for n in second] == ["n1", "n4"]
    assert [n.id for n in third] == ["n4", "n3", "n5"]
    assert third[1] == (await get_nodes("cube0", ["n3"]))[0]
    assert sorted(read) == ["gone", "n1", "n3", "n4", "n5"]  # each once
