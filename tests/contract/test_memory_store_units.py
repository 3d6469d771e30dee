"""MemoryStore capacity eviction and unit completion, on real FalkorDB and Milvus."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memstream.sinks.memory_store import MemoryStore, vector_record
from memstream.sinks.ports import StoreError, VectorQuery
from memstream.topics.models import MemoryItem
from tests.contract.test_memory_store import T0, FailsFirst, found_ids, node, unit_vec


def aged(i: int, **meta: Any) -> MemoryItem:
    return node(f"n{i}", f"the user collects item number {i}",
                updated_at=T0 + timedelta(minutes=i), **meta)


async def test_eviction_removes_the_oldest_units_from_both_stores(
    memory_store: MemoryStore,
) -> None:
    await memory_store.write([(aged(i), unit_vec(i)) for i in range(6)])
    await memory_store.write([(node("tie-a", updated_at=T0), unit_vec(50)),
                              (aged(9, status="archived"), unit_vec(9)),
                              (aged(8, memory_type="UserMemory"), unit_vec(8))])
    removed = await memory_store.evict_oldest("cube-a", "LongTermMemory", keep=3)
    # FIFO by updated_at, ties: the smaller id first (as GraphStore.remove_oldest)
    assert removed == ["n2", "n1", "tie-a", "n0"]
    left = {n.id for n in (await memory_store.graph.export_cube("cube-a")).nodes}
    assert left == {"n3", "n4", "n5", "n9", "n8"}  # archived and other types untouched
    assert set(await memory_store.vectors.list_ids("cube-a")) == left
    assert await memory_store.evict_oldest("cube-a", "LongTermMemory", keep=3) == []
    assert (await memory_store.repair("cube-a")).consistent


async def test_eviction_deletes_vectors_first_so_a_failed_graph_delete_leaves_no_hit(
    memory_store: MemoryStore,
) -> None:
    await memory_store.write([(aged(i), unit_vec(i)) for i in range(4)])
    broken = FailsFirst(memory_store.graph, "delete_nodes", failures=10)
    store = MemoryStore(broken, memory_store.vectors, attempts=2, backoff_s=0.001)
    with pytest.raises(StoreError, match="graph delete"):
        await store.evict_oldest("cube-a", "LongTermMemory", keep=2)
    assert broken.calls == 2  # retried
    # the evicted units lost their vectors first: no search returns them, not even by vector
    assert set(await memory_store.vectors.list_ids("cube-a")) == {"n2", "n3"}
    for i in (0, 1):
        found = await memory_store.search("cube-a", VectorQuery(unit_vec(i), 4))
        assert {n.id for n, _ in found} == {"n2", "n3"}
    # the same eviction again (the redelivered input) picks the same nodes and finishes
    assert await memory_store.evict_oldest("cube-a", "LongTermMemory", keep=2) == ["n1", "n0"]
    assert {n.id for n in (await memory_store.graph.export_cube("cube-a")).nodes} == {"n2", "n3"}
    assert (await memory_store.repair("cube-a")).consistent


async def test_a_transient_graph_delete_failure_is_retried_within_the_eviction(
    memory_store: MemoryStore,
) -> None:
    await memory_store.write([(aged(i), unit_vec(i)) for i in range(3)])
    flaky = FailsFirst(memory_store.graph, "delete_nodes", failures=1)
    store = MemoryStore(flaky, memory_store.vectors, attempts=3, backoff_s=0.001)
    assert await store.evict_oldest("cube-a", "LongTermMemory", keep=1) == ["n1", "n0"]
    assert flaky.calls == 2
    assert {n.id for n in (await memory_store.graph.export_cube("cube-a")).nodes} == {"n2"}
    assert await memory_store.vectors.list_ids("cube-a") == ["n2"]


async def test_complete_gives_missing_vectors_and_fixes_stale_ones_without_touching_the_graph(
    memory_store: MemoryStore,
) -> None:
    graph_only, stale, whole = aged(1), aged(2), aged(3)
    await memory_store.graph.upsert_nodes("cube-a", [graph_only])  # crash before its vector
    await memory_store.write([(stale.evolve(status="generated"), unit_vec(2)),
                              (whole, unit_vec(3))])
    await memory_store.graph.upsert_nodes("cube-a", [stale])  # crash before its vector update
    before = await memory_store.graph.export_cube("cube-a")
    embedded: list[str] = []

    async def embed(items: Any) -> list[list[float]]:
        embedded.extend(i.id for i in items)
        return [unit_vec(10 + int(i.id[1:])) for i in items]

    fixed = await memory_store.complete("cube-a", ["n1", "n2", "n3", "absent"], embed)
    assert sorted(fixed) == sorted(embedded) == ["n1", "n2"]  # a stale one is re-embedded:
    assert await memory_store.graph.export_cube("cube-a") == before  # its text may be new
    records = {r.id: r for r in await memory_store.vectors.get("cube-a", ["n1", "n2", "n3"])}
    assert records["n2"] == vector_record(stale, records["n2"].vector)
    assert await found_ids(memory_store, "cube-a", VectorQuery(unit_vec(12), 1)) == ["n2"]
    assert await found_ids(memory_store, "cube-a", VectorQuery(unit_vec(11), 1)) == ["n1"]
    assert (await memory_store.repair("cube-a")).consistent
    assert await memory_store.complete("cube-a", ["n1", "n2", "n3"], embed) == []
