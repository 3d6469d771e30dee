"""What a node no item wrote came from, read from the updates that name it.

A working-memory copy (``working_copy_id``) is named in ``related_ids`` by the ``added`` of
the memory it copies and by each ``working_memory_replaced`` that put it in working memory
(whose cause, a replacement or a ``replace_working_memory`` command, lists that memory). A
summary the optimizer made (a concept, a topic) has its members at the ends of its
``PARENT`` edges (summary -> member) and ``AGGREGATE_TO`` edges (member -> concept); an
inferred fact its premises at those of its ``INFERRED_FROM`` edges. Pure functions, so
``provenance.explain_node`` and the fetches in ``indexed.py`` share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from memstream.topics.events import (
    Event,
    MemoryUpdate,
    ReplaceWorkingMemory,
    WorkingMemoryReplacement,
)
from memstream.topics.ids import working_copy_id
from memstream.topics.models import Edge, MemoryItem

# The updates that name a working-memory copy without being about the node they announce.
COPY_NAMING = frozenset({"added", "working_memory_replaced"})
_OWN = frozenset({"added", "merged", "updated", "archived", "expired", "frozen", "unfrozen"})


def copy_origin(updates: Iterable[MemoryUpdate], events: Mapping[str, tuple[str, Event]],
                node_id: str) -> str | None:
    """The memory ``node_id`` is a working-memory copy of, or None when it is a node of its
    own (some update announces its state) or nothing read names what it copies.
    ``events``: the causes read so far (event id -> (topic, event))."""
    updates = list(updates)
    if has_state(updates, node_id):
        return None
    for u in updates:
        if u.action not in COPY_NAMING or node_id not in u.related_ids:
            continue
        candidates: Iterable[str] = ()
        if u.action == "added" and u.node_id is not None:
            candidates = (u.node_id,)
        elif (found := events.get(u.cause_event_id or "")) is not None:
            cause = found[1]
            if isinstance(cause, WorkingMemoryReplacement):
                candidates = [item.id for item in cause.items]
            elif isinstance(cause, ReplaceWorkingMemory):
                candidates = cause.node_ids
        for candidate in candidates:
            if working_copy_id(candidate) == node_id:
                return candidate
    return None


def has_state(updates: Iterable[MemoryUpdate], node_id: str) -> bool:
    """Whether an update announces ``node_id``'s own state (a node no copy stands for)."""
    return any(u.node_id == node_id and u.action in _OWN for u in updates)


def as_copy(node: MemoryItem, copy_id: str) -> MemoryItem:
    """The working-memory copy of ``node`` (what ``streams.core.working_memory`` writes)."""
    return node.model_copy(update={"id": copy_id, "metadata": node.metadata.model_copy(
        update={"memory_type": "WorkingMemory", "origin_id": node.id})})


def member_of(edge: Edge, node_id: str) -> str | None:
    """The member ``edge`` gives the summary ``node_id``, if it gives one."""
    if edge.type == "PARENT" and edge.source == node_id:
        return edge.target
    if edge.type == "AGGREGATE_TO" and edge.target == node_id:
        return edge.source
    return None


def premise_of(edge: Edge, node_id: str) -> str | None:
    """The premise ``edge`` gives the inferred fact ``node_id``, if it gives one."""
    return edge.target if edge.type == "INFERRED_FROM" and edge.source == node_id else None
