"""Pure parts of the memory scheduler: routing, candidate cleaning, state, sink targets,
activation rendering."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import combinations

import numpy as np
import pytest

from memstream.streams.core.working_memory import Entry, target_copies
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.port import Vectors
from memstream.streams.runtime.stage import RawRecord, Record
from memstream.streams.scheduler.activation import due_for_render, render_activation
from memstream.streams.scheduler.agent import in_order
from memstream.streams.scheduler.logic import ScheduleRejected, route, split_top_k
from memstream.streams.scheduler.planning import (
    QueryVectors,
    drop_short_and_repeats,
    near_duplicate_survivors,
    not_yet_held,
    query_similarities,
    said_once,
)
from memstream.streams.scheduler.state import CubeState, QueryRecord
from memstream.topics.events import Origin, ScheduleMessage
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.settings import SchedulerSettings, Settings

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
SETTINGS = Settings(kafka={"topic_prefix": "u."})


def entry(ref: str, text: str) -> Entry:
    return Entry(ref=ref, text=text, vector_id=ref)


# --------------------------------------------------------------------------- routing


def test_each_schedule_topic_takes_only_its_own_label() -> None:
    for label in ("query", "answer", "add"):
        assert route(label, f"u.schedule.{label}", SETTINGS) == label
    with pytest.raises(ScheduleRejected, match="unknown schedule label 'remind'"):
        route("remind", "u.schedule.query", SETTINGS)
    with pytest.raises(ScheduleRejected,
                       match="label 'add' arrived on u.schedule.answer, which carries 'answer'"):
        route("add", "u.schedule.answer", SETTINGS)


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


def test_top_k_is_divided_among_the_evidence_at_least_one_each() -> None:
    assert split_top_k(10, 1) == 10
    assert split_top_k(10, 3) == 3
    assert split_top_k(10, 20) == 1


# --------------------------------------------------------------------------- state


def state(**kw: object) -> CubeState:
    msg = ScheduleMessage(user_id="u", cube_id="c", label="query", content="x")
    return CubeState.new(msg, 1, T0).model_copy(update=kw)


def test_history_keeps_the_latest_queries_once_each() -> None:
    s = state()
    for i in range(5):
        s = s.with_query(QueryRecord(event_id=f"e{i}", text=f"q{i}", at=T0), keep=3)
    s = s.with_query(QueryRecord(event_id="e4", text="q4 again", at=T0), keep=3)  # redelivered
    assert s.recent_queries(10) == ["q2", "q3", "q4"]
    assert s.recent_queries(2) == ["q3", "q4"]
    restored = CubeState.load(s.dump())
    assert restored == s


def test_the_timer_counts_from_the_last_retrieval_or_the_first_sight() -> None:
    s = state()
    assert not s.retrieval_due(T0 + timedelta(seconds=299), 300)
    assert s.retrieval_due(T0 + timedelta(seconds=300), 300)
    s = s.model_copy(update={"last_retrieval_at": T0 + timedelta(seconds=250)})
    assert not s.retrieval_due(T0 + timedelta(seconds=500), 300)
    assert s.retrieval_due(T0 + timedelta(seconds=550), 300)
    assert s.touched(T0 - timedelta(days=1)).last_activity_at == T0  # never goes back


# --------------------------------------------------------------------------- sink targets


def node(node_id: str, memory_type: str = "LongTermMemory", status: str = "activated",
         origin: str | None = None) -> MemoryItem:
    return MemoryItem(id=node_id, memory=f"memory {node_id}", metadata=MemoryMetadata(
        user_id="u", cube_id="c", memory_type=memory_type, status=status,  # type: ignore[arg-type]
        origin_id=origin, updated_at=T0))


def test_sink_targets_are_copies_stamped_newest_first_within_capacity() -> None:
    copy_of_b = node(working_copy_id("b"), "WorkingMemory", origin="b")
    nodes = {n.id: n for n in [node("a"), node("b"), copy_of_b, node("old", status="archived"),
                               node("wm", "WorkingMemory"), node("z")]}
    refs = ["a", "ghost", copy_of_b.id, "b", "old", "wm", "z"]
    targets, missing = target_copies(refs, nodes, T0, capacity=3)
    copies = [t for t, _ in targets]
    assert [c.id for c in copies] == [working_copy_id("a"), copy_of_b.id, "wm"]
    assert [v for _, v in targets] == ["a", copy_of_b.id, "wm"]  # where each vector comes from
    assert all(c.metadata.memory_type == "WorkingMemory" for c in copies)
    assert copies[0].metadata.origin_id == "a"
    stamps = [c.metadata.updated_at for c in copies]
    assert stamps == sorted(stamps, reverse=True) and stamps[0] == T0
    assert missing == ["ghost", "old"]  # "z" is beyond the capacity, not missing


# --------------------------------------------------------------------------- order, activation


def record(topic: str, offset: int, at: datetime) -> Record[ScheduleMessage]:
    msg = ScheduleMessage(user_id="u", label="query", content=f"{topic}{offset}", occurred_at=at)
    return Record(msg, Origin(topic=topic, partition=0, offset=offset),
                  RawRecord(topic, 0, offset, b"u", b""))


def test_topics_are_merged_by_time_without_reordering_a_topic() -> None:
    q0, q1 = record("q", 0, T0), record("q", 1, T0 - timedelta(seconds=5))  # a skewed clock
    a0 = record("a", 0, T0 + timedelta(seconds=1))
    b0 = record("b", 0, T0 - timedelta(seconds=1))
    merged = in_order([q0, a0, q1, b0])
    assert [r.value.content for r in merged] == ["b0", "q0", "q1", "a0"]


def test_activation_memory_is_a_prependable_block() -> None:
    text = render_activation(["The user is vegetarian.", "  ", "Line one\nline two"])
    assert text == "Known about the user:\n- The user is vegetarian.\n- Line one line two"
    assert render_activation([]) == ""
    assert render_activation(["x" * 2000]).count("\n") == 1


def test_only_cubes_active_since_their_last_render_are_rendered() -> None:
    busy = state(last_activity_at=T0 + timedelta(seconds=10))
    other = state(cube_id="d", last_activity_at=T0 + timedelta(seconds=10))
    old = state(cube_id="e", last_activity_at=T0 - timedelta(seconds=10))
    rendered = {busy.key: T0 + timedelta(seconds=10), other.key: T0}
    assert due_for_render([busy, other, old], rendered, since=T0) == [other]


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
