"""One score scale over several namespaces' candidates (the local embedder, in process)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from memstream.agents.langgraph_scores import MergedScores
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.settings import Settings


def item(cube: str, key: str, text: str) -> MemoryItem:
    return MemoryItem(id=f"{cube}-{key}", memory=text, metadata=MemoryMetadata(
        user_id="app", cube_id=cube, memory_type="LongTermMemory", key=key))


# one namespace (cube) each: memstream scores each of them 1.0 for any query
ALICE = item("langgraph.alice", "diet", "Alice is vegetarian.")
BOB = item("langgraph.bob", "job", "Bob repairs bicycles in Ghent.")
CAROL = item("langgraph.carol", "home", "Carol lives in Oslo.")


@pytest_asyncio.fixture
async def scores() -> AsyncIterator[MergedScores]:
    made = MergedScores(Settings())
    yield made
    await made.close()


async def test_the_relevant_item_leads_whatever_namespace_it_is_in(
        scores: MergedScores) -> None:
    nodes = [ALICE, BOB, CAROL]
    by_word = dict(zip(["alice", "bob", "carol"], await scores.scores("Oslo", nodes),
                       strict=True))
    assert by_word["carol"] == pytest.approx(1.0)  # first by its vector and by its words
    assert max(by_word["alice"], by_word["bob"]) < 0.7, by_word
    # no shared word: the vectors alone rank, still on one scale
    by_meaning = await scores.scores("Which person lives in Norway?", nodes)
    assert by_meaning.index(max(by_meaning)) == 2 and all(0 <= s <= 1 for s in by_meaning)
    # the same candidates in another order score the same
    turned = await scores.scores("Oslo", [CAROL, BOB, ALICE])
    assert turned == pytest.approx([by_word["carol"], by_word["bob"], by_word["alice"]])


async def test_a_key_equal_to_the_query_counts_as_memstream_counts_it(
        scores: MergedScores) -> None:
    nodes = [ALICE, BOB]
    plain = await scores.scores("job", nodes)  # Bob's key; no word of his text
    assert plain[1] > 0.95 and plain[0] < 0.5, plain
    assert await scores.scores("anything", []) == []
