"""One or more real events of every topic of the registry, with the fields that get sealed
filled in: what the published contract is tested on."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel

from memstream.topics.events import (
    ActivationMemory,
    ConversationChunk,
    DeadLetter,
    DeleteNodes,
    Document,
    ErrorInfo,
    ExtractedMemory,
    GetRequest,
    MemoryUpdate,
    Message,
    Origin,
    PromoteCube,
    ReorganizeEvent,
    Reply,
    ScheduleMessage,
    ScoredMemory,
    SearchRequest,
    SearchResult,
    ShareCube,
    UpdateNode,
    WorkingMemoryEntry,
    WorkingMemoryReplacement,
)
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, SourceRef

T = datetime(2025, 5, 8, 13, 56, tzinfo=UTC)
WHO = {"user_id": "alice", "cube_id": "alice", "occurred_at": T}
LONG = "We talked about the trip to Lisbon, the hotel in Alfama and the day in Sintra. " * 8


def _node(node_id: str = "n1") -> MemoryItem:
    return MemoryItem(id=node_id, memory="Alice is allergic to shellfish.",
                      metadata=MemoryMetadata(user_id="alice", cube_id="alice",
                                              memory_type="LongTermMemory", key="allergy",
                                              tags=("food", "health"), created_at=T,
                                              updated_at=T))


def samples() -> dict[str, list[BaseModel]]:
    """At least one event of each topic, with the fields that get sealed filled in."""
    message = Message(id="m1", role="user", content="I'm allergic to shellfish.", timestamp=T,
                      name="Alice")
    return {
        "conversations": [
            ConversationChunk(**WHO, session_id="s1", messages=(message,)),
            ConversationChunk(**WHO, kind="doc", document=Document(doc_id="d1", text=LONG,
                                                                   title="Notes")),
        ],
        "memory.items": [ExtractedMemory(
            **WHO, id="n1", memory="Alice is allergic to shellfish.", key="allergy",
            tags=("food",), entities=("Alice",), sources=(SourceRef(message_id="m1"),),
            origin=Origin(topic="memstream.conversations", partition=0, offset=3))],
        "memory.commands": [
            UpdateNode(**WHO, node_id="n1", memory="Alice avoids shellfish.", tags=("food",)),
            DeleteNodes(**WHO, node_ids=("n1",)),
            ShareCube(**WHO, with_user_id="bob", permission="write"),
        ],
        "memory.updates": [MemoryUpdate(
            **WHO, action="merged", stage="memory.add", node_id="n1", node=_node(),
            related_ids=("n0",), edges=(Edge(source="n0", target="n1", type="MERGED_TO",
                                             reason="the same allergy"),),
            reason="the same fact, said twice")],
        "reorganize.high": [ReorganizeEvent(**WHO, op="add", node_ids=("n1",))],
        "reorganize.normal": [ReorganizeEvent(**WHO, op="merge", node_ids=("n0", "n1"))],
        "reorganize.low": [ReorganizeEvent(**WHO, op="end")],
        "schedule.query": [ScheduleMessage(**WHO, label="query", content="what can't I eat?")],
        "schedule.answer": [ScheduleMessage(**WHO, label="answer", content="No shellfish.")],
        "schedule.add": [ScheduleMessage(**WHO, label="add", content="shellfish allergy",
                                                 memory_ids=("n1",))],
        "working-memory": [WorkingMemoryReplacement(
            **WHO, items=(WorkingMemoryEntry(id="n1", memory="Alice is allergic to "
                                             "shellfish."),), reason="asked about food",
            queries=("what can't I eat?",))],
        "activation-memory": [ActivationMemory(**WHO, text="- Alice is allergic to shellfish.",
                                               node_ids=("n1",))],
        "requests": [
            SearchRequest(**WHO, query="what can't I eat?", reply_to="memstream.replies",
                          reply_partition=2, correlation_id="c1", search_filter={"tag": "food"},
                          chat_history=({"role": "user", "content": "hi"},)),
            GetRequest(**WHO, ids=("n1",), correlation_id="c2"),
        ],
        "replies": [
            Reply(**WHO, correlation_id="c1", ok=True, result=SearchResult(memories=(
                ScoredMemory(item=_node(), score=0.9, excerpt="Alice: I'm allergic"),))),
            Reply(**WHO, correlation_id="c2", ok=False,
                  error=ErrorInfo(type="ValueError", message="no such node: n9")),
        ],
        "dead-letter": [DeadLetter(
            **WHO, stage="extraction", error="the model said no", error_type="ValueError",
            original_topic="memstream.conversations", original_partition=0, original_offset=7,
            original_key="alice", payload='{"user_id":"alice"}')],
        "cube-views": [PromoteCube(**WHO, view="alice-v2")],
    }
