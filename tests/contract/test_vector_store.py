"""The VectorStore contract, run against every adapter (see vector_fixtures.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from memstream.sinks.ports import Filter, StoreError, VectorQuery, VectorRecord, VectorStore
from memstream.sinks.vector.cache import CachedVectorStore
from memstream.sinks.vector.milvus import MilvusVectorStore
from memstream.topics.models import MemoryType, Status
from tests.contract.vector_fixtures import CONTRACT_DIM, make_vector_store

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
rng = np.random.default_rng(7)


def vec(seed: int | None = None, dim: int = CONTRACT_DIM) -> list[float]:
    gen = rng if seed is None else np.random.default_rng(seed)
    return [float(x) for x in gen.standard_normal(dim)]


def rec(
    node_id: str,
    cube: str = "cube-a",
    vector: Sequence[float] | None = None,
    memory_type: MemoryType = "LongTermMemory",
    status: Status = "activated",
    **kw: object,
) -> VectorRecord:
    return VectorRecord(
        id=node_id,
        cube_id=cube,
        user_id=str(kw.pop("user_id", "user-1")),
        memory_type=memory_type,
        status=status,
        vector=vector if vector is not None else vec(),
        **kw,  # type: ignore[arg-type]
    )


def ids(hits: Sequence[object]) -> set[str]:
    return {h.id for h in hits}  # type: ignore[attr-defined]


async def search_ids(store: VectorStore, flt: Sequence[Filter], cube: str = "cube-a") -> set[str]:
    return ids(await store.search(cube, VectorQuery(vec(1), 100, status=None, filters=flt)))


async def test_ensure_collection_is_idempotent_and_data_survives_reopen(
    vector_store: VectorStore, vector_backend: str, vector_uri: str, vector_collection: str
) -> None:
    await vector_store.ensure_collection()
    await vector_store.upsert([rec("n1"), rec("n2")])
    again = make_vector_store(vector_backend, vector_uri, vector_collection, CONTRACT_DIM)
    await again.ensure_collection()
    assert await again.count("cube-a") == 2
    assert {r.id for r in await again.get("cube-a", ["n1", "n2"])} == {"n1", "n2"}
    await again.close()


async def test_dimension_mismatch_is_a_clear_error(
    vector_store: VectorStore, vector_backend: str, vector_uri: str, vector_collection: str
) -> None:
    wrong = make_vector_store(vector_backend, vector_uri, vector_collection, CONTRACT_DIM * 2)
    with pytest.raises(StoreError, match=rf"dimension {CONTRACT_DIM} but the embedder produces 32"):
        await wrong.ensure_collection()
    await wrong.close()


async def test_bad_vectors_are_rejected_before_anything_is_written(
    vector_store: VectorStore,
) -> None:
    good = rec("good")
    for bad in (rec("short", vector=[1.0] * (CONTRACT_DIM - 1)), rec("zero", vector=[0.0] * 16)):
        with pytest.raises(StoreError):
            await vector_store.upsert([good, bad])
    with pytest.raises(StoreError, match="shape"):
        await vector_store.search("cube-a", VectorQuery([1.0] * (CONTRACT_DIM + 1), 5))
    assert await vector_store.count() == 0


async def test_upsert_is_idempotent_and_replaces_by_id(vector_store: VectorStore) -> None:
    first = [rec("n1", vector=vec(11), key="old"), rec("n2", vector=vec(12))]
    await vector_store.upsert(first)
    await vector_store.upsert(first)
    assert await vector_store.count("cube-a") == 2
    await vector_store.upsert([rec("n1", vector=vec(13), key="new", tags=("t",))])
    [got] = await vector_store.get("cube-a", ["n1"])
    assert await vector_store.count("cube-a") == 2
    assert (got.key, got.tags) == ("new", ("t",))
    np.testing.assert_allclose(got.vector, np.float32(vec(13)), rtol=0, atol=0)


async def test_get_returns_stored_records_in_requested_order(vector_store: VectorStore) -> None:
    stored = rec(
        "n1",
        vector=vec(5),
        memory_type="UserMemory",
        status="archived",
        key="k",
        tags=("a", "b"),
        session_id="s1",
        hierarchy_level="concept",
        type="event",
        updated_at=T0.isoformat(),
    )
    await vector_store.upsert([stored, rec("n2"), rec("n3")])
    got = await vector_store.get("cube-a", ["n3", "missing", "n1"])
    assert [r.id for r in got] == ["n3", "n1"]
    expected = replace(stored, vector=[float(x) for x in np.float32(vec(5))])
    assert replace(got[1], vector=list(got[1].vector)) == expected  # any sequence of floats
    assert await vector_store.get("cube-a", []) == []
    assert await vector_store.get("no-such-cube", ["n1"]) == []


async def test_delete_and_count_per_cube_and_total(vector_store: VectorStore) -> None:
    await vector_store.upsert([rec(f"a{i}") for i in range(5)])
    await vector_store.upsert([rec(f"b{i}", cube="cube-b") for i in range(3)])
    assert (await vector_store.count("cube-a"), await vector_store.count("cube-b")) == (5, 3)
    assert await vector_store.count() == 8
    await vector_store.delete("cube-a", ["a0", "a1", "unknown"])
    await vector_store.delete("cube-b", ["a2"])  # another cube's id: nothing happens
    await vector_store.delete("never-written", ["a3"])
    assert await vector_store.count("cube-a") == 3
    assert await vector_store.list_ids("cube-a") == ["a2", "a3", "a4"]
    assert await vector_store.count() == 6
    assert await vector_store.clear_cube("cube-a") == 3
    assert await vector_store.clear_cube("cube-a") == 0
    assert (await vector_store.count("cube-a"), await vector_store.count()) == (0, 3)


async def test_search_ranks_like_exact_cosine(vector_store: VectorStore) -> None:
    vectors = np.random.default_rng(3).standard_normal((120, CONTRACT_DIM)) * 3.0  # not unit
    await vector_store.upsert([rec(f"n{i}", vector=v.tolist()) for i, v in enumerate(vectors)])
    await vector_store.upsert([rec(f"x{i}", cube="cube-b", vector=vec()) for i in range(50)])
    for seed in range(5):
        query = np.random.default_rng(100 + seed).standard_normal(CONTRACT_DIM)
        cos = (vectors @ query) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
        order = np.argsort(-cos)[:10]
        hits = await vector_store.search("cube-a", VectorQuery(query.tolist(), 10))
        assert [h.id for h in hits] == [f"n{i}" for i in order]
        np.testing.assert_allclose([h.score for h in hits], cos[order], atol=1e-4)
        assert all(h.record.cube_id == "cube-a" for h in hits)


async def test_a_search_for_scores_only_ranks_the_same(vector_store: VectorStore) -> None:
    """``with_vectors=False`` (turn ranking reads ids and scores): the same hits, scores and
    metadata; a vector, if the store sends one at all, is the stored one."""
    stored = {f"n{i}": rec(f"n{i}", memory_type="UserMemory", key=f"k{i}") for i in range(40)}
    await vector_store.upsert(list(stored.values()))
    query = VectorQuery(vec(11), 10, ["UserMemory"])
    full = await vector_store.search("cube-a", query)
    bare = await vector_store.search("cube-a", replace(query, with_vectors=False))
    assert [(h.id, h.record.key) for h in bare] == [(h.id, h.record.key) for h in full]
    np.testing.assert_allclose([h.score for h in bare], [h.score for h in full], atol=1e-6)
    assert all(len(h.record.vector) == CONTRACT_DIM for h in full)
    for h in bare:
        assert not h.record.vector or np.allclose(h.record.vector, stored[h.id].vector,
                                                  atol=1e-5)


async def test_search_after_writes_ranks_the_current_vectors(vector_store: VectorStore) -> None:
    rng = np.random.default_rng(5)
    vectors = {f"n{i}": rng.standard_normal(CONTRACT_DIM) for i in range(40)}
    await vector_store.upsert([rec(i, vector=v.tolist()) for i, v in vectors.items()])
    query = rng.standard_normal(CONTRACT_DIM)
    # searched once before the writes
    await vector_store.search("cube-a", VectorQuery(query.tolist(), 5))
    for round_ in range(3):  # new rows, replaced rows and deleted rows between searches
        fresh = {f"new{round_}-{i}": rng.standard_normal(CONTRACT_DIM) for i in range(3)}
        replaced = {f"n{round_ * 5 + i}": rng.standard_normal(CONTRACT_DIM) for i in range(3)}
        await vector_store.upsert([rec(i, vector=v.tolist()) for i, v in {**fresh,
                                                                            **replaced}.items()])
        gone = [f"n{30 + round_}"]
        await vector_store.delete("cube-a", gone)
        vectors = {**{i: v for i, v in vectors.items() if i not in gone}, **fresh, **replaced}
        ids = list(vectors)
        matrix = np.asarray([vectors[i] for i in ids])
        cos = (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
        hits = await vector_store.search("cube-a", VectorQuery(query.tolist(), 8))
        assert [h.id for h in hits] == [ids[i] for i in np.argsort(-cos)[:8]]
        np.testing.assert_allclose([h.score for h in hits], np.sort(cos)[::-1][:8], atol=1e-4)


async def test_search_filters_types_and_status(vector_store: VectorStore) -> None:
    await vector_store.upsert(
        [
            rec("lt", memory_type="LongTermMemory"),
            rec("um", memory_type="UserMemory"),
            rec("wm", memory_type="WorkingMemory"),
            rec("arch", status="archived"),
        ]
    )
    q = vec(1)
    assert ids(await vector_store.search("cube-a", VectorQuery(q, 10))) == {"lt", "um", "wm"}
    two_types = VectorQuery(q, 10, ["UserMemory", "WorkingMemory"])
    assert ids(await vector_store.search("cube-a", two_types)) == {"um", "wm"}
    assert ids(await vector_store.search("cube-a", VectorQuery(q, 10, []))) == set()
    archived = VectorQuery(q, 10, status="archived")
    assert ids(await vector_store.search("cube-a", archived)) == {"arch"}
    assert len(await vector_store.search("cube-a", VectorQuery(q, 10, status=None))) == 4
    assert len(await vector_store.search("cube-a", VectorQuery(q, 2, status=None))) == 2


async def test_set_status_moves_records_between_status_filters(vector_store: VectorStore) -> None:
    await vector_store.upsert([rec("n1", vector=vec(9)), rec("n2")])
    await vector_store.set_status("cube-a", ["n1", "missing"], "archived")
    assert ids(await vector_store.search("cube-a", VectorQuery(vec(9), 10))) == {"n2"}
    [hit] = await vector_store.search("cube-a", VectorQuery(vec(9), 10, status="archived"))
    assert hit.id == "n1" and hit.score == pytest.approx(1.0, abs=1e-5)
    await vector_store.set_status("cube-b", ["n2"], "deleted")  # other cube: no effect
    assert ids(await vector_store.search("cube-a", VectorQuery(vec(9), 10))) == {"n2"}


async def test_cubes_are_isolated_even_with_the_same_node_id(vector_store: VectorStore) -> None:
    await vector_store.upsert([rec("same", cube="cube-a", vector=vec(1), key="a")])
    await vector_store.upsert([rec("same", cube="cube-b", vector=vec(2), key="b")])
    await vector_store.upsert([rec("only-b", cube="cube-b", vector=vec(1))])
    hits = await vector_store.search("cube-a", VectorQuery(vec(1), 10))
    assert [(h.id, h.record.key) for h in hits] == [("same", "a")]
    assert [r.key for r in await vector_store.get("cube-b", ["same"])] == ["b"]
    await vector_store.delete("cube-a", ["same"])
    assert await vector_store.list_ids("cube-b") == ["only-b", "same"]
    assert await vector_store.search("cube-a", VectorQuery(vec(1), 10)) == []
    assert await vector_store.search("cube-zzz", VectorQuery(vec(1), 10)) == []


FILTER_DATA = [
    rec("k1", key="alpha", tags=("red", "blue"), session_id="s1", user_id="u1"),
    rec("k2", key="beta", tags=("blue",), session_id="s2", type="event", user_id="u2"),
    rec("k3", key="gamma", tags=(), hierarchy_level="topic", type="topic", user_id="u1"),
    rec("k4", key="delta", tags=("green",), memory_type="UserMemory", user_id="u3"),
]
TIMES = {"k1": T0, "k2": T0 + timedelta(days=1), "k3": T0 + timedelta(days=2), "k4": None}


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (Filter("key", "=", "beta"), {"k2"}),
        (Filter("key", "!=", "beta"), {"k1", "k3", "k4"}),
        (Filter("key", "in", ["alpha", "gamma", "nope"]), {"k1", "k3"}),
        (Filter("key", "in", []), set()),
        (Filter("key", "<", "beta"), {"k1"}),
        (Filter("key", ">=", "delta"), {"k3", "k4"}),
        (Filter("tags", "contains", "blue"), {"k1", "k2"}),
        (Filter("tags", "in", ["green", "red"]), {"k1", "k4"}),
        (Filter("user_id", "=", "u1"), {"k1", "k3"}),
        (Filter("session_id", "=", None), {"k3", "k4"}),
        (Filter("session_id", "!=", "s1"), {"k2", "k3", "k4"}),
        (Filter("type", "=", "event"), {"k2"}),
        (Filter("hierarchy_level", "=", "topic"), {"k3"}),
        (Filter("memory_type", "=", "UserMemory"), {"k4"}),
        (Filter("id", "in", ("k1", "k4")), {"k1", "k4"}),
        (Filter("updated_at", ">", T0), {"k2", "k3"}),
        (Filter("updated_at", "<=", "2025-03-02T12:00:00Z"), {"k1", "k2", "k4"}),
        (Filter("updated_at", "=", T0.astimezone(timezone(timedelta(hours=8)))), {"k1"}),
        (Filter("updated_at", "in", [T0, T0 + timedelta(days=2)]), {"k1", "k3"}),
    ],
    ids=lambda v: str(v) if isinstance(v, Filter) else "",
)
async def test_metadata_filters(vector_store: VectorStore, flt: Filter, expected: set[str]) -> None:
    records = [
        replace(r, updated_at=TIMES[r.id].isoformat() if TIMES[r.id] else "") for r in FILTER_DATA
    ]
    await vector_store.upsert([*records, rec("k1", cube="cube-b", key="beta")])
    assert await search_ids(vector_store, [flt]) == expected


async def test_filters_combine_with_and(vector_store: VectorStore) -> None:
    await vector_store.upsert(FILTER_DATA)
    both = [Filter("tags", "contains", "blue"), Filter("user_id", "=", "u1")]
    assert await search_ids(vector_store, both) == {"k1"}


@pytest.mark.parametrize(
    "flt",
    [
        Filter("memory", "contains", "x"),
        Filter("key", "contains", "x"),
        Filter("confidence", ">", 50),
        Filter("tags", "<", "x"),
        Filter("key", "=", 3),
        Filter("updated_at", ">", datetime(2025, 1, 1)),  # noqa: DTZ001 (naive on purpose)
    ],
    ids=str,
)
async def test_unsupported_filters_raise(vector_store: VectorStore, flt: Filter) -> None:
    await vector_store.upsert(FILTER_DATA)
    with pytest.raises(StoreError):
        await vector_store.search("cube-a", VectorQuery(vec(1), 5, filters=[flt]))


PAYLOADS = [
    "it's",
    'say "hi"',
    "back\\slash\\",
    ") or 1==1 or (",
    "' or '1'=='1",
    '" or id != "',
    "100%_off",
    "`rm -rf`",
    "记忆 中文",
    "line\nbreak\ttab",
    "{p0}",
    "\\\"'",
]


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_injection_values_match_literally(vector_store: VectorStore, payload: str) -> None:
    """Keys, tags, ids and filter values with quotes/escapes never break or widen a filter."""
    target = rec(f"id-{payload}", key=payload, tags=(payload, "x"))
    decoys = [
        rec("decoy-1", key="it", tags=("x",)),
        rec("decoy-2", key=payload + " ", tags=(payload[:-1] or "y",)),
        rec("decoy-3", key="", tags=()),
    ]
    await vector_store.upsert([target, *decoys])
    assert await search_ids(vector_store, [Filter("key", "=", payload)]) == {target.id}
    assert await search_ids(vector_store, [Filter("tags", "contains", payload)]) == {target.id}
    assert await search_ids(vector_store, [Filter("key", "in", [payload])]) == {target.id}
    assert await search_ids(vector_store, [Filter("id", "=", target.id)]) == {target.id}
    assert await search_ids(vector_store, [Filter("key", "!=", payload)]) == {
        "decoy-1",
        "decoy-2",
        "decoy-3",
    }
    [got] = await vector_store.get("cube-a", [target.id])
    assert (got.key, got.tags) == (payload, (payload, "x"))
    await vector_store.delete("cube-a", [target.id])
    assert await vector_store.list_ids("cube-a") == ["decoy-1", "decoy-2", "decoy-3"]
    other = f"cube-{payload}"
    await vector_store.upsert([rec("n", cube=other)])
    assert await vector_store.clear_cube(other) == 1
    assert await vector_store.count("cube-a") == 3


async def test_milvus_lite_file_held_by_another_process_is_a_clear_error(
    tmp_path: Path,
) -> None:
    """Milvus Lite allows one process per file; the second gets an actionable StoreError."""
    uri = str(tmp_path / "held.db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pymilvus import MilvusClient
                MilvusClient({uri!r})
                print("ready", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        deadline = time.monotonic() + 60
        while holder.stdout.readline().strip() != "ready":
            assert holder.poll() is None and time.monotonic() < deadline, "holder did not start"
        store = MilvusVectorStore(uri, "c", dim=4)
        with pytest.raises(StoreError, match="one process per file"):
            await store.ensure_collection()
    finally:
        holder.kill()
        holder.wait()


async def test_all_records_returns_one_cube_whole(vector_store: VectorStore) -> None:
    mine = [rec(f"a{i}", vector=vec(i), tags=(f"t{i}",)) for i in range(30)]
    await vector_store.upsert([*mine, rec("b1", cube="cube-b", vector=vec(99))])
    await vector_store.delete("cube-a", ["a0"])
    got = {r.id: r for r in await vector_store.all_records("cube-a")}
    assert set(got) == {f"a{i}" for i in range(1, 30)}
    assert got["a7"].tags == ("t7",)
    np.testing.assert_allclose(got["a7"].vector, np.float32(vec(7)), rtol=0, atol=0)
    assert await vector_store.all_records("cube-none") == []


async def test_all_rows_reads_every_record_once_with_its_vector(vector_store: VectorStore) -> None:
    """A cube read whole as records and one matrix (the cache's load): 600 records span
    several slices of a Milvus read, and each comes once, its row the vector it was given."""
    mine = [rec(f"a{i}", vector=vec(i), key=f"key {i}") for i in range(600)]
    await vector_store.upsert([*mine, rec("b1", cube="cube-b", vector=vec(99))])
    pauses = 0

    async def between() -> None:
        nonlocal pauses
        pauses += 1

    rows = await vector_store.all_rows("cube-a", between)
    if isinstance(vector_store, MilvusVectorStore):  # the caller may let others go between
        assert pauses >= 2  # slices
    elif not isinstance(vector_store, CachedVectorStore):  # held in memory: no read to pause
        assert pauses == 1
    assert len(rows.records) == 600
    assert sorted(r.id for r in rows.records) == sorted(r.id for r in mine)
    assert rows.vectors.shape == (600, CONTRACT_DIM) and rows.vectors.dtype == np.float32
    for record, row in zip(rows.records, rows.vectors, strict=True):
        assert record.key == f"key {record.id[1:]}" and len(record.vector) == 0
        np.testing.assert_allclose(row, np.float32(vec(int(record.id[1:]))), rtol=0, atol=0)
    empty = await vector_store.all_rows("cube-none")
    assert empty.records == [] and empty.vectors.shape == (0, CONTRACT_DIM)


async def test_the_cache_never_makes_a_search_wait_for_a_cold_cube(
    milvus_lite_uri: str, vector_collection: str
) -> None:
    """A miss is answered by Milvus while the cube loads; later reads come from memory and
    see writes made during and after the load."""
    inner = MilvusVectorStore(milvus_lite_uri, vector_collection, dim=CONTRACT_DIM)
    cache = CachedVectorStore(inner)
    await cache.ensure_collection()
    try:
        await inner.upsert([rec(f"n{i}", vector=vec(i)) for i in range(50)])
        cold = await cache.search("cube-a", VectorQuery(vec(3), 5))
        assert cold[0].id == "n3"
        await cache.upsert([rec("late", vector=vec(3))])  # may race the background load
        assert await cache.warm("cube-a") is not None
        await inner.delete("cube-a", ["n3"])  # behind the cache's back: proves reads are cached
        warm = await cache.search("cube-a", VectorQuery(vec(3), 5))
        assert {h.id for h in warm[:2]} == {"n3", "late"}
        assert await cache.count("cube-a") == 51
    finally:
        await inner.drop()
        await cache.close()
