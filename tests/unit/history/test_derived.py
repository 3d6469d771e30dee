"""What history and explain make of the updates that name a node no item wrote: working-memory
copies, the optimizer's summaries and inferred facts (the log's records built by hand; the
fetching is tested against a pipeline in tests/e2e/test_provenance_derived.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.history.derived import copy_origin
from memstream.history.provenance import CubeLog, explain_copy, explain_node, node_changes
from memstream.topics.events import (
    ExtractedMemory,
    MemoryUpdate,
    ReplaceWorkingMemory,
    WorkingMemoryEntry,
    WorkingMemoryReplacement,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata

CUBE = "ann"
T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)


def node(node_id: str, text: str, level: str = "fact") -> MemoryItem:
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(
        user_id=CUBE, cube_id=CUBE, memory_type="LongTermMemory",
        hierarchy_level=level, created_at=T0, updated_at=T0))  # type: ignore[arg-type]


def update(n: int, action: str, stage: str = "memory.add", **fields: object) -> MemoryUpdate:
    return MemoryUpdate(user_id=CUBE, occurred_at=T0 + timedelta(minutes=n),
                        action=action, stage=stage, **fields)  # type: ignore[arg-type]


def added(n: int, item: MemoryItem, **fields: object) -> MemoryUpdate:
    return update(n, "added", node_id=item.id, node=item, **fields)


BIKE = node("fact-bike", "Ann cycles to work.")
RAIN = node("fact-rain", "Ann bought a rain cape.")
CONCEPT = node("concept-1", "Ann commutes by bike, rain or shine.", "concept")
TOPIC = node("topic-1", "How Ann gets around.", "topic")


def test_a_copy_made_with_its_memory_names_it_and_shares_its_history() -> None:
    copy = working_copy_id(BIKE.id)
    updates = [added(0, BIKE, related_ids=(copy,)), added(1, RAIN),
               update(2, "updated", node_id=BIKE.id,
                      node=BIKE.model_copy(update={"memory": "Ann bikes."})),
               update(3, "removed", node_id=copy, reason="evicted")]
    assert copy_origin(node_changes(updates, copy), {}, copy) == BIKE.id
    assert copy_origin(updates, {}, BIKE.id) is None  # a node of its own
    assert [u.action for u in node_changes(updates, copy)] == ["added", "removed"]
    assert [(u.action, u.node_id) for u in node_changes(updates, copy, BIKE.id)] == [
        ("added", BIKE.id), ("updated", BIKE.id), ("removed", copy)]
    assert [u.action for u in node_changes(updates, BIKE.id)] == ["added", "updated"]

    exp = explain_copy(CubeLog(updates), copy, BIKE.id)
    assert exp.copy_of == BIKE.id and exp.node is not None
    assert exp.node.id == copy and exp.node.metadata.memory_type == "WorkingMemory"
    assert exp.node.memory == "Ann bikes." and exp.node.metadata.origin_id == BIKE.id
    (step,) = exp.lineage
    assert step.kind == "copy" and step.source.node_id == BIKE.id


def test_a_copy_the_scheduler_placed_is_found_through_the_replacement() -> None:
    copy = working_copy_id(RAIN.id)
    placed = WorkingMemoryReplacement(user_id=CUBE, items=(
        WorkingMemoryEntry(id=BIKE.id, memory=BIKE.memory),
        WorkingMemoryEntry(id=RAIN.id, memory=RAIN.memory)))
    by_hand = ReplaceWorkingMemory(user_id=CUBE, node_ids=(RAIN.id,))
    updates = [added(0, RAIN), update(1, "working_memory_replaced", "working-memory",
                                      related_ids=(working_copy_id(BIKE.id), copy),
                                      cause_event_id=placed.event_id)]
    assert copy_origin(updates, {}, copy) is None  # the cause is not read yet
    events = {placed.event_id: ("working.memory", placed)}
    assert copy_origin(updates, events, copy) == RAIN.id
    assert [u.action for u in node_changes(updates, copy)] == ["working_memory_replaced"]
    commanded = [update(1, "working_memory_replaced", "commands", related_ids=(copy,),
                        cause_event_id=by_hand.event_id)]
    assert copy_origin(commanded, {by_hand.event_id: ("memory.commands", by_hand)},
                       copy) == RAIN.id


def test_a_summary_is_explained_by_its_members_and_the_stage_that_made_it() -> None:
    item = ExtractedMemory(user_id=CUBE, memory=BIKE.memory)
    updates = [added(0, BIKE, cause_event_id=item.event_id), added(1, RAIN),
               added(2, CONCEPT, stage="optimizer", reason="structure optimization"),
               update(3, "linked", "optimizer", reason="structure optimization", edges=(
                   Edge(source=CONCEPT.id, target=BIKE.id, type="PARENT"),
                   Edge(source=CONCEPT.id, target=RAIN.id, type="PARENT"))),
               added(4, TOPIC, stage="optimizer"),
               update(5, "linked", "optimizer", edges=(
                   Edge(source=TOPIC.id, target=CONCEPT.id, type="PARENT"),)),
               update(6, "linked", "reorganize", reason="aggregate", edges=(
                   Edge(source=BIKE.id, target=CONCEPT.id, type="AGGREGATE_TO"),))]
    log = CubeLog(updates, events={item.event_id: ("memory.items", item)})
    exp = explain_node(log, CONCEPT.id)
    made = exp.made
    assert made is not None and made.update.stage == "optimizer"
    assert made.update.reason == "structure optimization"
    members = [(s.kind, s.source.node_id) for s in exp.lineage]
    assert members == [("member", BIKE.id), ("member", RAIN.id)]  # each member once
    assert exp.lineage[0].reason == "PARENT edge by the optimizer stage: structure optimization"
    assert [s.text for s in exp.lineage[0].source.sources] == ["Ann cycles to work."]
    # a topic's members are concepts, explained by theirs in turn
    (concept,) = explain_node(log, TOPIC.id).lineage
    assert concept.source.node_id == CONCEPT.id and len(concept.source.lineage) == 2
    # a member is not explained by the summaries it is in
    assert explain_node(log, BIKE.id).lineage == ()


def test_an_inferred_fact_is_explained_by_its_premises() -> None:
    inferred = node("inferred-1", "Ann will likely cycle in the rain.")
    updates = [added(0, BIKE), added(1, RAIN),
               added(2, inferred, stage="reorganize", reason="inferred", edges=(
                   Edge(source=inferred.id, target=BIKE.id, type="INFERRED_FROM"),
                   Edge(source=inferred.id, target=RAIN.id, type="INFERRED_FROM")))]
    exp = explain_node(CubeLog(updates), inferred.id)
    assert [(s.kind, s.source.node_id) for s in exp.lineage] == [
        ("inferred", BIKE.id), ("inferred", RAIN.id)]
    assert exp.made is not None and exp.made.update.stage == "reorganize"
