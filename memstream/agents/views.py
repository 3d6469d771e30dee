"""Memories as plain JSON for agents: the fields a model reasons with, nothing it cannot use
(no vectors, no usage log), dates as ISO 8601 strings."""

from __future__ import annotations

from typing import Any

from memstream.history.provenance import Change, Explanation
from memstream.topics.models import MemoryItem


def memory_view(node: MemoryItem, score: float | None = None,
                sources: bool = False) -> dict[str, Any]:
    """One memory; ``sources``: also where it came from (get, not search, needs them)."""
    md = node.metadata
    view: dict[str, Any] = {
        "id": node.id, "memory": node.memory, "memory_type": md.memory_type,
        "kind": md.type, "key": md.key, "tags": list(md.tags), "status": md.status,
        "session_id": md.session_id, "updated_at": md.updated_at.isoformat(),
    }
    if score is not None:
        view["score"] = round(score, 4)  # (memory_tools filters min_score on this)
    if md.frozen:
        view["frozen"] = True
    if md.feedback is not None:  # the agents' verdict in force (memory_feedback)
        view["feedback"] = md.feedback
    if md.valid_until is not None:
        view["valid_until"] = md.valid_until.isoformat()
    if sources:
        view["created_at"] = md.created_at.isoformat()
        view["hierarchy_level"] = md.hierarchy_level
        view["confidence"] = md.confidence
        view["sources"] = [s.model_dump(mode="json", exclude_none=True) for s in md.sources]
    return view


def change_view(change: Change, node_id: str, copy_of: str | None = None) -> dict[str, Any]:
    """One change of a memory (or of the memory it is a working-memory copy of) with the
    event that caused it (its kind and topic)."""
    u = change.update
    view: dict[str, Any] = {"at": u.occurred_at.isoformat(), "action": u.action,
                            "stage": u.stage}
    if copy_of is not None:
        view["of"] = "original" if u.node_id == copy_of else "copy"
    if u.node is not None and u.node_id in (node_id, copy_of):
        view["memory"] = u.node.memory
        view["status"] = u.node.metadata.status
    if u.reason:
        view["reason"] = u.reason
    if change.cause is not None:
        cause = change.cause
        what = getattr(cause, "command", None) or getattr(cause, "op", None) \
            or type(cause).__name__
        view["caused_by"] = f"{change.cause_topic}: {what}"
    return view


def explanation_view(exp: Explanation, depth: int = 0) -> dict[str, Any]:
    """Why a memory exists: the messages it came from, the stage that made it, and the
    memories it was merged or inferred from, summarizes (``member``) or copies (``copy``),
    each explained in turn, as deep as the log's lineage goes."""
    view: dict[str, Any] = {"id": exp.node_id,
                            "memory": exp.node.memory if exp.node is not None else None}
    if exp.node is not None and exp.node.metadata.hierarchy_level != "fact":
        view["hierarchy_level"] = exp.node.metadata.hierarchy_level
    if exp.copy_of is not None:
        view["copy_of"] = exp.copy_of
    if (made := exp.made) is not None:
        view["made_by"] = {k: v for k, v in {
            "stage": made.update.stage, "reason": made.update.reason or None,
            "at": made.update.occurred_at.isoformat()}.items() if v is not None}
    if (said := exp.feedback) is not None:
        verdict, _, note = said.update.reason.partition(": ")
        view["feedback"] = {k: v for k, v in {
            "verdict": verdict, "note": note or None,
            "at": said.update.occurred_at.isoformat()}.items() if v is not None}
    view["sources"] = [
        {k: v for k, v in {
            "kind": s.kind, "text": s.text, "role": s.role, "name": s.name,
            "message_id": s.message_id, "session_id": s.session_id,
            "timestamp": s.timestamp.isoformat() if s.timestamp else None}.items()
         if v is not None}
        for s in exp.sources]
    view["lineage"] = [
        {"kind": step.kind, "reason": step.reason,
         "at": step.at.isoformat() if step.at else None,
         "from": explanation_view(step.source, depth + 1)}
        for step in exp.lineage]
    return view
