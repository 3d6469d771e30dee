"""The log fold (memstream/history/provenance.py): snapshots replayed in log order, and
explanations that follow inferences to their premises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from memstream.history.provenance import CubeLog, explain_node, fold
from memstream.topics.events import ExtractedMemory, MemoryUpdate
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, SourceRef

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CUBE = "u"


def node(node_id: str, text: str, **meta: Any) -> MemoryItem:
    fields: dict[str, Any] = {"user_id": CUBE, "cube_id": CUBE, "memory_type": "LongTermMemory",
                              "created_at": T0, "updated_at": T0, "tags": ("t",), "key": text}
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(**{**fields, **meta}))


def update(action: str, n: MemoryItem | None, minute: int, node_id: str | None = None,
           event_id: str | None = None) -> MemoryUpdate:
    return MemoryUpdate(event_id=event_id or f"{action}-{minute}", user_id=CUBE, action=action,
                        stage="test", node=n, node_id=node_id or (n.id if n else None),
                        occurred_at=T0 + timedelta(minutes=minute))


def test_fold_replays_snapshots_in_log_order_up_to_a_time() -> None:
    a, b = node("a", "first"), node("b", "second")
    copy = node("wa", "first", memory_type="WorkingMemory")
    log = [update("added", a, 1), update("added", copy, 1, event_id="wm"),
           update("added", b, 2), update("updated", a.model_copy(update={"memory": "edited"}), 3),
           update("added", a, 1),  # a redelivered announcement: same id, ignored
           update("deleted", None, 4, node_id="b"), update("deleted", None, 5),
           update("added", b, 6, event_id="again")]
    assert fold(log, T0) == {}
    assert {k: v.memory for k, v in fold(log, T0 + timedelta(minutes=2)).items()} == {
        "a": "first", "b": "second"}
    assert {k: v.memory for k, v in fold(log, T0 + timedelta(minutes=3)).items()} == {
        "a": "edited", "b": "second"}
    assert set(fold(log, T0 + timedelta(minutes=4))) == {"a"}
    assert fold(log, T0 + timedelta(minutes=5)) == {}  # the cube was erased
    assert set(fold(log)) == {"b"}


def test_explain_follows_inferences_to_their_premises_and_manual_sources() -> None:
    item = ExtractedMemory(event_id="i1", user_id=CUBE, memory="The user moved to Oslo.",
                           sources=(SourceRef(kind="manual"),))
    premise, other = node("p", "The user moved to Oslo."), node("q", "Oslo is cold in winter.")
    inferred = node("r", "It can be inferred that the user needs a warm coat.",
                    type="reasoning")
    added_p = update("added", premise, 1).model_copy(update={"cause_event_id": "i1"})
    added_r = update("added", inferred, 3).model_copy(update={"edges": (
        Edge(source="r", target="p", type="INFERRED_FROM"),
        Edge(source="r", target="q", type="INFERRED_FROM"))})
    log = CubeLog([added_p, update("added", other, 2), added_r], events={"i1": ("memory.items",
                                                                               item)})
    why = explain_node(log, "r")
    assert [(s.kind, s.source.node_id) for s in why.lineage] == [("inferred", "p"),
                                                                ("inferred", "q")]
    assert [(s.kind, s.text) for s in why.lineage[0].source.sources] == [
        ("manual", "The user moved to Oslo.")]
    assert [c.update.action for c in explain_node(log, "p").changes] == ["added", "added"]
