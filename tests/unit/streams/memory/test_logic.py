"""The add stage (streams/memory/logic.py): store, merge on conflict, enforce capacities."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memstream.history.snapshots import is_slim
from memstream.sinks.ports import VectorQuery
from memstream.streams.core.review import review_key
from memstream.streams.llm.port import LLMError
from memstream.streams.llm.rules import stand_in
from memstream.streams.memory.chunks import chunk_key
from memstream.streams.memory.decisions import Activations
from memstream.streams.memory.logic import add_memories
from memstream.streams.prompts.fusion import FUSION
from memstream.streams.prompts.review import REVIEW, ReviewContext, ReviewResponse
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import ExtractedMemory, MemoryUpdate, ReorganizeEvent
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem, SourceRef
from tests.support.doubles import ScriptedLLM, events_of, memory_deps, record, records, sent

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
CUBE = "alice"


def item(text: str, day: int = 0, **fields: Any) -> ExtractedMemory:
    return ExtractedMemory(user_id=CUBE, memory=text, occurred_at=T0 + timedelta(days=day),
                           **fields)


async def add(deps: Deps, *items: ExtractedMemory) -> list[Outgoing]:
    """Each item as its own batch, in order (as a lone event arrives)."""
    out: list[Outgoing] = []
    for one in items:
        out += await sent(await add_memories([record(one)], deps))
    return out


def updates(out: Sequence[Outgoing], action: str) -> list[MemoryUpdate]:
    return [u for u in events_of(out, MemoryUpdate) if u.action == action]


async def stored(deps: Deps, memory_type: str = "LongTermMemory",
                 status: str | None = None) -> list[MemoryItem]:
    return await deps.query.all_of_type(CUBE, memory_type, status)  # type: ignore[arg-type]


async def delivered_twice(deps: Deps, one: ExtractedMemory) -> list[tuple[str, str | None]]:
    """``one`` delivered, then again: the second delivery changes nothing in the stores and
    announces the same (event ids and actions, returned)."""
    first = await add(deps, one)
    before = await deps.query.export_cube(CUBE)
    again = await add(deps, one)
    after = await deps.query.export_cube(CUBE)
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert sorted(after.edges, key=str) == sorted(before.edges, key=str)
    key = [(o.event.event_id, getattr(o.event, "action", None)) for o in first]
    assert [(o.event.event_id, getattr(o.event, "action", None)) for o in again] == key
    return key


async def test_a_new_memory_is_stored_with_its_vector_and_a_working_copy(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    one = item("The user is allergic to peanuts.", tags=("health",))
    out = await add(deps, one)
    (node,) = await stored(deps)
    assert node.memory == "The user is allergic to peanuts."
    assert node.metadata.status == "activated" and node.metadata.tags == ("health",)
    assert node.metadata.key  # a title is made when the item has none
    assert [r.id for r in await deps.query.vectors(CUBE, [node.id])] == [node.id]
    (copy,) = await stored(deps, "WorkingMemory")
    assert copy.id == working_copy_id(node.id) and copy.metadata.origin_id == node.id
    assert await deps.query.vectors(CUBE, [copy.id])
    (added,) = updates(out, "added")
    assert added.node_id == node.id and added.related_ids == (copy.id,)
    assert added.cause_event_id == one.event_id
    (reorganize,) = events_of(out, ReorganizeEvent)
    assert reorganize.op == "add" and reorganize.node_ids == (node.id,)
    # searchable by its vector right away
    query = (await deps.embedder.embed_queries(["peanut allergy"]))[0].tolist()
    hits = await deps.store.search(CUBE, VectorQuery(query, 1, memory_types=["LongTermMemory"]))
    assert [n.id for n, _ in hits] == [node.id]


async def test_one_added_update_per_memory_of_a_batch(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    batch = [item("The user is allergic to peanuts."),
             item("The user's sister plays the violin.", index=1),
             item("The user works as a nurse in Oslo.", index=2)]
    out = await sent(await add_memories(records(batch), deps))
    added = updates(out, "added")
    assert len(added) == 3 and len({u.node_id for u in added}) == 3
    assert {n.id for n in await stored(deps)} == {u.node_id for u in added}
    assert len(events_of(out, ReorganizeEvent)) == 3


async def test_a_redelivered_memory_announces_the_same_and_adds_no_node(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    one = item("The user is allergic to peanuts.")
    first = await add(deps, one)
    before = await deps.query.export_cube(CUBE)
    again = await add(deps, one)
    after = await deps.query.export_cube(CUBE)
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert [o.event.event_id for o in again] == [o.event.event_id for o in first]
    assert [u.node_id for u in updates(again, "added")] == [u.node_id for u in
                                                             updates(first, "added")]


async def test_the_same_item_twice_in_one_batch_is_one_node(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    one = item("The user is allergic to peanuts.")
    out = await sent(await add_memories([record(one), record(one)], deps))
    assert len(await stored(deps)) == 1 and len(updates(out, "added")) == 1


async def test_without_a_model_a_contradiction_is_a_conflict_edge_both_kept(
    tmp_path: Path,
) -> None:
    """Without a model the rules judge's contradiction is a guess; nothing is archived on it."""
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Berlin."))
    out = await add(deps, item("Alice lives in Lisbon.", day=1))
    active = await stored(deps, status="activated")
    assert sorted(n.memory for n in active) == ["Alice lives in Berlin.", "Alice lives in Lisbon."]
    assert not await stored(deps, status="archived")
    new = next(n for n in active if "Lisbon" in n.memory)
    old = next(n for n in active if "Berlin" in n.memory)
    (edge,) = await deps.query.edges_of(CUBE, new.id, ["CONFLICT"], "out")
    assert edge.target == old.id and "suspected contradiction" in edge.reason
    assert not updates(out, "merged") and not updates(out, "archived")
    (linked,) = updates(out, "linked")
    assert linked.node_id == new.id and linked.related_ids == (old.id,)
    working = await stored(deps, "WorkingMemory")
    assert sorted(w.metadata.origin_id or "" for w in working) == sorted([new.id, old.id])


async def test_with_a_model_a_newer_contradicting_statement_archives_the_older(
    tmp_path: Path,
) -> None:
    deps = memory_deps(tmp_path, llm=ScriptedLLM({}))  # a model that answers as rules would
    await add(deps, item("Alice lives in Berlin."))
    out = await add(deps, item("Alice lives in Lisbon.", day=1))
    (active,) = await stored(deps, status="activated")
    (archived,) = await stored(deps, status="archived")
    assert "Lisbon" in active.memory and "Berlin" not in active.memory
    assert archived.memory == "Alice lives in Berlin."
    edges = await deps.query.edges_of(CUBE, archived.id, ["MERGED_TO"], "out")
    assert [e.target for e in edges] == [active.id]
    (merged,) = updates(out, "merged")
    assert merged.node_id == active.id and merged.related_ids == (archived.id,)
    assert merged.reason.startswith("contradictory")
    assert [u.node_id for u in updates(out, "archived")] == [archived.id]
    # working memory holds the current statement only; search no longer finds the old one
    working = await stored(deps, "WorkingMemory")
    assert [w.metadata.origin_id for w in working] == [active.id]
    query = (await deps.embedder.embed_queries(["Where does Alice live?"]))[0].tolist()
    found = {n.id for n, _ in await deps.store.search(CUBE, VectorQuery(query, 5))}
    assert active.id in found and archived.id not in found


async def test_a_fact_decided_earlier_in_the_same_batch_is_judged_against(
    tmp_path: Path,
) -> None:
    """A chunk's independent facts are activated together, before the next chunk of the batch
    is reviewed: one batch decides as the same facts delivered one at a time do."""
    deps = memory_deps(tmp_path, llm=ScriptedLLM({}))
    older, newer = item("Alice lives in Berlin."), item("Alice lives in Lisbon.", day=1)
    out = await sent(await add_memories(records([older, newer]), deps))
    (active,) = await stored(deps, status="activated")
    (archived,) = await stored(deps, status="archived")
    assert "Lisbon" in active.memory and archived.memory == "Alice lives in Berlin."
    assert [u.node_id for u in updates(out, "archived")] == [archived.id]
    assert [w.metadata.origin_id for w in await stored(deps, "WorkingMemory")] == [active.id]


async def test_a_redelivered_merge_is_announced_again_not_decided_again(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Berlin."))
    newer = item("Alice lives in Lisbon.", day=1)
    await delivered_twice(deps, newer)


async def test_independent_statements_are_all_kept(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    out = await add(deps, item("The user is allergic to peanuts."),
                    item("The user's sister plays the violin.", day=1),
                    item("The user works as a nurse in Oslo.", day=2))
    assert len(await stored(deps, status="activated")) == 3
    assert not await stored(deps, status="archived")
    assert not updates(out, "merged")


async def test_a_frozen_memory_is_never_merged(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Berlin."))
    (node,) = await stored(deps)
    assert await deps.store.update_node(CUBE, node.evolve(frozen=True))
    await add(deps, item("Alice lives in Lisbon.", day=1))
    assert {n.memory for n in await stored(deps, status="activated")} == {
        "Alice lives in Berlin.", "Alice lives in Lisbon."}


async def test_when_fusion_fails_the_newer_statement_wins(tmp_path: Path) -> None:
    def verdict_only(ctx: ReviewContext) -> ReviewResponse:  # no merged statement given
        answer = stand_in(REVIEW)(ctx)
        return ReviewResponse(decisions=[d.model_copy(update={"memory": ""})
                                         for d in answer.decisions])

    llm = ScriptedLLM({REVIEW.name: verdict_only, FUSION.name: LLMError(FUSION.name, "down")})
    deps = memory_deps(tmp_path, llm=llm)
    await add(deps, item("Alice lives in Berlin.", tags=("alice",)))
    out = await add(deps, item("Alice lives in Lisbon.", day=1, tags=("move",)))
    (active,) = await stored(deps, status="activated")
    (archived,) = await stored(deps, status="archived")
    assert active.memory == "Alice lives in Lisbon."  # unchanged: a hard update
    assert archived.memory == "Alice lives in Berlin."
    assert set(active.metadata.tags) == {"alice", "move"}
    edges = await deps.query.edges_of(CUBE, archived.id, ["MERGED_TO"], "out")
    assert [e.target for e in edges] == [active.id]
    (merged,) = updates(out, "merged")
    assert merged.reason.endswith("hard update")


async def test_over_capacity_the_oldest_memories_go_with_their_vectors(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, memory={"long_term_memory_capacity": 2,
                                         "working_memory_capacity": 2})
    texts = ["The user is allergic to peanuts.", "The user's sister plays the violin.",
             "The user works as a nurse in Oslo.", "The user drives a red bicycle to work."]
    out = await add(deps, *(item(t, day=i) for i, t in enumerate(texts)))
    kept = await stored(deps)
    assert {n.memory for n in kept} == set(texts[2:])
    removed = updates(out, "removed")  # long-term nodes: a record each
    assert removed and all(u.reason.endswith("exceeded") for u in removed)
    # working copies: named on the added record whose copy pushed them out
    evicted = [u.removed_ids for u in updates(out, "added") if u.removed_ids]
    assert evicted == [(working_copy_id(kept_id),) for kept_id in
                       [u.node_id for u in removed]]  # the same memories, oldest first
    ids = [u.node_id for u in removed if u.node_id is not None] + [
        i for ids in evicted for i in ids]
    assert len(ids) == 4  # two long-term nodes and two working copies
    assert not await deps.query.get_nodes(CUBE, ids)
    assert not await deps.query.vectors(CUBE, ids)  # no vector left behind to be found
    working = await stored(deps, "WorkingMemory")
    assert {w.metadata.origin_id for w in working} == {n.id for n in kept}
    assert await deps.query.count_by_type(CUBE) == {"LongTermMemory": 2, "WorkingMemory": 2}


async def test_an_episode_is_stored_apart_and_linked_to_its_memories(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    episode = item("[2026-03-01 09:00] User: I adopted a grey cat called Miso.",
                   id="episode-1", memory_type="EpisodicMemory", type="event")
    fact = item("I adopted a grey cat called Miso.", id="fact-1",
                sources=(SourceRef(kind="memory", memory_id="episode-1"),))
    out = await sent(await add_memories(records([episode, fact]), deps))
    assert [n.id for n in await stored(deps, "EpisodicMemory")] == ["episode-1"]
    working = await stored(deps, "WorkingMemory")
    assert [w.metadata.origin_id for w in working] == ["fact-1"]  # no transcript in it
    assert await deps.query.edge_exists(CUBE, "fact-1", "episode-1", "EXTRACTED_FROM")
    added = {u.node_id: u for u in updates(out, "added")}
    assert added["episode-1"].related_ids == ()
    assert [e.node_ids for e in events_of(out, ReorganizeEvent)] == [("fact-1",)]


async def test_an_episode_is_embedded_by_its_words_not_its_line_times(tmp_path: Path) -> None:
    """The episode keeps its times (shown, searched by words); its vector is that of the
    turns without them."""
    import numpy as np

    deps = memory_deps(tmp_path)
    text = ("[2026-03-01 09:00] User: I adopted a grey cat called Miso.\n"
            "[2026-03-01 09:01] Ana: What a lovely name!")
    episode = item(text, id="episode-1", memory_type="EpisodicMemory", type="event")
    fact = item("I adopted a grey cat called Miso [2026-03-01 09:00].", id="fact-1")
    await sent(await add_memories(records([episode, fact]), deps))
    [node] = await stored(deps, "EpisodicMemory")
    assert node.memory == text
    assert node.embedding_text == ("User: I adopted a grey cat called Miso.\n"
                                   "Ana: What a lovely name!")
    [record] = await deps.query.vectors(CUBE, ["episode-1"])
    row = record.vector
    words, timed = await deps.embedder.embed_passages([node.embedding_text, text])
    assert np.allclose(row, words, atol=1e-6)
    assert not np.allclose(row, timed, atol=1e-3)
    [kept] = await stored(deps)
    assert kept.embedding_text == kept.memory  # a fact is embedded as it reads


async def test_a_chunk_cut_by_a_batch_is_reviewed_once_with_its_last_fact(
    tmp_path: Path,
) -> None:
    """Facts of one chunk in two batches: one review and one reorganize event naming all of
    them, as when the chunk comes whole; the head waits undecided (not searchable)."""
    from memstream.streams.extraction.logic import extract_chunk
    from memstream.topics.events import ConversationChunk, Message, Origin

    said = ["I adopted a grey cat named Pixel last spring.",
            "I run five kilometres along the river every Sunday.",
            "My sister Ana lives in Porto and teaches chemistry."]
    chunk = ConversationChunk(user_id=CUBE, session_id="s1", occurred_at=T0, messages=tuple(
        Message(id=f"m{i}", role="user", content=t, timestamp=T0) for i, t in enumerate(said)))
    origin = Origin(topic="test.conversations", partition=0, offset=7)

    async def run(split: bool) -> tuple[list[str], list[ReorganizeEvent], list[str]]:
        llm = ScriptedLLM({})
        deps = memory_deps(tmp_path / str(split), llm=llm)
        await add(deps, item("The user adopted a grey cat called Pixel last spring."))
        items = await extract_chunk(chunk, origin, deps)
        facts = [i for i in items if i.memory_type != "EpisodicMemory"]
        assert len(facts) == 3 and all(i.count == 3 for i in facts)
        cut = [items[:2], items[2:]] if split else [items]
        out: list[Outgoing] = []
        for part in cut:
            out += await sent(await add_memories(records(part), deps))
            if split and part is cut[0]:  # the head: written, not decided, not announced
                assert {n.metadata.status for n in await deps.query.get_nodes(
                    CUBE, [i.id for i in part if i.id and i.memory_type != "EpisodicMemory"])
                        } == {"generated"}
                assert not updates(out, "added") or all(
                    u.node_id not in {f.id for f in facts} for u in updates(out, "added"))
        decided = sorted(u.node_id or "" for u in events_of(out, MemoryUpdate)
                         if u.action in ("added", "merged") and u.node_id in
                         {f.id for f in facts})
        # announced without the snapshots their items rebuild, the head's facts too
        assert all(is_slim(u) for u in updates(out, "added"))
        return llm.calls, events_of(out, ReorganizeEvent), decided

    whole_calls, whole_events, whole_decided = await run(split=False)
    cut_calls, cut_events, cut_decided = await run(split=True)
    assert whole_calls.count(REVIEW.name) == cut_calls.count(REVIEW.name) == 1
    assert [e.node_ids for e in cut_events] == [e.node_ids for e in whole_events]
    assert [e.event_id for e in cut_events] == [e.event_id for e in whole_events]
    assert len(whole_events) == 1 and len(whole_events[0].node_ids) == 3
    assert cut_decided == whole_decided and len(cut_decided) == 3


async def test_an_explicit_change_closes_the_older_statement_and_keeps_it(
        tmp_path: Path) -> None:
    """A statement that says outright that the earlier one stopped holding closes it, in
    rules mode too (no guess): kept activated, valid until the new one began, linked."""
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Berlin.", valid_from=T0))
    out = await add(deps, item("Alice moved from Berlin to Lisbon.", day=40,
                               valid_from=T0 + timedelta(days=40)))
    active = await stored(deps, status="activated")
    assert not await stored(deps, status="archived") and len(active) == 2
    old = next(n for n in active if n.memory == "Alice lives in Berlin.")
    new = next(n for n in active if "Lisbon" in n.memory)
    assert old.metadata.valid_until == T0 + timedelta(days=40)
    assert old.metadata.superseded_by == new.id and new.metadata.valid_until is None
    (edge,) = await deps.query.edges_of(CUBE, new.id, ["SUPERSEDES"], "out")
    assert edge.target == old.id
    (closed,) = updates(out, "superseded")
    assert closed.node_id == old.id and closed.related_ids == (new.id,)
    assert working_copy_id(old.id) in [u.node_id for u in updates(out, "removed")]
    assert [w.metadata.origin_id for w in await stored(deps, "WorkingMemory")] == [new.id]


async def test_a_redelivered_change_closes_nothing_twice_and_announces_the_same(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Berlin."))
    newer = item("Alice moved from Berlin to Lisbon.", day=40)
    key = await delivered_twice(deps, newer)
    assert "superseded" in {a for _, a in key}


class Crash(Exception):
    """The worker dying at one point of a delivery."""


async def crash_before_activation(deps: Deps, items: Sequence[ExtractedMemory],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Deliver ``items`` as one batch and die once its decisions are applied, before the
    facts decided independent are activated (they stay ``generated``: a redelivery judges
    them)."""
    async def dying(self: Activations) -> None:
        if self.writes:
            raise Crash
    with monkeypatch.context() as patch:
        patch.setattr(Activations, "flush", dying)
        with pytest.raises(Crash):
            await add_memories(records(items), deps)


async def test_a_change_cut_short_after_it_closed_closes_nothing_else_when_redelivered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first delivery closed the statement the change ends, then died before activating
    the change. Asked again, the review would no longer see the closed statement (it no
    longer holds) and would close the next candidate too; the redelivery takes the first
    attempt's verdict instead, and ends as an uninterrupted run."""
    earlier = [item("The jazz piano class in Lisbon was cancelled, so I stayed home."),
               item("I spent the weekend in Oslo doing sourdough bread with Maria.", day=1)]
    change = item("The sourdough bread class in Lisbon was cancelled, so I stayed home.", day=5)
    reference, cut = memory_deps(tmp_path / "reference"), memory_deps(tmp_path / "cut")
    await add(reference, *earlier)
    want = [(u.event_id, u.action) for u in events_of(await add(reference, change), MemoryUpdate)]
    await add(cut, *earlier)
    await crash_before_activation(cut, [change], monkeypatch)
    kept = review_key(chunk_key(record(change)))
    assert await cut.query.recorded_answer(CUBE, kept) is not None
    got = [(u.event_id, u.action) for u in events_of(await add(cut, change), MemoryUpdate)]
    assert got == want
    assert await cut.query.recorded_answer(CUBE, kept) is None  # kept until applied
    closed = [n.memory for n in await stored(cut) if n.metadata.valid_until is not None]
    assert closed == [earlier[0].memory]
    assert await cut.query.export_cube(CUBE) == await reference.query.export_cube(CUBE)


async def test_a_merge_cut_short_leaves_its_siblings_verdicts_as_they_were(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two facts of one chunk repeat the same stored statement: the first is merged with it,
    the second's verdict on it is dropped (merged away), so the second is added. A crash
    after the merge, before the second is activated: asked again, the review would find the
    stored statement archived and judge the second against what remains; the redelivery
    takes the first attempt's verdicts and adds it, as the uninterrupted run did."""
    def model(ctx: ReviewContext) -> ReviewResponse:
        return ReviewResponse.model_validate({"decisions": [
            {"item": i, "candidate": 0, "relation": "redundant", "reason": "the same habit",
             "memory": it.new.text} for i, it in enumerate(ctx.items)]})

    stored_first = [item("The user swims in the lake every morning."),
                    item("The user swims laps at the city pool.", day=1)]
    chunk = [item(text, day=3, chunk_event_id="chunk-7", index=i, count=2) for i, text in
             enumerate(["The user swims in the lake each morning.",
                        "Every morning the user goes swimming in the lake."])]

    async def deliver_chunk(deps: Deps) -> list[tuple[str, str]]:
        out = await sent(await add_memories(records(chunk), deps))
        return [(u.event_id, u.action) for u in events_of(out, MemoryUpdate)]

    reference = memory_deps(tmp_path / "reference", llm=ScriptedLLM({REVIEW.name: model}))
    cut = memory_deps(tmp_path / "cut", llm=ScriptedLLM({REVIEW.name: model}))
    for deps in (reference, cut):
        await add(deps, *stored_first)
    want = await deliver_chunk(reference)
    assert [a for _, a in want].count("merged") == 1 and "added" in [a for _, a in want]
    await crash_before_activation(cut, chunk, monkeypatch)
    got = await deliver_chunk(cut)
    assert sorted(got) == sorted(want)
    assert await cut.query.export_cube(CUBE) == await reference.query.export_cube(CUBE)


async def test_a_frozen_or_confirmed_statement_is_never_closed(tmp_path: Path) -> None:
    for flag in ({"frozen": True}, {"feedback": "confirmed"}):
        deps = memory_deps(tmp_path / next(iter(flag)))
        await add(deps, item("Alice lives in Berlin."))
        (node,) = await stored(deps)
        assert await deps.store.update_node(CUBE, node.evolve(**flag))
        out = await add(deps, item("Alice moved from Berlin to Lisbon.", day=40))
        kept = next(n for n in await stored(deps) if n.id == node.id)
        assert kept.metadata.valid_until is None and not updates(out, "superseded"), flag
        if "frozen" in flag:
            (refusal,) = updates(out, "refused")
            assert "closing its validity" in refusal.reason


async def test_a_statement_about_an_earlier_time_closes_nothing(tmp_path: Path) -> None:
    """Told later, about long before: how the user got there, not a change."""
    deps = memory_deps(tmp_path)
    await add(deps, item("Alice lives in Lisbon.", valid_from=T0))
    out = await add(deps, item("Alice moved from Lisbon to Porto.", day=3,
                               valid_from=T0 - timedelta(days=900)))
    assert not updates(out, "superseded")
    assert all(n.metadata.valid_until is None for n in await stored(deps))


async def test_a_models_supersedes_closes_the_older_statement_without_a_merge(
        tmp_path: Path) -> None:
    """With a model the review's own ``supersedes`` is acted on (no rule needed), and its
    usual spellings are understood."""
    def model(ctx: ReviewContext) -> ReviewResponse:
        return ReviewResponse.model_validate({"decisions": [
            {"item": 0, "candidate": 0, "relation": "Replaced", "reason": "she lives there now",
             "memory": "ignored: nothing is merged"}]})

    deps = memory_deps(tmp_path, llm=ScriptedLLM({REVIEW.name: model}))
    await add(deps, item("Alice lives in Berlin."))
    out = await add(deps, item("Alice is in Lisbon for good.", day=40))
    active = await stored(deps, status="activated")
    old = next(n for n in active if "Berlin" in n.memory)
    new = next(n for n in active if "Lisbon" in n.memory)
    assert not await stored(deps, status="archived")
    assert old.metadata.superseded_by == new.id and old.metadata.valid_until is not None
    (closed,) = updates(out, "superseded")
    assert closed.reason == "she lives there now" and not updates(out, "merged")
