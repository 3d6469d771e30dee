"""An unreachable Milvus server is an outage (``StoreUnavailable``): the stage that meets it
pauses instead of dead-lettering its backlog (a real client against a closed port). A
server's reads are exact unless relaxed (``sinks.freshness``), its writes always; Milvus
Lite gets no consistency level at all (a client that records the calls)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from pymilvus import MilvusClient

from memstream.sinks.freshness import relaxed_reads
from memstream.sinks.ports import StoreUnavailable, VectorQuery, VectorRecord
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.sinks.vector.schema import partition_name
from memstream.streams.runtime.stage import is_outage


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_milvus_server_that_refuses_connections_is_an_outage() -> None:
    store = MilvusVectorStore(f"http://127.0.0.1:{closed_port()}", "c", dim=4)
    with pytest.raises(StoreUnavailable) as caught:
        await store.ensure_collection()
    assert is_outage(caught.value)


class RecordingClient:
    """Stands in for pymilvus's client: records each call's keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        def call(*_args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, kwargs))
            return [[]] if method == "search" else []
        return call


def opened(store: MilvusVectorStore) -> RecordingClient:
    client = RecordingClient()
    store._client = client  # type: ignore[assignment]
    store._ready = True
    return client


async def some_reads(store: MilvusVectorStore) -> None:
    await store.search("c1", VectorQuery([1.0, 0.0, 0.0, 0.0], 3))
    await store.get("c1", ["a"])
    await store.all_records("c1")
    await store.upsert([VectorRecord(id="a", cube_id="c1", user_id="c1",
                                     memory_type="LongTermMemory", status="activated",
                                     vector=[1.0, 0.0, 0.0, 0.0])])


def levels(client: RecordingClient) -> dict[str, str | None]:
    return {m: kw.get("consistency_level") for m, kw in client.calls if m != "has_partition"}


async def test_a_server_reads_relaxed_only_where_asked_and_never_relaxes_writes() -> None:
    store = MilvusVectorStore("http://127.0.0.1:1", "c", dim=4,
                              relaxed_consistency="Session")
    client = opened(store)
    await some_reads(store)
    assert levels(client) == {"search": None, "get": None, "query": None, "upsert": None}
    client.calls.clear()
    with relaxed_reads():
        await some_reads(store)
    assert levels(client) == {"search": "Session", "get": "Session", "query": "Session",
                              "upsert": None}


async def test_milvus_lite_never_gets_a_consistency_level(tmp_path: Path) -> None:
    store = MilvusVectorStore(str(tmp_path / "v.db"), "c", dim=4)
    client = opened(store)
    store._partitions.add(partition_name("c1"))  # a partition per cube: the cube has one
    with relaxed_reads():
        await some_reads(store)
    assert levels(client) == {"search": None, "get": None, "query": None, "upsert": None}


def record(node_id: str, cube: str) -> VectorRecord:
    return VectorRecord(id=node_id, cube_id=cube, user_id=cube, memory_type="LongTermMemory",
                        status="activated", vector=[1.0, 0.0, 0.0, 0.0])


async def test_milvus_lite_gives_each_cube_its_own_partition_after_a_restart(
    tmp_path: Path,
) -> None:
    """Milvus Lite 3.2 counts the whole collection for ``count(*)`` of one partition: read
    as "rows in the default partition", it once made every restart put each new cube in
    the default partition, where every read of a cube scans all the cubes there."""
    uri = str(tmp_path / "v.db")
    first = MilvusVectorStore(uri, "c", dim=4)
    await first.upsert([record("a", "cube-a")])
    await first.close()
    again = MilvusVectorStore(uri, "c", dim=4)
    await again.upsert([record("b", "cube-b")])
    assert [h.id for h in await again.search("cube-b", VectorQuery([1.0, 0, 0, 0], 5))] == ["b"]
    await again.close()
    raw = MilvusClient(uri)
    try:
        raw.load_collection("c")
        assert {partition_name("cube-a"), partition_name("cube-b")} <= set(raw.list_partitions("c"))
        assert raw.query("c", filter="", output_fields=["pk"], limit=5,
                         partition_names=["_default"]) == []
    finally:
        raw.close()
