"""The episode indexes of turn ranking (streams/core/episode_index.py): a worker holds those
of the cubes searched last, at most ``search.episode_index_cubes`` cubes and
``.episode_index_turns`` turns, and builds a cube's again from the store when it comes back."""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, datetime, timedelta

import pytest

from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.query import MemoryQuery
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.streams.core import episode_index
from memstream.streams.core.episode_index import EpisodeIndex, EpisodeIndexes, indexes_for
from memstream.streams.core.lexical import terms
from memstream.streams.runtime import foreground as foreground_module
from memstream.streams.runtime.foreground import Foreground
from memstream.topics.models import MemoryItem, MemoryMetadata, SourceRef
from memstream.topics.settings import SearchSettings

T = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
LINES = ["Caroline: I adopted a grey cat called Miso.", "Melanie: What does Miso eat?",
         "Caroline: Mostly tuna, and my brother's sourdough.", "Melanie: Lucky cat!",
         "Caroline: We booked a trip to Lisbon in July."]


async def store_with(cubes: int, episodes: int = 1) -> MemoryQuery:
    """A store whose cubes each hold ``episodes`` episodes of five turns."""
    graph = InMemoryGraphStore()
    for c in range(cubes):
        cube = f"cube{c}"
        await graph.upsert_nodes(cube, [MemoryItem(
            id=f"{cube}-e{e}", memory="\n".join(f"{line} ({cube}, {e})" for line in LINES),
            metadata=MemoryMetadata(
                user_id=cube, cube_id=cube, memory_type="EpisodicMemory", session_id="s1",
                created_at=T + timedelta(minutes=e),
                sources=tuple(SourceRef(message_id=f"{cube}-m{e}-{i}") for i in range(5))))
            for e in range(episodes)])
    return MemoryQuery(graph, InMemoryVectorStore(dim=4))


def answers(index: EpisodeIndex) -> tuple[object, ...]:
    """What turn ranking reads of an index: the turns, their sources, speakers and BM25."""
    return ([(t.text, t.message_id) for t in index.turns], index.session_of_turn,
            [index.speakers[s] for s in index.speaker_of_turn],
            index.turn_bm25.scores(terms("what does the cat eat")).tolist(),
            index.episode_bm25.scores(terms("trip to Lisbon")).tolist())


async def test_it_never_holds_more_cubes_or_turns_than_its_bounds() -> None:
    query = await store_with(30, episodes=2)  # ten turns a cube
    by_cubes = EpisodeIndexes(max_cubes=3)
    by_turns = EpisodeIndexes(max_turns=25)
    for c in range(30):
        await by_cubes.get(query, f"cube{c}")
        await by_turns.get(query, f"cube{c}")
        assert by_cubes.sizes[0] <= 3 and by_turns.sizes[1] <= 25
    assert by_cubes.sizes == (3, 30) and by_turns.sizes == (2, 20)
    assert len(by_cubes._locks) <= 3 and len(by_turns._locks) <= 2  # nor a lock per cube


async def test_an_evicted_cube_is_built_again_from_the_store_with_the_same_answers() -> None:
    query = await store_with(3, episodes=3)
    indexes = EpisodeIndexes(max_cubes=1)
    first = await indexes.get(query, "cube0")
    before = answers(first)
    assert any("Miso eat? (cube0, 2)" in t.text for t in first.turns)
    await indexes.get(query, "cube1")
    assert not indexes.held("cube0")
    again = await indexes.get(query, "cube0")
    assert again is not first and answers(again) == before and indexes.held("cube0")


async def test_the_least_recently_searched_cube_goes_first() -> None:
    query = await store_with(4)
    indexes = EpisodeIndexes(max_cubes=3)
    for c in range(3):
        await indexes.get(query, f"cube{c}")
    await indexes.get(query, "cube0")  # searched again: cube1 is now the oldest
    await indexes.get(query, "cube3")
    assert [indexes.held(f"cube{c}") for c in range(4)] == [True, False, True, True]


async def test_the_settings_bound_the_indexes_of_a_store() -> None:
    query = await store_with(5)
    indexes = indexes_for(query, SearchSettings(episode_index_cubes=2))
    for c in range(5):
        await indexes.get(query, f"cube{c}")
    assert indexes.sizes[0] == 2 and indexes_for(query) is indexes


async def test_a_cube_indexed_in_the_background_is_read_in_pages_with_the_same_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cube over the inline bound is indexed behind its search, its episodes read a page at
    a time (so that the reads leave room for other searches); the index answers as one built
    from a single read."""
    query = await store_with(1, episodes=7)
    inline = await EpisodeIndexes().get(query, "cube0")
    reads: list[tuple[int, int | None]] = []
    real = query.all_of_type

    async def counted(cube_id: str, memory_type: str, status: str | None = "activated",
                      skip: int = 0, limit: int | None = None) -> list[MemoryItem]:
        reads.append((skip, limit))
        return await real(cube_id, memory_type, status, skip=skip, limit=limit)  # type: ignore[arg-type]

    monkeypatch.setattr(query, "all_of_type", counted)
    monkeypatch.setattr(episode_index, "READ_PAGE", 3)
    assert await EpisodeIndexes().ready(query, "cube0", inline=7)  # within the bound
    assert reads == []  # nothing read: the search builds it as it always did
    indexes = EpisodeIndexes()
    assert not await indexes.ready(query, "cube0", inline=6)  # 7 episodes: built behind
    assert not await indexes.ready(query, "cube0", inline=6)  # not waited for, not twice
    for _ in range(200):
        if indexes.held("cube0"):
            break
        await asyncio.sleep(0.01)
    paged = await indexes.get(query, "cube0")
    assert reads == [(0, 3), (3, 3), (6, 3)]
    assert answers(paged) == answers(inline) and len(paged.episodes) == 7


async def test_an_episode_added_is_in_the_index_within_the_recount_window_or_at_once_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    query = await store_with(1, episodes=1)
    graph = query._graph
    indexes = EpisodeIndexes()
    counts = 0
    count = query.count_by_type

    async def counted(*args: object, **kwargs: object) -> dict[str, int]:
        nonlocal counts
        counts += 1
        return await count(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(query, "count_by_type", counted)
    clock = [1000.0]
    monkeypatch.setattr(episode_index.time, "monotonic", lambda: clock[0])
    first = await indexes.get(query, "cube0")
    added = first.episodes[0].model_copy(update={"id": "cube0-e1"})  # a second episode
    await graph.upsert_nodes("cube0", [added])
    clock[0] += episode_index.COUNT_EVERY_S / 2
    before = counts
    # back-to-back searches use the index without asking the store again ...
    assert await indexes.get(query, "cube0") is first and counts == before
    # ... a search waiting for its caller's write counts, and finds the new episode
    fresh = await indexes.get(query, "cube0", recount=True)
    assert counts == before + 1 and len(fresh.episodes) == 2
    # ... and every search counts once the last count is COUNT_EVERY_S old
    clock[0] += episode_index.COUNT_EVERY_S
    await indexes.get(query, "cube0")
    assert counts == before + 2


async def test_a_background_build_reads_no_page_while_a_search_is_being_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A big cube's index is built behind its search; while the worker answers another
    search the build waits (at most ``YIELD_MAX_S`` a step), then finishes with the answers
    of a build made in one read."""
    monkeypatch.setattr(foreground_module, "YIELD_MAX_S", 30.0)
    monkeypatch.setattr(episode_index, "READ_PAGE", 3)
    query = await store_with(1, episodes=7)
    inline = await EpisodeIndexes().get(query, "cube0")
    reads: list[int] = []
    real = query.all_of_type

    async def counted(cube_id: str, memory_type: str, status: str | None = "activated",
                      skip: int = 0, limit: int | None = None) -> list[MemoryItem]:
        reads.append(skip)
        return await real(cube_id, memory_type, status, skip=skip, limit=limit)  # type: ignore[arg-type]

    monkeypatch.setattr(query, "all_of_type", counted)
    foreground = Foreground()
    indexes = indexes_for(query, foreground=foreground)
    with foreground.request():  # a search being answered
        assert not await indexes.ready(query, "cube0", inline=6)
        await asyncio.sleep(0.2)
        assert reads == [] and not indexes.held("cube0")
    for _ in range(200):
        if indexes.held("cube0"):
            break
        await asyncio.sleep(0.01)
    assert reads == [0, 3, 6]
    assert answers(await indexes.get(query, "cube0")) == answers(inline)


async def test_a_search_that_waits_for_a_background_build_is_not_made_to_wait_by_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that needs the cube's index now (its episodes changed) waits for the build
    under way; that build stops yielding, or the search would wait for its own answer."""
    monkeypatch.setattr(foreground_module, "YIELD_MAX_S", 30.0)
    monkeypatch.setattr(episode_index, "READ_PAGE", 3)
    query = await store_with(1, episodes=7)
    foreground = Foreground()
    indexes = indexes_for(query, foreground=foreground)
    with foreground.request():  # this search itself
        assert not await indexes.ready(query, "cube0", inline=6)  # the build begins, waits
        await asyncio.sleep(0.05)
        index = await asyncio.wait_for(indexes.get(query, "cube0", recount=True), 5.0)
    assert len(index.episodes) == 7


def test_a_build_pauses_every_so_many_turns_and_answers_as_one_without_pauses() -> None:
    episodes = [MemoryItem(
        id=f"e{e}", memory="\n".join(f"{line} ({e}, {i})" for i in range(20) for line in LINES),
        metadata=MemoryMetadata(user_id="u", cube_id="u", memory_type="EpisodicMemory",
                                session_id="s1", created_at=T + timedelta(minutes=e)))
        for e in range(10)]  # 1,000 turns
    pauses: list[int] = []
    paused = EpisodeIndex.build(episodes, 10, pause=lambda: pauses.append(1))
    # the turns' words, then each BM25 over its documents (turns, then episodes)
    assert len(pauses) == 2 * (1000 // foreground_module.PAUSE_EVERY)
    assert answers(paused) == answers(EpisodeIndex.build(episodes, 10))


def test_an_index_holds_its_turns_as_nothing_a_full_collection_walks_turn_by_turn() -> None:
    episodes = [MemoryItem(
        id=f"e{e}", memory="\n".join(f"{line} ({e}, {i})" for i in range(20) for line in LINES),
        metadata=MemoryMetadata(user_id="u", cube_id="u", memory_type="EpisodicMemory",
                                session_id="s1", created_at=T + timedelta(minutes=e)))
        for e in range(10)]
    index = EpisodeIndex.build(episodes, 10)
    gc.collect()
    walked = [o for o in gc.get_referents(index.turns)
              if gc.is_tracked(o) and not isinstance(o, type)]
    assert walked == [] and not gc.is_tracked(index.session_of_turn)
    assert len(index.turns) == 1000 and index.turns[-1] == index.turns[999]
    third = index.turns[2]
    assert (third.episode, third.line, third.text) == (0, 2, f"{LINES[2]} (0, 0)")
    assert [t.text for t in index.turns[:2]] == [f"{LINES[0]} (0, 0)", f"{LINES[1]} (0, 0)"]
