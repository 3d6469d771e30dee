"""Feedback from the agent (issue #41, streams/core/feedback.py): each verdict as the command
stage applies it, and what search and working memory return afterwards (in-memory stores)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memstream.streams.commands.logic import CommandRejected, run_commands
from memstream.streams.core.feedback import IRRELEVANT_KEPT, judged
from memstream.streams.core.retrieval import search
from memstream.streams.core.working_memory import apply_working_memory
from memstream.streams.memory.logic import add_memories
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import (
    ExtractedMemory,
    Feedback,
    MemoryUpdate,
    SearchRequest,
    UpdateNode,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem, MemoryMetadata
from tests.support.doubles import events_of, memory_deps, records, remember

CUBE = "fern"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}
SAID = datetime(2026, 5, 4, 18, tzinfo=UTC)
FACTS = ("The user lives in Porto.",
         "The user drives a red Fiat.",
         "The user is allergic to peanuts.")


async def run(deps: Deps, *commands: Any) -> list[Outgoing]:
    return await run_commands(records(commands), deps)


async def hits(deps: Deps, query: str, **fields: Any) -> list[str]:
    found, _ = await search(SearchRequest(**ME, query=query, top_k=10, **fields), deps)
    return [s.item.metadata.origin_id or s.item.id for s in found]


async def stored(deps: Deps, node_id: str) -> MemoryItem:
    got = await deps.query.get_node(CUBE, node_id)
    assert got is not None
    return got


async def added(deps: Deps) -> list[MemoryItem]:
    """FACTS through the add stage (so each has its working-memory copy), in FACTS' order."""
    await add_memories(records([ExtractedMemory(**ME, memory=t, index=i, count=len(FACTS))
                                for i, t in enumerate(FACTS)]), deps)
    nodes = await deps.query.all_of_type(CUBE, "LongTermMemory")
    return sorted(nodes, key=lambda n: FACTS.index(n.memory))


async def copies(deps: Deps) -> set[str]:
    """The memories working memory holds (their long-term ids)."""
    return {c.metadata.origin_id or c.id
            for c in await deps.query.all_of_type(CUBE, "WorkingMemory")}


async def test_wrong_is_archived_out_of_working_memory_and_never_found(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    _, car, _ = await added(deps)
    assert car.id in await copies(deps)
    assert car.id in await hits(deps, "what car does the user drive?")
    out = await run(deps, Feedback(**ME, node_id=car.id, verdict="wrong",
                                   note="the user never owned a car", occurred_at=SAID))
    (update,) = events_of(out, MemoryUpdate)
    assert (update.action, update.node_id, update.reason) == (
        "feedback", car.id, "wrong: the user never owned a car")
    assert update.node is not None and update.node.metadata.feedback == "wrong"
    node = await stored(deps, car.id)  # kept for history
    assert (node.metadata.status, node.metadata.feedback) == ("archived", "wrong")
    assert node.metadata.updated_at == car.metadata.updated_at  # a verdict is not news
    assert await deps.query.get_node(CUBE, working_copy_id(car.id)) is None
    for fields in ({}, {"mode": "fine"}, {"memory_type": "LongTermMemory"},
                   {"search_filter": {"status": "archived"}},
                   {"search_filter": {"status": {"in": ["activated", "archived"]}}}):
        assert car.id not in await hits(deps, "what car does the user drive?", **fields), fields
    # nobody puts it back into working memory, even by naming it
    applied = await apply_working_memory(deps, CUBE, [car.id], SAID)
    assert applied.refused == [car.id] and car.id not in await copies(deps)


async def test_outdated_closes_validity_once_and_leaves_working_memory(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    home, _, _ = await added(deps)
    await run(deps, Feedback(**ME, node_id=home.id, verdict="outdated", note="moved to Lyon",
                             occurred_at=SAID))
    node = await stored(deps, home.id)
    assert (node.metadata.valid_until, node.metadata.feedback) == (SAID, "outdated")
    assert node.metadata.status == "activated"  # still true of its time: searchable
    assert home.id not in await copies(deps)
    assert home.id in await hits(deps, "where does the user live?")
    # said again later: it stays closed at the earlier time
    await run(deps, Feedback(**ME, node_id=home.id, verdict="outdated",
                             occurred_at=SAID + timedelta(days=3)))
    assert (await stored(deps, home.id)).metadata.valid_until == SAID


async def test_irrelevant_demotes_for_similar_queries_only(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await remember(deps, CUBE, "The user likes the sea.", "The user swims in the sea.",
                           "The user's boat is moored in Porto.")
    query = "does the user swim in the sea?"
    first = (await hits(deps, query))[0]
    boat = await hits(deps, "where is the boat moored?")
    assert boat[0] == nodes[2].id
    await run(deps, Feedback(**ME, node_id=first, verdict="irrelevant", query=query,
                             note="not what was asked"))
    node = await stored(deps, first)
    assert (node.metadata.feedback, node.metadata.irrelevant_for) == ("irrelevant", (query,))
    after = await hits(deps, "Does the user swim in the sea")  # the same words
    assert after[0] != first and first in after  # lower, not gone
    assert await hits(deps, "where is the boat moored?") == boat  # another question


def test_irrelevant_queries_are_deduplicated_and_bounded() -> None:
    node = MemoryItem(id="n", memory="The user likes tea.", metadata=MemoryMetadata(
        user_id=CUBE, cube_id=CUBE, memory_type="UserMemory"))
    for i in range(IRRELEVANT_KEPT + 5):
        node = judged(node, "irrelevant", SAID, f"question {i}")
    node = judged(node, "irrelevant", SAID, "  QUESTION   7 ")  # again: it moves to the end
    kept = node.metadata.irrelevant_for
    assert len(kept) == IRRELEVANT_KEPT and kept[-1] == "QUESTION 7"
    assert kept[0] == "question 5" and "question 7" not in kept
    assert judged(node, "irrelevant", SAID).metadata.irrelevant_for == kept  # no query


async def test_confirmed_reopens_validity_and_lifts_wrong(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    home, car, _ = await added(deps)
    await run(deps, Feedback(**ME, node_id=home.id, verdict="outdated", occurred_at=SAID),
              Feedback(**ME, node_id=car.id, verdict="wrong", occurred_at=SAID),
              Feedback(**ME, node_id=car.id, verdict="irrelevant", query="car?"))
    assert (await stored(deps, car.id)).metadata.feedback == "wrong"  # it stands
    await run(deps, Feedback(**ME, node_id=home.id, verdict="confirmed"),
              Feedback(**ME, node_id=car.id, verdict="confirmed", note="checked with the user"))
    node = await stored(deps, home.id)
    assert (node.metadata.valid_until, node.metadata.feedback) == (None, "confirmed")
    car_now = await stored(deps, car.id)
    assert (car_now.metadata.feedback, car_now.metadata.status) == ("confirmed", "archived")
    assert car.id in await hits(deps, "what car does the user drive?",
                                search_filter={"status": "archived"})


async def test_a_working_memory_copy_id_applies_to_its_memory(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    _, _, peanuts = await added(deps)
    command = Feedback(**ME, node_id=working_copy_id(peanuts.id), verdict="wrong")
    first = await run(deps, command)
    assert (await stored(deps, peanuts.id)).metadata.feedback == "wrong"
    assert [u.node_id for u in events_of(first, MemoryUpdate)] == [peanuts.id]
    # redelivered, with the copy gone: the same memory, state and announcement
    state = await stored(deps, peanuts.id)
    again = await run(deps, command)
    assert [o.event for o in again] == [o.event for o in first]
    assert await stored(deps, peanuts.id) == state


async def test_unknown_ids_and_frozen_memories_are_refused(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    home, _, _ = await added(deps)
    with pytest.raises(CommandRejected, match="feedback: node ghost not found in cube fern"):
        await run(deps, Feedback(**ME, node_id="ghost", verdict="confirmed"))
    await run(deps, UpdateNode(**ME, node_id=home.id, frozen=True))
    with pytest.raises(CommandRejected, match=f"node {home.id} is frozen"):
        await run(deps, Feedback(**ME, node_id=home.id, verdict="wrong"))
    assert (await stored(deps, home.id)).metadata.status == "activated"
    assert home.id in await hits(deps, "where does the user live?")
