"""Searching a cube (streams/core/retrieval.py): by meaning and by keyword, bounded, filtered,
each memory once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from memstream.streams.core.retrieval import search
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ExtractedMemory, SearchRequest
from tests.support.doubles import memory_deps, record, remember
from tests.support.facts import FACTS
from tests.support.paths import DATA

CUBE = "bob"
SUBJECTS: dict[str, list[str]] = json.loads(
    (DATA / "three_subjects.json").read_text(encoding="utf-8"))[
        "subjects"]
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}


def ask(query: str, **fields: Any) -> SearchRequest:
    return SearchRequest(**{"user_id": CUBE, "query": query, **fields})


async def found(deps: Deps, query: str, **fields: Any) -> list[str]:
    memories, _mode = await search(ask(query, **fields), deps)
    return [s.item.memory for s in memories]


async def test_a_memory_is_found_by_meaning(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    assert (await found(deps, "Which food could make him ill?"))[0] == FACTS[0]
    assert (await found(deps, "What car does he have?"))[0] == FACTS[3]
    assert (await found(deps, "Which job does the user have?"))[0] == FACTS[2]


async def test_a_word_the_embedding_misses_is_found_by_keyword(tmp_path: Path) -> None:
    """A month name says little to the embedding: keyword (full-text) recall finds it."""
    travel = [t for t in SUBJECTS["travel"] if t.isascii()]
    lisbon = "The user is flying to Lisbon on May 14 and staying in the Alfama district."
    assert lisbon in travel
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *travel)
    assert (await found(deps, "May", top_k=1)) == [lisbon]
    # the same search on vectors alone ranks another trip first: keyword recall made it
    vectors_only = memory_deps(tmp_path, search={"overrides": {"fusion.keyword": 0}})
    await remember(vectors_only, CUBE, *travel)
    assert (await found(vectors_only, "May", top_k=1)) != [lisbon]


async def test_top_k_bounds_the_answer_best_first(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    memories, mode = await search(ask("peanut allergy", top_k=2), deps)
    assert mode == "fast" and len(memories) == 2
    assert memories[0].item.memory == FACTS[0]
    assert memories[0].score >= memories[1].score


async def test_the_memory_type_asked_for_is_the_only_one_returned(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS[:3])
    (pref,) = await remember(deps, CUBE, "The user prefers to be called Bobby.",
                             memory_type="UserMemory")
    users, _ = await search(ask("What does the user like to be called?",
                                memory_type="UserMemory"), deps)
    assert [s.item.id for s in users] == [pref.id]
    longs, _ = await search(ask("What does the user like to be called?",
                                memory_type="LongTermMemory"), deps)
    assert longs and pref.id not in {s.item.id for s in longs}


async def test_archived_memories_are_not_found(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, *FACTS)
    await deps.store.set_status(CUBE, [nodes[0].id], "archived")
    assert FACTS[0] not in await found(deps, "Which food could make him ill?")
    assert FACTS[0] not in await found(deps, "peanuts")


async def test_a_search_filter_keeps_only_matching_memories(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS[:3])
    await remember(deps, CUBE, "The user is allergic to shellfish.", tags=("health",))
    got = await found(deps, "allergies", search_filter={"tags": {"contains": "health"}})
    assert got == ["The user is allergic to shellfish."]
    none = await found(deps, "allergies", search_filter={"session_id": "nope"})
    assert none == []


async def test_filters_only_the_graph_can_apply_are_applied_too(tmp_path: Path) -> None:
    """Text and confidence are not in the vector index: the searcher joins with the graph."""
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    await remember(deps, CUBE, "The user's brother plays the cello.", confidence=40.0)
    assert await found(deps, "music", search_filter={"memory": {"contains": "violin"}}) == [
        FACTS[1]]
    assert await found(deps, "music", search_filter={"confidence": {"<": 50}}) == [
        "The user's brother plays the cello."]


async def test_a_working_copy_and_its_memory_count_once(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    out = await add_memories([record(ExtractedMemory(**ME, memory=FACTS[0]))], deps)
    assert out
    memories, _ = await search(ask("peanut allergy"), deps)
    assert [s.item.memory for s in memories] == [FACTS[0]]
    assert memories[0].item.metadata.memory_type == "LongTermMemory"  # the canonical node


async def test_fine_mode_answers_with_the_rules_stand_in(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await remember(deps, CUBE, *FACTS)
    memories, mode = await search(ask("Which food could make him ill?", mode="fine"), deps)
    assert mode == "fine"
    assert FACTS[0] in [s.item.memory for s in memories]


def test_a_clear_lead_in_cosine_scores_apart_from_the_rest() -> None:
    from memstream.streams.core.retrieval import cosine_standing

    # the demo's "What should I avoid eating?": the allergy 0.819, green tea 0.777, ...
    cos = [0.819, 0.777, 0.774, 0.766, 0.756, 0.751]
    factors = cosine_standing(cos, 0.5)
    assert factors[0] == 1.0 and all(f < 0.65 for f in factors[1:])
    assert factors == sorted(factors, reverse=True) and min(factors) >= 0.5
    assert cosine_standing(cos, 0.0) == [1.0] * len(cos)  # off: rank fusion alone
    assert cosine_standing([0.8, 0.8], 0.5) == [1.0, 1.0]  # no lead: nothing to say


async def test_a_failed_search_leaves_no_side_lookup_error_unretrieved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The query embedding fails after the keyword lookup already failed: the caller gets
    the embedding's error, and asyncio logs no error of a lookup nobody awaited."""
    import gc

    from memstream.sinks.ports import StoreError
    from memstream.streams.embed.port import EmbedderError

    deps = memory_deps(tmp_path)
    await remember(deps, "alice", "Alice keeps bees.")

    async def broken_lookup(*_args: object, **_kw: object) -> list[tuple[str, float]]:
        raise StoreError("graph gone")

    async def slow_failure(_texts: object) -> object:
        await asyncio.sleep(0.05)  # the lookup fails first
        raise EmbedderError("embedder down")

    monkeypatch.setattr(deps.store.query, "keyword_ids", broken_lookup)
    monkeypatch.setattr(deps.embedder, "embed_queries", slow_failure)
    with pytest.raises(EmbedderError, match="embedder down"):
        await search(SearchRequest(user_id="alice", cube_id="alice", query="bees"), deps)
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
