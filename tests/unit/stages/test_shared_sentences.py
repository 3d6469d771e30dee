"""A conversation kept in each participant's cube embeds each sentence once: the other
speaker's quote ("Name: sentence") takes the vector of the sentence its speaker's cube
keeps bare, and still reads, and is found by keyword, with the name."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from memstream.sinks.memory_store import MemoryStore
from memstream.streams.core.retrieval import search
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.text import passage_text
from memstream.streams.extraction.logic import extract
from memstream.streams.memory.logic import add_memories
from memstream.topics.events import ConversationChunk, ExtractedMemory, Message, SearchRequest
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import events_of, memory_deps, record, records
from tests.unit.test_embed_inflight import Counting

T = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
SAID = (("Caroline", "I went to a support group yesterday. It was so powerful."),
        ("Melanie", "I painted a sunrise over the lake."))


def chunk_for(cube: str) -> ConversationChunk:
    """The same two turns, as kept in ``cube`` (its speaker is the user there)."""
    messages = tuple(
        Message(id=f"m{i}", role="user" if name.lower() == cube else "assistant", name=name,
                content=text, timestamp=T)
        for i, (name, text) in enumerate(SAID))
    return ConversationChunk(user_id=cube, cube_id=cube, session_id="s1", occurred_at=T,
                             messages=messages)


def node(text: str, *tags: str) -> MemoryItem:
    meta = MemoryMetadata(user_id="u", cube_id="u", memory_type="LongTermMemory",
                          created_at=T, updated_at=T, tags=tags)
    return MemoryItem(id="n", memory=text, metadata=meta)


def test_only_a_quote_of_the_speaker_its_first_tag_names_loses_the_name() -> None:
    assert passage_text(node("Melanie: I painted a sunrise.", "melanie", "art")) == \
        "I painted a sunrise."
    assert passage_text(node("I painted a sunrise.", "art")) == "I painted a sunrise."
    # a colon that is not a quoted speaker keeps the whole text
    assert passage_text(node("Note: buy milk", "shopping")) == "Note: buy milk"
    assert passage_text(node("Melanie: ", "melanie")) == "Melanie: "


async def test_both_cubes_of_a_conversation_embed_each_sentence_once(tmp_path: Path) -> None:
    counting = Counting()
    embedder = SharedInFlight(counting)
    deps = memory_deps(tmp_path, embedder=embedder)
    kept: dict[str, list[ExtractedMemory]] = {}
    for cube in ("caroline", "melanie"):
        kept[cube] = events_of(await extract([record(chunk_for(cube))], deps), ExtractedMemory)
        await add_memories(records(kept[cube]), deps)
    stored = {cube: [m.memory for m in items if m.memory_type != "EpisodicMemory"]
              for cube, items in kept.items()}
    assert "Melanie: I painted a sunrise over the lake." in stored["caroline"]
    assert "I painted a sunrise over the lake." in stored["melanie"]
    asked = [t for t in counting.asked if not t.startswith("[")]  # the episodes apart
    assert sorted(asked) == sorted(set(asked))  # no sentence twice
    assert not [t for t in asked if t.startswith(("Caroline: ", "Melanie: "))]
    # the quote's vector is its sentence's, as the model computes it
    store: MemoryStore = deps.store
    quotes = [n for n in await store.graph.all_of_type("caroline", "LongTermMemory")
              if n.memory.startswith("Melanie: ")]
    assert quotes
    (row,) = await store.vectors.get("caroline", [quotes[0].id])
    alone = await LocalEmbedder().embed_passages([quotes[0].memory.removeprefix("Melanie: ")])
    assert np.allclose(row.vector, alone[0], atol=1e-5)
    # and a search by the name still finds what she said
    found, _ = await search(SearchRequest(user_id="caroline", cube_id="caroline",
                                          query="What did Melanie paint?", top_k=3), deps)
    assert any("Melanie: I painted a sunrise" in s.item.memory for s in found)
