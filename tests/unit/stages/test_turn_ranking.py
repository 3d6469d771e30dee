"""Turn ranking (streams/core/turn_ranking.py): a hit is the turn that answers, with its
neighbours as an excerpt, carried by the statement extracted from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstream.streams.core.episode_index import speaker_of
from memstream.streams.core.lexical import BM25, terms
from memstream.streams.core.retrieval import search
from memstream.streams.core.turn_ranking import named_speakers
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


def test_bm25_ranks_by_stemmed_words() -> None:
    docs = [terms(t) for t in ("I love painting landscapes.", "We paint walls.", "Tea time.")]
    scores = BM25(docs).scores(terms("painted"))
    assert scores[2] == 0 and scores[0] > 0 and scores[1] > 0


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
    deps = memory_deps(tmp_path, clock=ManualClock(T), search={"turn_ranking": False})
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
    """Turns by a speaker the question does not name count 1 - speaker_weight."""
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
    deps.settings = deps.settings.model_copy(update={"search": deps.settings.search.model_copy(
        update={"window_before": 0, "window_after": 0})})
    question = ask("Where did Dana go hiking last weekend?", top_k=3)

    async def scores(weight: float) -> dict[str, float]:
        cfg = deps.settings.search.model_copy(update={"speaker_weight": weight})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return {f.excerpt_ids[0]: f.score for f in found if f.excerpt_ids}

    unaware, aware = await scores(0.0), await scores(0.2)
    assert aware["s0"] == unaware["s0"]  # Dana's turn keeps its score
    assert abs(aware["s1"] - 0.8 * unaware["s1"]) < 1e-3  # Omar's counts 1 - 0.2
    assert list(aware)[0] == "s0"


async def test_before_share_keeps_an_unmatched_turn_before_out_of_the_excerpt(
        tmp_path: Path) -> None:
    """The turn before the centre joins the excerpt always at before_share 0, and only when
    it scores that share of the centre's score above it."""
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _ingest(deps)
    question = ask("Mostly sourdough and custard tarts?", top_k=1)

    async def first_ids(share: float) -> tuple[str, ...]:
        cfg = deps.settings.search.model_copy(update={"before_share": share})
        deps.settings = deps.settings.model_copy(update={"search": cfg})
        found, _ = await search(question, deps)
        return found[0].excerpt_ids

    assert "m5" in await first_ids(0.0)  # "What does he bake?" comes along by default
    trimmed = await first_ids(0.9)
    assert "m6" in trimmed and "m5" not in trimmed  # it matches no word of the question
