"""MemoryStore: graph node + vector as one consistency unit, on real FalkorDB and Milvus Lite."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memstream.sinks.memory_store import MemoryStore, vector_record
from memstream.sinks.ports import (
    Filter,
    GraphStore,
    StoreError,
    VectorQuery,
    VectorRecord,
    VectorStore,
)
from memstream.topics.models import MemoryItem, MemoryMetadata, MemoryType, Status
from tests.contract.vector_fixtures import CONTRACT_DIM

T0 = datetime(2025, 5, 1, 8, 0, tzinfo=UTC)


def node(
    node_id: str,
    text: str = "",
    cube: str = "cube-a",
    memory_type: MemoryType = "LongTermMemory",
    status: Status = "activated",
    **meta: Any,
) -> MemoryItem:
    return MemoryItem(
        id=node_id,
        memory=text or f"memory {node_id}",
        metadata=MemoryMetadata(
            user_id="user-1",
            cube_id=cube,
            memory_type=memory_type,
            status=status,
            created_at=T0,
            updated_at=meta.pop("updated_at", T0),
            **meta,
        ),
    )


def unit_vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(CONTRACT_DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


def near(base: Sequence[float], seed: int, eps: float) -> list[float]:
    """A vector at cosine close to 1 - eps from ``base``."""
    noise = np.asarray(unit_vec(seed))
    v = np.asarray(base) + eps * noise
    return [float(x) for x in v / np.linalg.norm(v)]


class FailsFirst:
    """A real store (graph or vectors) whose chosen method fails its first ``failures``
    calls."""

    def __init__(self, inner: GraphStore | VectorStore, method: str, failures: int) -> None:
        self._inner, self._method, self.failures, self.calls = inner, method, failures, 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name != self._method:
            return target

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls <= self.failures:
                raise StoreError(f"injected failure {self.calls} of {name}")
            return await target(*args, **kwargs)

        return flaky


async def found_ids(store: MemoryStore, cube: str, query: VectorQuery) -> list[str]:
    return [n.id for n, _ in await store.search(cube, query)]


async def test_write_then_search_returns_the_nodes_by_cosine(memory_store: MemoryStore) -> None:
    query = unit_vec(1)
    items = [
        (node("far", "用户喜欢喝茶"), unit_vec(2)),
        (node("close", "the user lives in Lyon"), near(query, 3, 0.1)),
        (node("closest", "the user likes hiking"), near(query, 4, 0.01)),
    ]
    await memory_store.write(items)
    found = await memory_store.search("cube-a", VectorQuery(query, 2))
    assert [(n.id, n.memory) for n, _ in found] == [
        ("closest", "the user likes hiking"),
        ("close", "the user lives in Lyon"),
    ]
    assert found[0][0] == items[2][0]
    expected = float(np.dot(query, items[2][1]))
    assert found[0][1] == pytest.approx(expected, abs=1e-5)


async def test_search_with_a_minimum_score_returns_only_what_reaches_it(
        memory_store: MemoryStore) -> None:
    """A new fact's conflict candidates: only nodes scoring at least ``min_score``, however
    many are asked for (and none at all when nothing is that close)."""
    query = unit_vec(1)
    await memory_store.write([
        (node("far", "the user drinks tea"), unit_vec(2)),
        (node("close", "the user lives in Lyon"), near(query, 3, 0.3)),
        (node("closest", "the user likes hiking"), near(query, 4, 0.01)),
    ])
    every = await memory_store.search("cube-a", VectorQuery(query, 5))
    assert [n.id for n, _ in every] == ["closest", "close", "far"]
    cut = every[0][1] - 0.001  # between the closest's score and the next one's
    assert every[1][1] < cut
    found = await memory_store.search("cube-a", VectorQuery(query, 5), min_score=cut)
    assert [(n.id, s) for n, s in found] == [(every[0][0].id, every[0][1])]
    assert await memory_store.search("cube-a", VectorQuery(unit_vec(9), 5), min_score=0.99) == []


async def test_write_is_an_idempotent_unit(memory_store: MemoryStore) -> None:
    items = [(node(f"n{i}"), unit_vec(i)) for i in range(5)]
    await memory_store.write(items)
    await memory_store.write(items)
    await memory_store.write(items[:2])
    assert await memory_store.vectors.count("cube-a") == 5
    assert len((await memory_store.graph.export_cube("cube-a")).nodes) == 5
    got = await memory_store.get("cube-a", ["n3", "nope", "n0"])
    assert [(n.id, v is not None) for n, v in got] == [("n3", True), ("n0", True)]
    np.testing.assert_allclose(got[0][1] or [], np.float32(unit_vec(3)))


async def test_reader_never_sees_a_vector_whose_node_is_missing(memory_store: MemoryStore) -> None:
    """A half-written unit (vector without node) stays invisible; top-k is still filled."""
    query = unit_vec(10)
    ghosts = [vector_record(node(f"ghost{i}"), near(query, 20 + i, 0.001)) for i in range(6)]
    await memory_store.vectors.upsert(ghosts)  # only the vector half of six units
    await memory_store.write([(node(f"real{i}"), near(query, 40 + i, 0.5)) for i in range(4)])
    found = await memory_store.search("cube-a", VectorQuery(query, 3))
    assert len(found) == 3
    assert all(n.id.startswith("real") for n, _ in found)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


async def test_graph_status_wins_over_a_stale_vector(memory_store: MemoryStore) -> None:
    query = unit_vec(5)
    item = node("n1")
    await memory_store.write([(item, query), (node("n2"), unit_vec(6))])
    await memory_store.graph.upsert_nodes("cube-a", [item.evolve(status="archived")])
    assert await found_ids(memory_store, "cube-a", VectorQuery(query, 5)) == ["n2"]
    archived = await memory_store.search("cube-a", VectorQuery(query, 5, status="archived"))
    assert archived == []  # the vector still says activated, so it is not a candidate either
    report = await memory_store.repair("cube-a", fix=True)
    assert report.stale_vectors == ("n1",)
    archived = await memory_store.search("cube-a", VectorQuery(query, 5, status="archived"))
    assert [n.id for n, _ in archived] == ["n1"]


async def test_transient_vector_failures_are_retried_until_both_agree(
    memory_store: MemoryStore,
) -> None:
    flaky = FailsFirst(memory_store.vectors, "upsert", failures=2)
    store = MemoryStore(memory_store.graph, flaky, attempts=4, backoff_s=0.001)  # type: ignore[arg-type]
    await store.write([(node("n1"), unit_vec(1))])
    assert flaky.calls == 3
    assert (await store.repair("cube-a")).consistent
    assert await found_ids(store, "cube-a", VectorQuery(unit_vec(1), 1)) == ["n1"]


async def test_a_unit_left_half_written_is_invisible_then_completed_by_redelivery(
    memory_store: MemoryStore,
) -> None:
    flaky = FailsFirst(memory_store.vectors, "upsert", failures=10)
    store = MemoryStore(memory_store.graph, flaky, attempts=3, backoff_s=0.001)  # type: ignore[arg-type]
    unit = (node("n1"), unit_vec(1))
    with pytest.raises(StoreError, match="failed after 3 attempts"):
        await store.write([unit])
    assert await memory_store.graph.get_node("cube-a", "n1") is not None  # graph step done
    assert await memory_store.search("cube-a", VectorQuery(unit_vec(1), 5)) == []
    report = await memory_store.repair("cube-a")
    assert report.nodes_without_vectors == ("n1",) and not report.consistent
    await memory_store.write([unit])  # the redelivered event
    assert (await memory_store.repair("cube-a")).consistent
    assert await found_ids(memory_store, "cube-a", VectorQuery(unit_vec(1), 5)) == ["n1"]


async def test_invalid_vectors_write_nothing(memory_store: MemoryStore) -> None:
    with pytest.raises(StoreError, match="dimensions"):
        await memory_store.write([(node("ok"), unit_vec(1)), (node("bad"), [1.0, 2.0])])
    assert await memory_store.graph.get_nodes("cube-a", ["ok", "bad"]) == []
    assert await memory_store.vectors.count() == 0


async def test_delete_removes_both_halves(memory_store: MemoryStore) -> None:
    await memory_store.write([(node("n1"), unit_vec(1)), (node("n2"), unit_vec(2))])
    await memory_store.graph.add_edges("cube-a", [])
    assert await memory_store.delete("cube-a", ["n1", "missing"]) == 1
    assert await found_ids(memory_store, "cube-a", VectorQuery(unit_vec(1), 5)) == ["n2"]
    assert await memory_store.vectors.list_ids("cube-a") == ["n2"]
    assert await memory_store.graph.get_node("cube-a", "n1") is None


async def test_set_status_changes_both_stores(memory_store: MemoryStore) -> None:
    await memory_store.write([(node("n1"), unit_vec(1)), (node("n2"), unit_vec(2))])
    changed = await memory_store.set_status("cube-a", ["n1", "missing"], "archived")
    assert changed == ["n1"]
    assert await found_ids(memory_store, "cube-a", VectorQuery(unit_vec(1), 5)) == ["n2"]
    [(arch, _)] = await memory_store.search("cube-a",
                                            VectorQuery(unit_vec(1), 5, status="archived"))
    assert arch.metadata.status == "archived" and arch.metadata.updated_at == T0
    [record] = await memory_store.vectors.get("cube-a", ["n1"])
    assert record.status == "archived"
    assert await memory_store.set_status("cube-a", ["n1"], "archived") == []


async def test_search_applies_filters_the_vector_store_cannot(memory_store: MemoryStore) -> None:
    """Filters on fields only the graph holds still fill top-k (the join fetches deeper)."""
    query = unit_vec(7)
    low = [
        (node(f"low{i}", confidence=10.0, tags=("t",)), near(query, 100 + i, 0.01))
        for i in range(12)
    ]
    high = [
        (node(f"high{i}", confidence=90.0, tags=("t",)), near(query, 200 + i, 0.8))
        for i in range(3)
    ]
    await memory_store.write([*low, *high])
    flt = [Filter("confidence", ">", 50), Filter("tags", "contains", "t")]
    found = await memory_store.search("cube-a", VectorQuery(query, 3, filters=flt))
    assert sorted(n.id for n, _ in found) == ["high0", "high1", "high2"]
    text = await memory_store.search(
        "cube-a", VectorQuery(query, 20, filters=[Filter("memory", "contains", "low1")]))
    assert sorted(n.id for n, _ in text) == ["low1", "low10", "low11"]


async def test_memory_types_and_cubes_are_respected(memory_store: MemoryStore) -> None:
    q = unit_vec(1)
    await memory_store.write(
        [
            (node("lt", memory_type="LongTermMemory"), q),
            (node("um", memory_type="UserMemory"), q),
            (node("lt", cube="cube-b"), q),
        ]
    )
    found = await memory_store.search("cube-a", VectorQuery(q, 5, memory_types=["UserMemory"]))
    assert [n.id for n, _ in found] == ["um"]
    other = await memory_store.search("cube-b", VectorQuery(q, 5))
    assert [(n.id, n.metadata.cube_id) for n, _ in other] == [("lt", "cube-b")]


async def test_repair_reports_and_fixes_each_kind_of_drift(memory_store: MemoryStore) -> None:
    await memory_store.write([(node("ok"), unit_vec(1)), (node("stale"), unit_vec(2))])
    await memory_store.graph.upsert_nodes("cube-a", [node("no-vector"), node("stale", key="new")])
    await memory_store.vectors.upsert([vector_record(node("orphan"), unit_vec(3))])
    report = await memory_store.repair("cube-a")
    assert (report.nodes_without_vectors, report.vectors_without_nodes, report.stale_vectors) == (
        ("no-vector",),
        ("orphan",),
        ("stale",),
    )
    assert not report.fixed
    assert await memory_store.vectors.list_ids("cube-a") == ["ok", "orphan", "stale"]

    async def embed(items: Sequence[MemoryItem]) -> list[list[float]]:
        return [unit_vec(len(i.memory)) for i in items]

    fixed = await memory_store.repair("cube-a", fix=True, embed=embed)
    assert fixed.fixed
    assert (await memory_store.repair("cube-a")).consistent
    [record] = await memory_store.vectors.get("cube-a", ["stale"])
    assert record.key == "new"
    np.testing.assert_allclose(record.vector, np.float32(unit_vec(2)))


async def test_clear_cube_erases_both_stores_of_one_cube(memory_store: MemoryStore) -> None:
    await memory_store.write([(node(f"a{i}"), unit_vec(i)) for i in range(3)])
    await memory_store.write([(node("b", cube="cube-b"), unit_vec(9))])
    assert await memory_store.clear_cube("cube-a") == (3, 3)
    assert await memory_store.search("cube-a", VectorQuery(unit_vec(1), 5)) == []
    assert await memory_store.vectors.count() == 1
    assert await found_ids(memory_store, "cube-b", VectorQuery(unit_vec(9), 5)) == ["b"]


async def test_updated_at_filters_agree_between_vector_and_graph(memory_store: MemoryStore) -> None:
    q = unit_vec(1)
    await memory_store.write(
        [(node(f"d{i}", updated_at=T0 + timedelta(days=i)), near(q, i, 0.1)) for i in range(4)]
    )
    flt = [Filter("updated_at", ">=", (T0 + timedelta(days=2)).isoformat())]
    assert sorted(await found_ids(memory_store, "cube-a", VectorQuery(q, 10, filters=flt))) == [
        "d2",
        "d3",
    ]
    [record] = await memory_store.vectors.get("cube-a", ["d1"])
    assert isinstance(record, VectorRecord)
    assert datetime.fromisoformat(record.updated_at) == T0 + timedelta(days=1)
