"""The per-cube index in front of a vector store (sinks/vector/cache.py) holds a bounded
number of cubes and vectors, whatever the number of cubes searched, and a cube it let go is
answered from the store beneath with the same results. The store beneath is the shipped
in-memory double (it passes the same contract suite as Milvus)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from memstream.sinks.ports import CubeRows, Pause, VectorHit, VectorQuery, VectorRecord
from memstream.sinks.vector.cache import LOAD_YIELD_S, CachedVectorStore
from memstream.sinks.vector.memory import InMemoryVectorStore

DIM = 8


def vec(seed: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).standard_normal(DIM)]


def records(cube: str, n: int, seed: int = 0) -> list[VectorRecord]:
    return [VectorRecord(id=f"{cube}-n{i}", cube_id=cube, user_id="u", memory_type="LongTermMemory",
                         status="activated", vector=vec(seed * 1000 + i), key=f"key {i}",
                         tags=(f"t{i % 3}",), session_id=f"s{i % 2}")
            for i in range(n)]


def answers(hits: list[VectorHit]) -> list[tuple[str, float, tuple[float, ...], str]]:
    """What a caller reads of a search: ids in order, scores, vectors, metadata."""
    return [(h.id, round(h.score, 5), tuple(np.float32(h.record.vector).tolist()),
             h.record.key) for h in hits]


async def cache_of(cubes: int, per_cube: int, **bounds: int) -> CachedVectorStore:
    inner = InMemoryVectorStore(DIM)
    for c in range(cubes):
        await inner.upsert(records(f"cube{c}", per_cube, seed=c))
    return CachedVectorStore(inner, **bounds)


async def test_it_never_holds_more_cubes_or_vectors_than_its_bounds() -> None:
    cache = await cache_of(40, 10, max_cubes=5, max_vectors=1_000)
    for c in range(40):
        await cache.warm(f"cube{c}")
        assert cache.held[0] <= 5
    assert cache.held == (5, 50)
    by_vectors = await cache_of(40, 10, max_cubes=1_000, max_vectors=35)
    for c in range(40):
        await by_vectors.warm(f"cube{c}")
        assert by_vectors.held[1] <= 35
    assert by_vectors.held == (3, 30)
    # writes to cubes it does not hold leave nothing behind
    for c in range(40, 400):
        await by_vectors.upsert(records(f"cube{c}", 1))
    assert by_vectors.held == (3, 30) and by_vectors._pending == {}


async def test_writes_to_a_held_cube_count_against_the_bound() -> None:
    cache = await cache_of(3, 10, max_vectors=30)
    for c in range(3):
        await cache.warm(f"cube{c}")
    await cache.upsert(records("cube2", 15, seed=9))  # cube2 grows to 15 vectors
    assert cache.held == (2, 25)
    assert not cache.loaded("cube0") and cache.loaded("cube2")
    assert await cache.count("cube2") == 15


async def test_an_evicted_cube_answers_as_before_from_the_store_and_once_reloaded() -> None:
    cache = await cache_of(6, 20, max_cubes=2)
    query = VectorQuery(vec(3), 7)
    filtered = VectorQuery(vec(4), 5, memory_types=("LongTermMemory",))
    await cache.warm("cube0")
    held = (answers(await cache.search("cube0", query)),
            answers(await cache.search("cube0", filtered)),
            await cache.get("cube0", ["cube0-n4", "cube0-n1", "absent"]),
            sorted(await cache.list_ids("cube0")))
    for c in range(1, 6):
        await cache.warm(f"cube{c}")
    assert not cache.loaded("cube0")
    cold = (answers(await cache.search("cube0", query)),  # from the store, loading behind
            answers(await cache.search("cube0", filtered)),
            await cache.get("cube0", ["cube0-n4", "cube0-n1", "absent"]),
            sorted(await cache.list_ids("cube0")))
    await cache.warm("cube0")
    assert cache.loaded("cube0")
    reloaded = (answers(await cache.search("cube0", query)),
                answers(await cache.search("cube0", filtered)),
                await cache.get("cube0", ["cube0-n4", "cube0-n1", "absent"]),
                sorted(await cache.list_ids("cube0")))
    assert held[0] == cold[0] == reloaded[0] and len(held[0]) == 7
    assert held[1] == cold[1] == reloaded[1]
    assert [(r.id, np.float32(r.vector).tolist()) for r in held[2]] == \
        [(r.id, np.float32(r.vector).tolist()) for r in cold[2]] == \
        [(r.id, np.float32(r.vector).tolist()) for r in reloaded[2]]
    assert held[3] == cold[3] == reloaded[3]


async def test_a_write_made_while_a_cube_was_evicted_is_seen_when_it_is_read_again() -> None:
    cache = await cache_of(3, 5, max_cubes=1)
    await cache.warm("cube0")
    await cache.warm("cube1")  # cube0 evicted
    await cache.upsert([VectorRecord(id="late", cube_id="cube0", user_id="u",
                                     memory_type="LongTermMemory", status="activated",
                                     vector=vec(777))])
    await cache.delete("cube0", ["cube0-n0"])
    await cache.warm("cube0")
    hits = await cache.search("cube0", VectorQuery(vec(777), 10))
    assert hits[0].id == "late" and "cube0-n0" not in {h.id for h in hits}
    assert await cache.count("cube0") == 5


async def test_the_least_recently_used_cube_goes_first() -> None:
    cache = await cache_of(4, 3, max_cubes=3)
    for c in range(3):
        await cache.warm(f"cube{c}")
    await cache.search("cube0", VectorQuery(vec(1), 2))  # cube0 used last: cube1 is oldest
    await cache.warm("cube3")
    assert [cache.loaded(f"cube{c}") for c in range(4)] == [True, False, True, True]


class HeldSearches(InMemoryVectorStore):
    """The in-memory store whose searches wait until ``go`` is set, noting when reads happen."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.go = asyncio.Event()
        self.seen: list[str] = []

    async def search(self, cube_id: str, query: VectorQuery) -> list[VectorHit]:
        self.seen.append(f"search {cube_id}")
        await self.go.wait()
        self.seen.append(f"answer {cube_id}")
        return await super().search(cube_id, query)

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        rows = await super().all_rows(cube_id, between)
        self.seen.append(f"load {cube_id}")
        return rows


async def test_a_cube_loading_behind_lets_a_search_in_flight_go_first() -> None:
    """Milvus Lite answers one request at a time: a load that read while a search waited
    would hold that search for the whole read (1,200 vectors: ~300 ms)."""
    inner = HeldSearches()
    await inner.upsert(records("cube0", 20))
    cache = CachedVectorStore(inner)
    search = asyncio.create_task(cache.search("cube0", VectorQuery(vec(3), 5)))  # a miss
    await asyncio.sleep(LOAD_YIELD_S / 5)
    assert inner.seen == ["search cube0"] and not cache.loaded("cube0")
    inner.go.set()
    assert (await search)[0].id == "cube0-n3"
    await cache.warm("cube0")
    assert inner.seen == ["search cube0", "answer cube0", "load cube0"]
    assert cache.loaded("cube0")


async def test_a_store_never_quiet_still_gets_its_cubes_loaded() -> None:
    inner = HeldSearches()
    await inner.upsert(records("cube0", 20))
    cache = CachedVectorStore(inner)
    search = asyncio.create_task(cache.search("cube0", VectorQuery(vec(3), 5)))
    await asyncio.wait_for(cache.warm("cube0"), LOAD_YIELD_S * 20)  # the search still held
    assert inner.seen == ["search cube0", "load cube0"] and cache.loaded("cube0")
    inner.go.set()
    assert (await search)[0].id == "cube0-n3"


class WritesDuringReads(InMemoryVectorStore):
    """The in-memory store that, while a cube is read whole, lets ``during_read`` write."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.reads = 0
        self.during_read: Callable[[], Awaitable[None]] | None = None

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        self.reads += 1
        rows = await super().all_rows(cube_id, between)
        if self.during_read is not None:
            await self.during_read()
        return rows


async def test_a_cube_written_while_it_loads_is_loaded_with_those_writes() -> None:
    """A busy cube is written during every read of it: the load keeps what it read and
    applies the writes made meanwhile, instead of reading again (and giving up)."""
    inner = WritesDuringReads()
    await inner.upsert(records("cube0", 10))
    cache = CachedVectorStore(inner)
    late = VectorRecord(id="late", cube_id="cube0", user_id="u", memory_type="LongTermMemory",
                        status="activated", vector=vec(777))

    async def writes() -> None:
        await cache.upsert([late])
        await cache.delete("cube0", ["cube0-n0"])
        await cache.set_status("cube0", ["cube0-n1"], "archived")

    inner.during_read = writes
    assert await cache.warm("cube0") is not None and inner.reads == 1
    inner.during_read = None
    hits = await cache.search("cube0", VectorQuery(vec(777), 20))
    assert hits[0].id == "late"
    assert {h.id for h in hits} == {"late"} | {f"cube0-n{i}" for i in range(2, 10)}
    assert [r.status for r in await cache.get("cube0", ["cube0-n1"])] == ["archived"]
    assert await cache.count("cube0") == 10 and inner.reads == 1


class CountedReads(InMemoryVectorStore):
    """The in-memory store, counting the whole-cube reads a load makes."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.loads: list[str] = []

    async def all_rows(self, cube_id: str, between: Pause | None = None) -> CubeRows:
        self.loads.append(cube_id)
        return await super().all_rows(cube_id, between)


async def test_a_cube_used_once_is_never_loaded_and_one_used_again_is() -> None:
    """A cube searched once (the long tail of a deployment's cubes) is answered by the store
    beneath and never read whole; several calls within ``load_after_s`` of its first miss
    are one use; used again later, it is loaded and then answered from memory, the same."""
    inner = CountedReads()
    for c in range(2):
        await inner.upsert(records(f"cube{c}", 30, seed=c))
    cache = CachedVectorStore(inner, load_after_s=0.2)
    query = VectorQuery(vec(5), 5)
    first = answers(await cache.search("cube0", query))
    assert answers(await cache.search("cube0", query)) == first  # the same search, again
    await cache.count("cube0")
    await cache.search("cube1", query)
    await asyncio.sleep(0.05)
    assert inner.loads == [] and not cache.loaded("cube0") and not cache.loaded("cube1")
    await asyncio.sleep(0.2)
    assert answers(await cache.search("cube0", query)) == first  # its second use: loads
    await asyncio.sleep(0.05)
    assert inner.loads == ["cube0"] and cache.loaded("cube0") and not cache.loaded("cube1")
    assert answers(await cache.search("cube0", query)) == first  # from memory, the same
    assert inner.loads == ["cube0"]


async def test_at_zero_a_cube_is_loaded_at_its_first_miss() -> None:
    inner = CountedReads()
    await inner.upsert(records("cube0", 10))
    cache = CachedVectorStore(inner, load_after_s=0)
    await cache.search("cube0", VectorQuery(vec(5), 5))
    await asyncio.sleep(0.05)
    assert inner.loads == ["cube0"] and cache.loaded("cube0")


def test_the_settings_bound_the_index_in_front_of_a_lite_file(tmp_path) -> None:  # noqa: ANN001
    """``VECTOR__LITE_CACHE_*`` reach the index a Milvus Lite file gets (nothing is opened)."""
    from memstream.sinks.vector.factory import create_vector_store
    from memstream.topics.settings import Settings, VectorSettings

    settings = Settings(data_dir=tmp_path, vector=VectorSettings(
        uri=str(tmp_path / "m.db"), lite_cache_max_vectors=500, lite_cache_max_cubes=7,
        lite_cache_load_after_s=0))
    store = create_vector_store(settings, DIM)
    assert isinstance(store, CachedVectorStore)
    assert (store.max_vectors, store.max_cubes, store.load_after_s) == (500, 7, 0)
    default = create_vector_store(Settings(data_dir=tmp_path, vector=VectorSettings(
        uri=str(tmp_path / "m.db"))), DIM)
    assert isinstance(default, CachedVectorStore) and default.load_after_s == 1.0


async def test_held_searches_follow_every_change_of_type_and_status() -> None:
    """The cache keeps which rows have a type and status between searches: a status set, a
    record written or deleted since shows in the next search, as the store beneath has it;
    a search for ids and scores only returns the same hits without their vectors."""
    inner = InMemoryVectorStore(DIM)
    await inner.upsert(records("cube0", 12))
    cache = CachedVectorStore(inner, load_after_s=0)
    await cache.warm("cube0")
    query = VectorQuery(vec(3), 4, ["LongTermMemory"], "activated")

    async def both() -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        held = [(h.id, round(h.score, 5)) for h in await cache.search("cube0", query)]
        beneath = [(h.id, round(h.score, 5)) for h in await inner.search("cube0", query)]
        return held, beneath

    held, beneath = await both()
    assert held == beneath and held[0][0] == "cube0-n3"
    await cache.set_status("cube0", ["cube0-n3"], "archived")
    held, beneath = await both()
    assert held == beneath and "cube0-n3" not in dict(held)
    other = VectorRecord(id="u1", cube_id="cube0", user_id="u", memory_type="UserMemory",
                         status="activated", vector=vec(3))
    same = VectorRecord(id="l1", cube_id="cube0", user_id="u", memory_type="LongTermMemory",
                        status="activated", vector=vec(3))
    await cache.upsert([other, same])
    held, beneath = await both()
    assert held == beneath and held[0][0] == "l1" and "u1" not in dict(held)
    await cache.delete("cube0", ["l1"])
    held, beneath = await both()
    assert held == beneath and "l1" not in dict(held)
    bare = await cache.search("cube0", VectorQuery(vec(3), 4, ["LongTermMemory"], "activated",
                                                   with_vectors=False))
    assert [(h.id, round(h.score, 5)) for h in bare] == held
    assert all(h.record.vector == () for h in bare) and cache.loaded("cube0")


async def test_rows_of_ids_are_the_vectors_and_records_of_get_held_or_not() -> None:
    """``MemoryQuery.vector_rows`` (what a search's rerank reads): the records ``get``
    returns, in its order, each vector a row of one float32 matrix, whether the cube is held
    in memory, not yet loaded, or the store has no cache at all; unknown ids are left out."""
    from memstream.sinks.graph.memory import InMemoryGraphStore
    from memstream.sinks.query import MemoryQuery

    inner = InMemoryVectorStore(DIM)
    await inner.upsert(records("cube0", 6))
    ids = ["cube0-n4", "nope", "cube0-n1", "cube0-n4"]
    expected = await inner.get("cube0", ids)
    assert [r.id for r in expected] == ["cube0-n4", "cube0-n1"]
    cold = CachedVectorStore(inner, load_after_s=60)  # never loaded in this test
    held = CachedVectorStore(inner, load_after_s=0)
    await held.warm("cube0")
    for store in (inner, cold, held):
        rows = await MemoryQuery(InMemoryGraphStore(), store).vector_rows("cube0", ids)
        assert rows.vectors.dtype == np.float32 and rows.vectors.shape == (2, DIM)
        assert [r.id for r in rows.records] == ["cube0-n4", "cube0-n1"]
        assert [r.key for r in rows.records] == [r.key for r in expected]
        assert np.array_equal(rows.vectors, np.asarray([r.vector for r in expected],
                                                       dtype=np.float32))
    assert cold.loaded("cube0") is False and held.loaded("cube0")
    empty = await MemoryQuery(InMemoryGraphStore(), held).vector_rows("cube0", ["nope"])
    assert empty.records == [] and empty.vectors.shape == (0, DIM)

