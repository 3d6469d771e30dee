"""Turn ranking (streams/core/turn_ranking.py): a hit is the turn that answers, with its
neighbours as an excerpt, carried by the statement extracted from it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstream.sinks.ports import VectorHit, VectorQuery
from memstream.streams.core import episode_index
from memstream.streams.core.episode_index import indexes_for, speaker_of
from memstream.streams.core.retrieval import search
from memstream.streams.core.turn_ranking import named_speakers, rank_windows
from memstream.streams.extraction.logic import extract
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ConversationChunk, ExtractedMemory, Message, SearchRequest
from tests.support.doubles import ManualClock, events_of, memory_deps, record, records

T = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
TURNS = [
    ("user", "We finally booked the summer trip."),
    ("assistant", "Where are you going?"),
    ("user", "To Lisbon, for two weeks in July."),
    ("assistant", "Lovely. Anything else new?"),
    ("user", "My brother started a bakery in Porto."),
    ("assistant", "What does he bake?"),
    ("user", "Mostly sourdough and custard tarts."),
    ("assistant", "Sounds delicious."),
    ("user", "I also adopted a grey cat called Miso."),
    ("assistant", "Congratulations!"),
]


async def _ingest(deps: Deps, cube: str = "alice") -> None:
    """Two chat chunks of one session (five turns each), extracted and stored."""
    for start in (0, 5):
        messages = tuple(
            Message(id=f"m{i}", role=role, content=text,  # type: ignore[arg-type]
                    timestamp=T + timedelta(minutes=i))
            for i, (role, text) in enumerate(TURNS) if start <= i < start + 5)
        chunk = ConversationChunk(user_id=cube, cube_id=cube, session_id="s1", occurred_at=T,
                                  messages=messages)
        items = events_of(await extract([record(chunk)], deps), ExtractedMemory)
        await add_memories(records(items), deps)


def ask(query: str, **fields: object) -> SearchRequest:
    return SearchRequest(user_id="alice", query=query, **fields)  # type: ignore[arg-type]


async def test_the_turn_that_answers_comes_first_with_its_neighbours(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    found, _ = await search(ask("What does my brother's bakery sell?", top_k=3), deps)
    first = found[0]
    # the statement of the turn, with the turns around it (across the episode boundary)
    assert first.excerpt is not None and "sourdough" in first.excerpt
    assert first.item.metadata.memory_type != "EpisodicMemory"
    assert first.episode_id is not None
    assert set(first.excerpt_ids) <= {f"m{i}" for i in range(10)}
    assert {"m4", "m6"} <= set(first.excerpt_ids)  # across the two episodes
    # every turn is returned at most once, and scores are in 0..1, best first
    ids = [i for hit in found for i in hit.excerpt_ids]
    assert len(ids) == len(set(ids))
    scores = [hit.score for hit in found]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)


async def test_min_score_and_types_are_honoured(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    every, _ = await search(ask("Where is the summer trip?", top_k=5), deps)
    cut = every[0].score
    top, _ = await search(ask("Where is the summer trip?", top_k=5, min_score=cut), deps)
    assert [h.score for h in top] == [h.score for h in every if h.score >= cut]
    episodes, _ = await search(ask("Where is the summer trip?", memory_type="EpisodicMemory"),
                               deps)
    assert episodes and all(h.item.metadata.memory_type == "EpisodicMemory" for h in episodes)
    assert "Lisbon" in (episodes[0].excerpt or "")


async def test_turn_ranking_off_returns_whole_memories(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T),
                       search={"overrides": {"recall.turns": False}})
    await _ingest(deps)
    found, _ = await search(ask("What does my brother's bakery sell?"), deps)
    assert found and all(h.excerpt is None for h in found)


def test_speaker_of_a_line_and_the_speakers_a_question_names() -> None:
    assert speaker_of("[2023-07-15 13:51] Caroline: Hey: Mel") == "caroline"
    assert speaker_of("Jon Smith: hi") == "jon smith"
    assert speaker_of("no speaker here") == ""
    speakers = ["caroline", "melanie", "user"]
    assert named_speakers("What did Melanie's kids paint?", speakers) == {1}
    assert named_speakers("Did the user meet Caroline?", speakers) == {0}  # a role names nobody
    assert named_speakers("what did we paint?", speakers) == set()
    assert named_speakers("Caroline and Melanie?", ["caroline", "melanie"]) == set()  # all


async def test_a_question_naming_a_speaker_prefers_that_speakers_turns(tmp_path: Path) -> None:
    """Turns by a speaker the question does not name count 1 - ``boosts.speaker``."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    lines = [("Dana", "Omar, hiking in the hills last weekend was my best hiking trip."),
             ("Omar", "I went hiking by the lake last weekend."),
             ("Dana", "Let's go together next time.")]
    messages = tuple(Message(id=f"s{i}", role="user" if who == "Dana" else "assistant",
                             name=who, content=text, timestamp=T + timedelta(minutes=i))
                     for i, (who, text) in enumerate(lines))
    chunk = ConversationChunk(user_id="alice", cube_id="alice", session_id="s1", occurred_at=T,
                              messages=messages)
    await add_memories(records(events_of(await extract([record(chunk)], deps),
                                         ExtractedMemory)), deps)
    deps.settings = deps.settings.model_copy(update={"search": deps.settings.search.with_overrides(
        {"excerpts.before": 0, "excerpts.after": 0})})
    question = ask("Where did Dana go hiking last weekend?", top_k=3)

    async def scores(weight: float) -> dict[str, float]:
        cfg = deps.settings.search.with_overrides({"boosts.speaker": weight})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return {f.excerpt_ids[0]: f.score for f in found if f.excerpt_ids}

    unaware, aware = await scores(0.0), await scores(0.2)
    assert aware["s0"] == unaware["s0"]  # Dana's turn keeps its score
    assert abs(aware["s1"] - 0.8 * unaware["s1"]) < 1e-3  # Omar's counts 1 - 0.2
    assert list(aware)[0] == "s0"


async def test_before_share_keeps_an_unmatched_turn_before_out_of_the_excerpt(
        tmp_path: Path) -> None:
    """The turn before the centre joins the excerpt always at ``excerpts.before_share`` 0,
    and only when it scores that share of the centre's score above it."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    question = ask("Mostly sourdough and custard tarts?", top_k=1)

    async def first_ids(share: float) -> tuple[str, ...]:
        cfg = deps.settings.search.with_overrides({"excerpts.before_share": share})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return found[0].excerpt_ids

    assert "m5" in await first_ids(0.0)  # "What does he bake?" comes along by default
    trimmed = await first_ids(0.9)
    assert "m6" in trimmed and "m5" not in trimmed  # it matches no word of the question


async def _say(deps: Deps, session: str, at: datetime, lines: list[str], first: int) -> None:
    messages = tuple(Message(id=f"d{first + i}", role="user", content=text,
                             timestamp=at + timedelta(minutes=i))
                     for i, text in enumerate(lines))
    chunk = ConversationChunk(user_id="alice", cube_id="alice", session_id=session,
                              occurred_at=at, messages=messages)
    await add_memories(records(events_of(await extract([record(chunk)], deps),
                                         ExtractedMemory)), deps)


async def test_a_question_naming_a_date_prefers_what_was_said_then(tmp_path: Path) -> None:
    """Without the date the turn sharing the question's words comes first; with it (the
    default ``fusion.dates``), the turn said on the day the question names."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _say(deps, "march", datetime(2026, 3, 2, 18, 0, tzinfo=UTC),
               ["Which bookshop did I visit? The bookshop on Main Street, I visit it a lot.",
                "Then I cooked dinner."], 0)
    await _say(deps, "april", datetime(2026, 4, 10, 18, 0, tzinfo=UTC),
               ["Spent the afternoon in a little bookshop by the river.",
                "Then I walked home."], 10)
    question = ask("Which bookshop did I visit on April 10, 2026?", top_k=2)

    async def first(weight: float) -> str:
        cfg = deps.settings.search.with_overrides({"fusion.dates": weight})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return found[0].excerpt_ids[0]

    default = deps.settings.search.ranking.fusion.dates
    assert default > 0
    assert await first(0.0) == "d0"
    assert await first(default) == "d10"


async def test_a_lower_hit_continuing_another_joins_it_as_one_passage(tmp_path: Path) -> None:
    """A window starting right after an earlier hit's turns (same session) extends that hit
    when the hit is at or below position ``excerpts.passage_after``, up to
    ``excerpts.passage_turns`` turns; above it, the window is a hit of its own. The excerpt
    shows its date once."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    question = ask("bakery sourdough custard tarts bake brother", top_k=5)
    defaults = deps.settings

    async def hits(fields: dict[str, object]) -> list[tuple[str, ...]]:
        cfg = deps.settings.search.with_overrides({"excerpts.before": 0, "excerpts.after": 0,
                                                   **fields})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return [f.excerpt_ids for f in found if f.excerpt_ids]

    apart = await hits({"excerpts.passage_turns": 1})
    assert all(len(ids) == 1 for ids in apart)
    assert {"m4", "m5", "m6"} <= {i for ids in apart[:3] for i in ids}
    joined = await hits({"excerpts.passage_turns": 8, "excerpts.passage_after": 0})
    passages = [sorted(int(i[1:]) for i in ids) for ids in joined if len(ids) > 1]
    assert passages and all(p == list(range(p[0], p[-1] + 1)) for p in passages)  # contiguous
    assert len({i for ids in joined for i in ids}) > len({i for ids in apart for i in ids})
    assert all(len(ids) == 1 for ids in await hits({"excerpts.passage_turns": 8,
                                                     "excerpts.passage_after": 10}))
    deps.settings = defaults
    found, _ = await search(question, deps)
    lines = (found[0].excerpt or "").split("\n")
    assert lines[0].startswith("[2026-05-01 09:3") and len(lines) > 1
    assert all(line.startswith("[09:3") for line in lines[1:])


async def test_an_old_index_serves_its_search_and_is_rebuilt_behind_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index older than MAX_AGE_S is not known to be out of date (the episode count is
    unchanged): the search that finds it uses it at once, and a rebuild behind that search
    brings what the count cannot show (an episode's text changed)."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    indexes = indexes_for(deps.query)
    first = await indexes.get(deps.query, "alice")
    episode = first.episodes[0]
    await deps.store.graph.update_node("alice", episode.model_copy(
        update={"memory": episode.memory.replace("Lisbon", "Seville")}))
    assert await indexes.get(deps.query, "alice") is first  # young: no rebuild
    monkeypatch.setattr(episode_index, "MAX_AGE_S", 0.0)
    # counted again at once (a search within COUNT_EVERY_S of the last count takes the index
    # as it is, and this test's 1 s of polling raced that second)
    monkeypatch.setattr(episode_index, "COUNT_EVERY_S", 0.0)
    assert await indexes.get(deps.query, "alice") is first  # old: used, rebuilt behind
    for _ in range(500):
        if (latest := await indexes.get(deps.query, "alice")) is not first:
            break
        await asyncio.sleep(0.01)
    assert any("Seville" in t.text for t in latest.turns)
    assert not any("Lisbon" in t.text for t in latest.turns)


async def test_a_cube_whose_index_was_let_go_is_found_as_before(tmp_path: Path) -> None:
    """A worker holds the episode indexes of a bounded number of cubes
    (``search.episode_index_cubes``): searching another cube lets the first one's go, and its
    next search, built again from the store, finds the same turns with the same excerpts."""
    deps = memory_deps(tmp_path, clock=ManualClock(T), search={"episode_index_cubes": 1})
    await _ingest(deps, "alice")
    await _ingest(deps, "bob")
    question = ask("What does my brother's bakery sell?", top_k=5)

    async def found() -> list[tuple[str, str | None, float]]:
        hits, _ = await search(question, deps)
        return [(h.item.id, h.excerpt, round(h.score, 6)) for h in hits]

    before = await found()
    await search(SearchRequest(user_id="bob", query="Where is the summer trip?"), deps)
    assert not indexes_for(deps.query).held("alice")
    assert await found() == before and before[0][1] and "sourdough" in before[0][1]


async def test_a_reply_returns_each_turn_and_each_statement_once(tmp_path: Path) -> None:
    """The statements the search found whose turns an excerpt returns are folded into that
    hit (``folded_ids``, their words are in the excerpt), never hits of their own; no turn
    is in two hits, and every passage of one session is one run of turns."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    found, _ = await search(ask("What does my brother's bakery sell?", top_k=5), deps)
    nodes = {n.id: n for n in await deps.query.get_nodes(
        "alice", [i for h in found for i in h.folded_ids])}
    assert nodes, "the statements of the other turns of the excerpt are folded into it"
    statements = [h.item.id for h in found] + [i for h in found for i in h.folded_ids]
    assert len(statements) == len(set(statements))
    for hit in found:
        for node_id in hit.folded_ids:
            said = {s.message_id for s in nodes[node_id].metadata.sources if s.message_id}
            assert said and said <= set(hit.excerpt_ids)
    turns = [t for h in found for t in h.excerpt_ids]
    assert len(turns) == len(set(turns))
    for hit in found:
        numbers = [int(t[1:]) for t in hit.excerpt_ids]
        assert numbers == list(range(numbers[0], numbers[-1] + 1))


async def test_the_episode_and_statement_searches_run_at_once(tmp_path: Path) -> None:
    """Neither vector search of turn ranking waits for the other: each is held here until
    both have started (one after the other, the first would wait for ever)."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    both = asyncio.Barrier(2)
    vector_search = deps.query.vector_search
    types: list[tuple[str, ...]] = []

    async def held(cube_id: str, query: VectorQuery) -> list[VectorHit]:
        types.append(tuple(query.memory_types or ()))
        await both.wait()
        return await vector_search(cube_id, query)

    deps.query.vector_search = held  # type: ignore[method-assign]
    vec = (await deps.embedder.embed_queries(["What does my brother's bakery sell?"]))[0]
    windows, index, _ = await asyncio.wait_for(rank_windows(
        deps, "alice", "What does my brother's bakery sell?", vec, [], 3), timeout=10)
    assert sorted(types) == [("EpisodicMemory",), ("LongTermMemory", "UserMemory")]
    assert "sourdough" in " ".join(index.turns[t].text for t in windows[0].turns)


async def test_a_cold_cube_too_big_to_index_in_a_search_is_served_from_the_stores(
        tmp_path: Path) -> None:
    """A cube with more episodes than ``search.episode_index_inline`` whose index is not held
    is not indexed inside its first search: that search returns whole memories from the
    stores at once, the index is built behind it, and the searches after it rank turns as a
    cube indexed inline does."""
    question = ask("What does my brother's bakery sell?", top_k=5)
    inline = memory_deps(tmp_path / "inline", clock=ManualClock(T))
    await _ingest(inline)
    ranked, _ = await search(question, inline)
    cold = memory_deps(tmp_path / "cold", clock=ManualClock(T),
                       search={"episode_index_inline": 1})  # alice has two episodes
    await _ingest(cold)
    indexes = indexes_for(cold.query)
    assert not indexes.held("alice")
    first, _ = await search(question, cold)
    # served without turn ranking: whole memories, the bakery's among them
    assert first and all(h.excerpt is None for h in first)
    assert any("sourdough" in h.item.memory or "bakery" in h.item.memory for h in first)
    for _ in range(200):  # the index, built behind the search
        if indexes.held("alice"):
            break
        await asyncio.sleep(0.01)
    assert indexes.held("alice")
    later, _ = await search(question, cold)
    assert [(h.item.id, h.excerpt) for h in later] == [(h.item.id, h.excerpt) for h in ranked]
    assert later[0].excerpt is not None and "sourdough" in later[0].excerpt


async def test_a_cube_within_the_inline_bound_ranks_turns_from_its_first_search(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T), search={"episode_index_inline": 2})
    await _ingest(deps)
    assert not indexes_for(deps.query).held("alice")
    first, _ = await search(ask("What does my brother's bakery sell?", top_k=3), deps)
    assert first[0].excerpt is not None and "sourdough" in first[0].excerpt
