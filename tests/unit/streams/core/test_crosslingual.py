"""Turn ranking across languages (``streams.core.crosslingual``): a fact said in one language
is found by a question in the other, and a cube in one language ranks as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memstream.streams.core import turn_ranking
from memstream.streams.core.crosslingual import (
    MIN_GROUP,
    SCRIPT_CODES,
    episode_shares,
    level,
    other_script,
    script_code,
    shift,
    unseen_ranked,
)
from memstream.streams.core.retrieval import search
from memstream.streams.extraction.logic import extract
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ConversationChunk, ExtractedMemory, Message, SearchRequest
from tests.support.doubles import ManualClock, events_of, memory_deps, record, records

T = datetime(2026, 2, 9, 20, 15, tzinfo=UTC)
ZH, LATIN = SCRIPT_CODES["zh"], SCRIPT_CODES["latin"]


def test_a_turns_script_is_that_of_its_words_not_of_its_time_and_speaker() -> None:
    assert script_code("[2025-03-03 09:00] User: 我对花生过敏。") == ZH
    assert script_code("[2025-03-03 09:00] 小明: I moved to Oslo.") == LATIN
    assert script_code("我哥哥做什么工作？") == ZH
    assert script_code("What does my brother do?") == LATIN


def test_only_a_cube_in_two_scripts_one_of_them_the_questions_is_corrected() -> None:
    mixed = np.asarray([LATIN, ZH, LATIN], dtype=np.int8)
    assert other_script("我住在哪里？", mixed).tolist() == [True, False, True]  # type: ignore[union-attr]
    assert other_script("Where do I live?", mixed).tolist() == [False, True, False]  # type: ignore[union-attr]
    english = np.asarray([LATIN, LATIN], dtype=np.int8)
    assert other_script("我住在哪里？", english) is None  # nothing in the question's script
    assert other_script("Where do I live?", english) is None  # one script: as before


def test_the_shift_is_the_gap_between_the_two_scripts_medians() -> None:
    other = np.asarray([False, False, False, True, True, True, True])
    cosines = dict(enumerate([0.85, 0.87, 0.86, 0.80, 0.74, 0.75, 0.76]))
    assert shift(cosines, other) == pytest.approx(0.86 - 0.755)
    # the other script scoring higher is not the language's doing: no shift down
    assert shift({i: 1.0 - c for i, c in cosines.items()}, other) == 0.0
    # too few on one side to tell the language from the content
    few = {i: c for i, c in cosines.items() if i < MIN_GROUP - 1 or other[i]}
    assert shift(few, other) == 0.0


def test_levelling_lifts_other_script_candidates_by_their_share() -> None:
    cosines = {0: 0.8, 1: 0.7, 2: 0.6}
    assert level(cosines, np.asarray([0.0, 1.0, 0.5]), 0.1) == pytest.approx(
        {0: 0.8, 1: 0.8, 2: 0.65})
    assert level(cosines, np.asarray([1.0, 1.0, 1.0]), 0.0) is cosines
    shares = episode_shares(np.asarray([True, False, False, True, True]),
                            np.asarray([0, 0, 0, 1, 2]), 4)
    assert shares.tolist() == pytest.approx([1 / 3, 1.0, 1.0, 0.0])  # episode 3 has no turn


def test_an_unseen_candidate_enters_a_keyword_ranking_after_the_closer_found_ones() -> None:
    found = {0: 1, 1: 2}  # keywords found 0 (cosine 0.70) before 1 (cosine 0.80)
    cosines = {0: 0.70, 1: 0.80, 2: 0.90, 3: 0.75, 4: 0.60, 5: 0.95}
    blind = np.asarray([False, False, True, True, True, False])
    ranked = unseen_ranked(found, cosines, blind)
    assert ranked[0] == 1 and ranked[1] == 2  # what the keywords found keeps its place
    assert ranked[2] == 1  # closer than every found one: level with the first
    assert ranked[3] == 2  # after the one found that is closer (0.80)
    assert 4 not in ranked  # further than every found one: not put in
    assert 5 not in ranked  # in the question's script, and the keywords did not find it
    assert unseen_ranked({}, cosines, blind) == {}  # keywords found nothing: nothing to level


# --------------------------------------------------------------------------- search

# A user who writes in both languages; none of these is in tests/data/crosslingual_facts.jsonl.
SAID = [
    "我每天早上跑步五公里。",
    "My brother is a pilot for a regional airline.",
    "我最喜欢吃妈妈做的饺子。",
    "I keep a small vegetable garden on my balcony.",
    "我下周要去广州出差。",
    "我女儿喜欢画画，每周上一次美术课。",
    "I've been learning Spanish on my commute.",
]


async def _said(deps: Deps, cube: str = "lin", said: list[str] = SAID) -> None:
    """Three statements to a chat chunk, each chunk a session of its own."""
    for start in range(0, len(said), 3):
        messages = tuple(Message(id=f"{cube}{i}", role="user", content=text,
                                 timestamp=T + timedelta(minutes=i))
                         for i, text in enumerate(said) if start <= i < start + 3)
        chunk = ConversationChunk(user_id=cube, cube_id=cube, session_id=f"s{start}",
                                  occurred_at=T, messages=messages)
        items = events_of(await extract([record(chunk)], deps), ExtractedMemory)
        await add_memories(records(items), deps)


async def _first(deps: Deps, question: str) -> str:
    request = SearchRequest(user_id="lin", cube_id="lin", query=question, top_k=3)
    found, _ = await search(request, deps)
    return found[0].item.memory


async def test_a_chinese_question_finds_the_english_fact_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _said(deps)
    assert await _first(deps, "我哥哥是做什么工作的？") == SAID[1]
    # without the correction a Chinese statement came first
    monkeypatch.setattr(turn_ranking, "other_script", lambda _query, _scripts: None)
    assert script_code(await _first(deps, "我哥哥是做什么工作的？")) == ZH


async def test_a_cube_in_one_language_ranks_exactly_as_without_the_correction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    await _said(deps, "zh", [s for s in SAID if script_code(s) == ZH])
    questions = [SearchRequest(user_id="zh", cube_id="zh", query=q, top_k=5)
                 for q in ("我喜欢吃什么？", "我什么时候出差？", "What do I eat?")]

    async def replies() -> list[list[tuple[str, float, str | None]]]:
        return [[(h.item.id, h.score, h.excerpt) for h in (await search(q, deps))[0]]
                for q in questions]

    corrected = await replies()
    monkeypatch.setattr(turn_ranking, "other_script", lambda _query, _scripts: None)
    assert corrected == await replies()
