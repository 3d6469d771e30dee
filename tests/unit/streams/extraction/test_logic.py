"""Extraction (streams/extraction/logic.py): a chat chunk or a document becomes memory items."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from memstream.streams.core.retrieval import search
from memstream.streams.extraction.logic import extract
from memstream.streams.memory.logic import add_memories
from memstream.topics.events import (
    ConversationChunk,
    Document,
    ExtractedMemory,
    Message,
    SearchRequest,
)
from tests.support.doubles import ManualClock, events_of, memory_deps, record, records

T = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


def chat(*turns: tuple[str, str], session: str = "s1", cube: str = "alice") -> ConversationChunk:
    messages = tuple(Message(id=f"m{i}", role=role, content=text, timestamp=T)  # type: ignore[arg-type]
                     for i, (role, text) in enumerate(turns))
    return ConversationChunk(user_id=cube, cube_id=cube, session_id=session, occurred_at=T,
                             messages=messages)


CHUNK = chat(("user", "I adopted a grey cat called Miso. I work as a nurse in Oslo."),
             ("assistant", "Congratulations on the new cat!"))


async def test_a_chat_chunk_becomes_memories_in_the_speakers_own_words(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, clock=ManualClock(T))
    out = await extract([record(CHUNK)], deps)
    assert {o.spec.suffix for o in out} == {"memory.items"}
    items = events_of(out, ExtractedMemory)
    episode, *facts = items
    # the chunk is kept whole as an episode: each turn with its time and speaker
    assert episode.memory_type == "EpisodicMemory"
    assert episode.memory.splitlines() == [
        "[2026-05-01 09:30] User: I adopted a grey cat called Miso. I work as a nurse in Oslo.",
        "[2026-05-01 09:30] Assistant: Congratulations on the new cat!"]
    texts = [f.memory for f in facts]
    assert any("grey cat called Miso" in t for t in texts), texts
    assert any("nurse in Oslo" in t for t in texts), texts
    for fact in facts:
        assert fact.memory_type in ("LongTermMemory", "UserMemory")
        assert fact.cube_id == "alice" and fact.session_id == "s1"
        assert fact.count == len(facts) and fact.chunk_event_id == CHUNK.event_id
        refs = [(s.kind, s.message_id, s.memory_id) for s in fact.sources]
        # it came from the user's message, and from the episode that holds the turn
        assert ("message", "m0", None) in refs
        assert ("memory", None, episode.id) in refs
    assert sorted(f.index for f in facts) == list(range(len(facts)))


async def test_extracting_the_same_chunk_again_names_the_same_memories(tmp_path: Path) -> None:
    """A redelivered chunk must upsert the same nodes, not add copies."""
    deps = memory_deps(tmp_path)
    first = events_of(await extract([record(CHUNK)], deps), ExtractedMemory)
    again = events_of(await extract([record(CHUNK)], deps), ExtractedMemory)
    assert [(i.id, i.event_id) for i in first] == [(i.id, i.event_id) for i in again]
    assert len({i.id for i in first}) == len(first)


async def test_the_same_message_ids_with_other_words_are_other_memories(tmp_path: Path) -> None:
    """Message ids are often a per-session counter ("m0"): reusing one must not overwrite."""
    deps = memory_deps(tmp_path)
    first = events_of(await extract([record(CHUNK)], deps), ExtractedMemory)
    other = chat(("user", "My brother Tom lives in Madrid and teaches history."))
    second = events_of(await extract([record(other)], deps), ExtractedMemory)
    assert not {i.id for i in first} & {i.id for i in second}


async def test_without_episodes_only_the_memories_are_published(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, memory={"episodes": False})
    items = events_of(await extract([record(CHUNK)], deps), ExtractedMemory)
    assert items and all(i.memory_type != "EpisodicMemory" for i in items)
    assert all(s.kind != "memory" for i in items for s in i.sources)


async def test_a_memory_longer_than_the_limit_is_cut_to_it(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, limits={"memory_chars": 40}, memory={"episodes": False})
    long = chat(("user", "I have been learning to play the cello every evening since the "
                         "winter of last year with a teacher from Porto."))
    items = events_of(await extract([record(long)], deps), ExtractedMemory)
    assert items and all(len(i.memory) <= 40 for i in items)
    assert items[0].memory.startswith("I have been learning")


async def test_a_document_is_split_and_each_memory_points_at_its_piece(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path, worker={"doc_chunk_chars": 200, "doc_chunk_overlap": 0})
    paragraphs = [
        "The Lisbon office opens at eight in the morning and closes at six in the evening.",
        "Visitors must sign in at the front desk and wear a badge at all times.",
        "The cafeteria on the third floor serves vegetarian lunches every weekday.",
        "Parking is available in the garage under the building for registered staff only.",
        "Fire drills take place on the first Monday of every quarter at ten o'clock.",
    ]
    doc = ConversationChunk(user_id="alice", cube_id="alice", kind="doc", occurred_at=T,
                            document=Document(doc_id="handbook", text="\n\n".join(paragraphs)))
    items = events_of(await extract([record(doc)], deps), ExtractedMemory)
    assert len(items) >= 3
    assert [i.index for i in items] == list(range(len(items)))
    assert {i.count for i in items} == {len(items)}
    assert all(i.source == "file" and i.memory_type != "EpisodicMemory" for i in items)
    refs = [i.sources[0] for i in items]
    assert all(r.kind == "chunk" and r.doc_id == "handbook" for r in refs)
    assert len({r.chunk_index for r in refs}) > 1  # several pieces, each named
    assert any("cafeteria" in i.memory for i in items)
    # the same document again: the same ids
    again = events_of(await extract([record(doc)], deps), ExtractedMemory)
    assert [i.id for i in again] == [i.id for i in items]


async def test_what_the_user_said_is_found_after_extraction_and_add(tmp_path: Path) -> None:
    """The logic chain without a broker: chunk -> extraction -> add stage -> search."""
    deps = memory_deps(tmp_path)
    items = events_of(await extract([record(CHUNK)], deps), ExtractedMemory)
    await add_memories(records(items), deps)
    found, _ = await search(SearchRequest(user_id="alice", cube_id="alice",
                                          query="What pet does she have?", top_k=3), deps)
    texts = [s.item.memory for s in found]
    assert texts and any("grey cat called Miso" in t for t in texts), texts
    # the fact and the episode it came from may both answer; never a working copy twice
    assert len({s.item.metadata.origin_id or s.item.id for s in found}) == len(found)
