"""Distinct evidence in a reply (streams/core/distinct.py and the windows of
streams/core/turn_ranking.py): every turn returned once, overlapping or touching excerpts of
one session as one hit, a statement folded into the excerpt that returns its turn."""

from __future__ import annotations

import numpy as np

from memstream.streams.core.distinct import distinct, union_excerpt
from memstream.streams.core.turn_ranking import _windows
from memstream.topics.events import ScoredMemory
from memstream.topics.models import MemoryItem, MemoryMetadata, MemoryType, SourceRef


def item(node_id: str, text: str, said: tuple[str, ...] = (),
         memory_type: MemoryType = "LongTermMemory") -> MemoryItem:
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(
        user_id="u", cube_id="c", memory_type=memory_type,
        sources=tuple(SourceRef(kind="message", message_id=m) for m in said)))


def line(turn: str) -> str:
    return f"[10:0{turn[-1]}] A: words of {turn}"


def excerpt(node_id: str, turns: tuple[str, ...], score: float,
            memory_type: MemoryType = "EpisodicMemory") -> ScoredMemory:
    """A turn-ranking hit: an episode (or a statement) with the excerpt of ``turns``."""
    return ScoredMemory(item=item(node_id, f"memory {node_id}", turns[:1], memory_type),
                        score=score, excerpt="\n".join(line(t) for t in turns),
                        excerpt_ids=turns, episode_id=f"ep-{node_id}")


def statement(node_id: str, said: tuple[str, ...], score: float) -> ScoredMemory:
    return ScoredMemory(item=item(node_id, f"fact {node_id}", said), score=score)


def test_an_excerpt_sharing_turns_with_an_earlier_one_joins_it() -> None:
    """Two cubes holding one conversation return overlapping excerpts: one hit, the union of
    the turns in turn order, at the first one's place with the better score; the second's
    statement is folded into it."""
    hits = [excerpt("a", ("m3", "m4", "m5"), 0.9), statement("x", ("m9",), 0.8),
            excerpt("b", ("m1", "m2", "m3", "m4"), 0.95, "LongTermMemory")]
    out = distinct(hits)
    assert [h.item.id for h in out] == ["a", "x"]
    first = out[0]
    assert first.excerpt_ids == ("m1", "m2", "m3", "m4", "m5")
    assert first.excerpt == "\n".join(line(t) for t in first.excerpt_ids)
    assert first.score == 0.95 and first.folded_ids == ("b",)


def test_a_hit_whose_turns_were_all_returned_is_dropped() -> None:
    hits = [excerpt("a", ("m1", "m2", "m3"), 0.9), excerpt("b", ("m2", "m3"), 0.8),
            excerpt("c", ("m3",), 0.7, "LongTermMemory")]
    out = distinct(hits)
    assert [h.item.id for h in out] == ["a"]
    assert out[0].excerpt_ids == ("m1", "m2", "m3") and out[0].folded_ids == ("c",)


def test_a_statement_inside_a_returned_excerpt_is_folded_into_it() -> None:
    """Its words are in the excerpt: its id in ``folded_ids``, not a hit of its own."""
    hits = [excerpt("a", ("m1", "m2", "m3"), 0.9), statement("s", ("m2",), 0.8),
            statement("t", ("m3", "m7"), 0.7), statement("derived", (), 0.6)]
    out = distinct(hits)
    assert [h.item.id for h in out] == ["a", "t", "derived"]
    assert out[0].folded_ids == ("s",)


def test_a_statement_above_the_excerpt_of_its_turn_takes_the_excerpt_to_its_place() -> None:
    """Ranked first (a current fact put above an older one, say), it stays first and stays
    the item; the excerpt comes with it as context, the excerpt's own statement folded."""
    hits = [statement("s", ("m2",), 0.9), excerpt("x", ("m8",), 0.85),
            excerpt("a", ("m1", "m2", "m3"), 0.8, "LongTermMemory")]
    out = distinct(hits)
    assert [h.item.id for h in out] == ["s", "x"]
    assert out[0].excerpt_ids == ("m1", "m2", "m3") and out[0].folded_ids == ("a",)
    assert out[0].score == 0.9


def test_two_statements_of_one_turn_are_two_facts() -> None:
    """A statement returns its own words, not its turn's: two of one turn both stay; after
    a whole episode holding their turn (turn ranking off) they are folded into it, and an
    episode ranked below them stays as it is (no excerpt to carry them)."""
    hits = [statement("s", ("m1",), 0.9), statement("t", ("m1",), 0.8)]
    assert [h.item.id for h in distinct(hits)] == ["s", "t"]
    episode = ScoredMemory(item=item("ep", "A: words of m1", ("m1",), "EpisodicMemory"),
                           score=0.95)
    out = distinct([episode, *hits])
    assert [h.item.id for h in out] == ["ep"] and out[0].folded_ids == ("s", "t")
    below = episode.model_copy(update={"score": 0.7})
    assert distinct([*hits, below]) == [*hits, below]


def test_excerpts_that_cannot_be_aligned_stay_apart() -> None:
    """A line without its message id, or turns in another order: nothing is guessed."""
    a = excerpt("a", ("m1", "m2"), 0.9)
    b = excerpt("b", ("m2", "m1", "m3"), 0.8)
    assert union_excerpt(a, b) is None
    assert [h.item.id for h in distinct([a, b])] == ["a", "b"]
    unnamed = a.model_copy(update={"excerpt": "x\ny\nz"})
    assert union_excerpt(unnamed, excerpt("c", ("m2", "m3"), 0.8)) is None


def test_distinct_hits_pass_unchanged() -> None:
    hits = [excerpt("a", ("m1", "m2"), 0.9), statement("s", ("m9",), 0.8),
            excerpt("b", ("m5", "m6"), 0.7)]
    assert distinct(hits) == hits


def windows(score: list[float], sessions: str, want: int = 5, most: int = 50,
            first: int = 0, before: int = 1, after: int = 1) -> list[list[int]]:
    found = _windows(np.asarray(score), np.ones(len(score), dtype=bool), list(sessions), want,
                     before, after, 0.0, most, first)
    return [w.turns for w in found]


def test_a_window_touching_a_hit_joins_it_at_the_better_place() -> None:
    """Turns 1 and 4 are best: 0-2 and 3-5 touch, so they are one passage, first; a turn of
    another session right after them opens a hit of its own."""
    assert windows([0.1, 0.9, 0.1, 0.1, 0.8, 0.1, 0.7, 0.1], "aaaaaabb") == [
        [0, 1, 2, 3, 4, 5], [6, 7]]


def test_a_window_between_two_hits_bridges_them() -> None:
    """Turn 2 touches the hit of turn 3, then turn 1 touches both: one passage."""
    assert windows([0.9, 0.3, 0.4, 0.8, 0.0, 0.0], "aaaaaa", before=0, after=0) == [
        [0, 1, 2, 3]]


def test_the_windows_stop_at_the_number_wanted() -> None:
    assert windows([0.9, 0.1, 0.1, 0.8, 0.1, 0.5], "aaaaaa", want=2, before=0) == [
        [0, 1], [3, 4]]


def test_passages_stop_at_their_size_and_the_first_places_stay_short() -> None:
    """Beyond ``most`` turns, or next to one of the first ``first`` hits, a window is a hit
    of its own: merging there would put lower-ranked turns into a caller's first budget."""
    score = [0.1, 0.9, 0.1, 0.1, 0.8, 0.1]
    assert windows(score, "aaaaaa") == [[0, 1, 2, 3, 4, 5]]
    assert windows(score, "aaaaaa", most=4) == [[0, 1, 2], [3, 4, 5]]
    assert windows(score, "aaaaaa", first=1) == [[0, 1, 2], [3, 4, 5]]
    assert windows([*score, 0.7, 0.1], "aaaaaaaa", first=1) == [[0, 1, 2], [3, 4, 5, 6, 7]]
