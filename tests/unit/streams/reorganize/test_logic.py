"""The optimizer's per-event logic (streams/reorganize/logic.py): relations, inferences,
session order, concepts, explicit merges and removals."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstream.streams.extraction.logic import extract
from memstream.streams.llm.rules import stand_in
from memstream.streams.memory.logic import add_memories
from memstream.streams.prompts.organize import ORGANIZE, OrganizeContext, OrganizeResponse
from memstream.streams.reorganize.logic import on_add, on_merge, on_remove
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.topics.events import (
    ConversationChunk,
    ExtractedMemory,
    MemoryUpdate,
    Message,
    ReorganizeEvent,
)
from memstream.topics.models import MemoryItem
from tests.support.doubles import ScriptedLLM, events_of, memory_deps, record, records, remember

CUBE = "trip"
ME: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE}
T0 = datetime(2026, 4, 2, 8, tzinfo=UTC)
TRIP = [
    ("The user booked a flight to Berlin for the client meeting.", ("flight", "berlin", "client")),
    ("The user's flight to Berlin was delayed by three hours.", ("flight", "berlin", "delay")),
    ("The user missed the 2 pm meeting with the client in Berlin because of the flight delay.",
     ("meeting", "client", "berlin")),
]


async def tell(deps: Deps, items: Sequence[tuple[str, Sequence[str]]],
               session: str | None = "s-trip") -> list[MemoryItem]:
    """Stored memories, an hour apart, in one session (written as the add stage does)."""
    nodes: list[MemoryItem] = []
    for i, (text, tags) in enumerate(items):
        nodes += await remember(deps, CUBE, text, at=T0 + timedelta(hours=i), tags=tuple(tags),
                                session_id=session)
    return nodes


def added(*nodes: MemoryItem) -> ReorganizeEvent:
    return ReorganizeEvent(**ME, op="add", node_ids=tuple(n.id for n in nodes),
                           memory_type="LongTermMemory")


async def add_all(deps: Deps, nodes: Sequence[MemoryItem]) -> list[Outgoing]:
    """One reorganize ``add`` per node, in order, as the add stage publishes them."""
    out: list[Outgoing] = []
    for node in nodes:
        out += await on_add(added(node), deps)
    return out


def linked(out: Sequence[Outgoing], edge_type: str) -> list[tuple[str, str]]:
    return [(e.source, e.target) for u in events_of(out, MemoryUpdate) if u.action == "linked"
            for e in u.edges if e.type == edge_type]


async def test_a_cause_named_by_another_memory_is_linked(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    booked, delay, missed = await tell(deps, TRIP)
    out = await add_all(deps, [booked, delay, missed])
    assert await deps.query.edge_exists(CUBE, delay.id, missed.id, "CAUSE")
    assert not await deps.query.edge_exists(CUBE, booked.id, missed.id, "CAUSE")
    assert (delay.id, missed.id) in linked(out, "CAUSE")
    # the rules stand-in infers nothing: no reasoning node
    everything = await deps.query.all_of_type(CUBE, "LongTermMemory")
    assert not [n for n in everything if n.metadata.type == "reasoning"]


async def test_a_session_is_linked_in_time_order(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    booked, delay, missed = await tell(deps, TRIP)
    # the events arrive out of order; FOLLOWS still runs earlier -> later
    out = await add_all(deps, [missed, booked, delay])
    assert await deps.query.edge_exists(CUBE, booked.id, delay.id, "FOLLOWS")
    assert await deps.query.edge_exists(CUBE, delay.id, missed.id, "FOLLOWS")
    assert not await deps.query.edge_exists(CUBE, missed.id, delay.id, "FOLLOWS")
    assert not await deps.query.edge_exists(CUBE, booked.id, missed.id, "FOLLOWS")
    assert sorted(linked(out, "FOLLOWS")) == sorted([(booked.id, delay.id),
                                                      (delay.id, missed.id)])


async def test_memories_without_a_session_are_not_ordered(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    nodes = await tell(deps, TRIP, session=None)
    out = await add_all(deps, nodes)
    assert linked(out, "FOLLOWS") == []


async def test_a_replayed_add_changes_nothing_and_announces_the_same(tmp_path: Path) -> None:
    """A redelivery writes nothing new and announces again under the same ids (a consumer
    dedupes; an announcement lost in a crash is made)."""
    deps = memory_deps(tmp_path)
    nodes = await tell(deps, TRIP)
    first = await add_all(deps, nodes)
    assert first
    before = await deps.query.export_cube(CUBE)
    again = await add_all(deps, nodes)
    after = await deps.query.export_cube(CUBE)
    assert sorted(after.edges, key=str) == sorted(before.edges, key=str)
    assert sorted(after.nodes, key=lambda n: n.id) == sorted(before.nodes, key=lambda n: n.id)
    assert [o.event.event_id for o in again] == [o.event.event_id for o in first]


async def test_a_model_inference_becomes_a_reasoning_node_once(tmp_path: Path) -> None:
    fact = "The user may need to rebook the client meeting in Berlin."
    def inferring(ctx: OrganizeContext) -> OrganizeResponse:  # a model that sees a consequence
        answer = stand_in(ORGANIZE)(ctx)
        return answer.model_copy(update={"links": [
            a.model_copy(update={"inferred": fact if a.relation == "CAUSE" else None})
            for a in answer.links]})

    llm = ScriptedLLM({ORGANIZE.name: inferring})
    deps = memory_deps(tmp_path, llm=llm)
    _, delay, missed = await tell(deps, TRIP)
    out = await add_all(deps, [delay, missed])
    inferred = [u.node for u in events_of(out, MemoryUpdate)
                if u.action == "added" and u.node is not None]
    (node,) = inferred
    assert node.memory.endswith("rebook the client meeting in Berlin.")
    assert node.metadata.type == "reasoning" and node.metadata.written_by == "model"
    assert await deps.query.edge_exists(CUBE, node.id, delay.id, "INFERRED_FROM")
    assert await deps.query.edge_exists(CUBE, node.id, missed.id, "INFERRED_FROM")
    assert await deps.query.vectors(CUBE, [node.id])  # searchable
    again = await add_all(deps, [delay, missed])
    assert [o.event.event_id for o in again] == [o.event.event_id for o in out]
    assert [n.id for n in await deps.query.all_of_type(CUBE, "LongTermMemory")
            if n.metadata.type == "reasoning"] == [node.id]


async def test_a_group_sharing_tags_gets_one_concept(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    tags = ("sourdough", "baking")
    nodes = await tell(deps, [
        ("The user bakes sourdough bread every Sunday morning.", tags),
        ("The user feeds the sourdough starter with rye flour.", tags),
        ("The user's sourdough loaves use a long cold proof overnight.", tags),
    ], session=None)
    out = await add_all(deps, nodes)
    concepts = [n for n in await deps.query.all_of_type(CUBE, "LongTermMemory")
                if n.metadata.hierarchy_level == "concept"]
    (concept,) = concepts
    assert concept.metadata.written_by == "rules" and concept.metadata.type == "topic"
    for node in nodes:
        assert await deps.query.edge_exists(CUBE, node.id, concept.id, "AGGREGATE_TO")
    assert [u.node_id for u in events_of(out, MemoryUpdate) if u.action == "added"] == [
        concept.id]
    again = await add_all(deps, nodes)  # a redelivery: the same concept, the same ids
    assert [o.event.event_id for o in again] == [o.event.event_id for o in out]
    assert len([n for n in await deps.query.all_of_type(CUBE, "LongTermMemory")
                if n.metadata.hierarchy_level == "concept"]) == 1


async def test_episodes_are_never_reorganized(tmp_path: Path) -> None:
    """README: episodes are never merged, never in working memory, never reorganized; a fact
    sharing an episode's words is related to other facts, never to the transcript."""
    deps = memory_deps(tmp_path)
    out: list[Outgoing] = []
    for session, text in (("s1", "I adopted a grey cat called Miso from the Oslo shelter."),
                          ("s2", "Miso the grey cat sleeps on my bed every night.")):
        chunk = ConversationChunk(**ME, session_id=session, messages=(
            Message(id="m1", role="user", name="Caroline", content=text, timestamp=T0),))
        items = events_of(await extract([record(chunk)], deps), ExtractedMemory)
        out += await add_memories(records(items), deps)
    reorganize = events_of(out, ReorganizeEvent)
    assert len(reorganize) == 2  # one per fact, none for the two episodes
    for event in reorganize:
        await on_add(event, deps)
    cube = await deps.query.export_cube(CUBE)
    kind = {n.id: n.metadata.memory_type for n in cube.nodes}
    assert sorted(kind.values()).count("EpisodicMemory") == 2
    touching = {(kind[e.source], e.type, kind[e.target]) for e in cube.edges}
    assert touching == {("LongTermMemory", "RELATE_TO", "LongTermMemory"),
                        ("LongTermMemory", "EXTRACTED_FROM", "EpisodicMemory")}


async def test_only_active_long_term_memories_are_reorganized(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    booked, delay, missed = await tell(deps, TRIP)
    await deps.store.set_status(CUBE, [missed.id], "archived")
    assert await on_add(added(missed), deps) == []
    assert await on_add(ReorganizeEvent(**ME, op="add", node_ids=("gone",)), deps) == []


async def test_an_explicit_merge_keeps_the_newer_and_archives_the_older(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    old, new = await tell(deps, [("The user loves hiking in the mountains.", ("hiking",)),
                                 ("The user really enjoys mountain hiking.", ("hiking",))])
    event = ReorganizeEvent(**ME, op="merge", node_ids=(new.id, old.id), reason="same thing")
    out = await on_merge(event, deps)
    assert [u.action for u in events_of(out, MemoryUpdate)] == ["merged", "archived"]
    kept = await deps.query.get_node(CUBE, new.id)
    gone = await deps.query.get_node(CUBE, old.id)
    assert kept is not None and kept.metadata.status == "activated"
    assert gone is not None and gone.metadata.status == "archived"
    assert await deps.query.edge_exists(CUBE, old.id, new.id, "MERGED_TO")
    # once merged, the same request finds nothing left to merge
    assert await on_merge(event, deps) == []


async def test_a_frozen_memory_is_not_merged_on_request(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    old, new = await tell(deps, [("The user loves hiking in the mountains.", ()),
                                 ("The user really enjoys mountain hiking.", ())])
    await deps.store.update_node(CUBE, old.evolve(frozen=True))
    out = await on_merge(ReorganizeEvent(**ME, op="merge", node_ids=(old.id, new.id)), deps)
    (refusal,) = events_of(out, MemoryUpdate)  # answered with the reason, not in silence
    assert (refusal.action, refusal.node_id, refusal.related_ids) == ("refused", old.id,
                                                                      (new.id,))
    assert "frozen" in refusal.reason
    assert {n.metadata.status for n in await deps.query.get_nodes(CUBE, [old.id, new.id])} == {
        "activated"}


async def test_a_remove_deletes_what_exists_with_vectors_and_edges(tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    booked, delay, missed = await tell(deps, TRIP)
    await add_all(deps, [booked, delay, missed])
    event = ReorganizeEvent(**ME, op="remove", node_ids=(delay.id, "gone"))
    out = await on_remove(event, deps)
    assert [(u.action, u.node_id) for u in events_of(out, MemoryUpdate)] == [
        ("deleted", delay.id)]
    assert await deps.query.get_node(CUBE, delay.id) is None
    assert not await deps.query.vectors(CUBE, [delay.id])
    assert not await deps.query.edges_of(CUBE, missed.id, ["CAUSE"])
    assert await on_remove(event, deps) == []
