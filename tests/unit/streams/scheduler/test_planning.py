"""Planning the next working memory (streams/scheduler/planning.py): candidate cleaning,
near duplicates, query vectors, what an episode already holds."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pytest

from memstream.streams.core.working_memory import Entry
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.port import Vectors
from memstream.streams.scheduler.planning import (
    QueryVectors,
    drop_short_and_repeats,
    near_duplicate_survivors,
    not_yet_held,
    query_similarities,
    said_once,
)
from memstream.topics.settings import SchedulerSettings


def entry(ref: str, text: str) -> Entry:
    return Entry(ref=ref, text=text, vector_id=ref)


# --------------------------------------------------------------------------- candidates


def test_short_items_and_exact_repeats_are_dropped_keeping_the_first() -> None:
    entries = [
        entry("a", "The user is vegetarian."),
        entry("b", "Tofu."),
        entry("c", "  the user IS   vegetarian. "),  # same text, other node
        entry("a", "The user is vegetarian (copy)."),  # same node again
        entry("d", "Kale salad"),
        entry("e", "      ok      "),
    ]
    kept = drop_short_and_repeats(entries, min_chars=6)
    assert [e.ref for e in kept] == ["a", "d"]


def test_near_duplicates_keep_the_earlier_item() -> None:
    a = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    almost_a = np.array([0.96, 0.28, 0.0], dtype=np.float32)  # cosine 0.96 with a
    b = np.array([0.0, 1.0, 0.0], dtype=np.float32)  # cosine 0.28 with almost_a
    vectors = np.stack([a, b, almost_a, b])
    assert near_duplicate_survivors(vectors, 0.95) == [0, 1]
    assert near_duplicate_survivors(vectors, 0.97) == [0, 1, 2]
    assert near_duplicate_survivors(vectors[:0], 0.95) == []


async def test_the_local_threshold_separates_rewordings_from_different_facts() -> None:
    """The e5 default of ``local_near_duplicate_threshold`` (0.75 would merge everything)."""
    rewordings = [
        ("The user is vegetarian and avoids meat.", "The user doesn't eat meat; they are "
         "vegetarian."),
        ("The user loves hiking in the mountains.", "The user really enjoys mountain hiking."),
        ("用户每天早上喝一杯绿茶。", "用户每天早晨都喝绿茶。"),
    ]
    different = [
        "The user is vegetarian and avoids meat.", "The user loves spicy Sichuan tofu.",
        "The user plays the cello.", "The user's sister plays the violin.",
        "用户每天早上喝一杯绿茶。", "用户的车需要换轮胎。", "The user lives in Berlin.",
    ]
    threshold = SchedulerSettings().local_near_duplicate_threshold
    embedder = LocalEmbedder()
    for one, other in rewordings:
        v = await embedder.embed_passages([one, other])
        assert float(v[0] @ v[1]) >= threshold, (one, other)
    v = await embedder.embed_passages(different)
    pairs = [float(v[i] @ v[j]) for i, j in combinations(range(len(different)), 2)]
    assert max(pairs) < threshold
    spec_default = SchedulerSettings().near_duplicate_threshold
    assert sum(p >= spec_default for p in pairs) > len(pairs) / 2


def test_only_statements_are_judged_near_duplicates_by_the_cosine() -> None:
    """Two passages of one chat that say different things can sit above the local e5's
    near-duplicate threshold (same speakers, dates and manner: 22 of the 4,186 pairs of one
    LoCoMo conversation's 5-turn episodes, median 0.90), so an episode is never dropped by
    the cosine; a statement still is."""
    episode = Entry(ref="e1", vector_id="e1", text="[13:56] A: hi\n[13:57] B: a lake trip",
                    turns=frozenset({"d1:1", "d1:2"}))
    other_episode = Entry(ref="e2", vector_id="e2", text="[13:58] A: a pottery class\n"
                          "[13:59] B: show me", turns=frozenset({"d1:3", "d1:4"}))
    statement = Entry(ref="s1", vector_id="s1", text="A went to a pottery class.",
                      turns=frozenset({"d1:3"}))
    rewording = entry("s2", "A took a pottery class.")
    entries = [episode, other_episode, statement, rewording]
    assert [said_once(e) for e in entries] == [False, False, True, True]
    a = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    almost_a = np.array([0.96, 0.28, 0.0], dtype=np.float32)  # cosine 0.96 with a
    b = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    almost_b = np.array([0.0, 0.96, 0.28], dtype=np.float32)
    vectors = np.stack([a, almost_a, b, almost_b])
    judged = [said_once(e) for e in entries]
    assert near_duplicate_survivors(vectors, 0.95, judged) == [0, 1, 2]
    assert near_duplicate_survivors(vectors, 0.95) == [0, 2]  # the cosine alone


class CountingEmbedder(LocalEmbedder):
    """The real local embedder, counting the query texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.embedded.extend(texts)
        return await super().embed_queries(texts)


async def test_query_vectors_embed_each_query_once_and_forget_the_oldest() -> None:
    embedder = CountingEmbedder()
    vectors = QueryVectors(embedder, size=2)
    first = await vectors(["where is Ana?", "what should I cook?"])
    again = await vectors(["what should I cook?", "where is Ana?", "what should I cook?"])
    assert embedder.embedded == ["where is Ana?", "what should I cook?"]
    assert np.allclose(again[1], first[0]) and np.allclose(again[0], again[2])
    await vectors(["travel plans"])  # evicts the least recently used ("where is Ana?")
    await vectors(["where is Ana?"])
    assert embedder.embedded[2:] == ["travel plans", "where is Ana?"]
    sims = query_similarities(first, np.stack([first[1], -first[1]]))
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] < 0.5


def test_current_items_an_episode_already_holds_make_way() -> None:
    episode = Entry(ref="ep", text="a: x\nb: y", vector_id="ep", turns=frozenset({"m1", "m2"}))
    inside = Entry(ref="s1", text="x", vector_id="s1", turns=frozenset({"m1"}))
    outside = Entry(ref="s2", text="z", vector_id="s2", turns=frozenset({"m3"}))
    unknown = Entry(ref="s3", text="w", vector_id="s3")  # cites no turn: kept
    assert not_yet_held([inside, outside, unknown], [episode]) == [outside, unknown]
