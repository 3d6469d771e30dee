"""One ``linked`` announcement per cause instead of one per edge.

The optimizer announces each edge it draws (time order, relations, aggregates) as its own
``memory.updates`` record: on a LoCoMo load that was 15 records per turn, a third of the
log, each repeating the envelope (ids, times, the cube's key, the seal). The edges one
event caused are announced together here, just before they are sent: the same edges, in
one record whose id derives from the ids it replaces, so a redelivery sends the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstream.streams.runtime.stage import Outgoing
from memstream.topics.events import MemoryUpdate
from memstream.topics.ids import derived_event_id
from memstream.topics.models import Edge
from memstream.topics.registry import MEMORY_UPDATES

GroupKey = tuple[str, str | None, str, bytes | None, int | None]


def _mergeable(out: Outgoing) -> bool:
    u = out.event
    return (out.spec is MEMORY_UPDATES and out.topic is None and out.then is None
            and isinstance(u, MemoryUpdate) and u.action == "linked" and u.node is None
            and u.node_id is None and not u.related_ids and bool(u.edges))


def _key(out: Outgoing) -> GroupKey:
    u = out.event
    assert isinstance(u, MemoryUpdate)  # noqa: S101 - _mergeable checked it
    return u.cube_id, u.cause_event_id, u.stage, out.key, out.partition


def _joined(group: list[Outgoing]) -> Outgoing:
    updates = [o.event for o in group]
    assert all(isinstance(u, MemoryUpdate) for u in updates)  # noqa: S101
    first: MemoryUpdate = updates[0]  # type: ignore[assignment]
    reasons = {u.reason for u in updates}  # type: ignore[attr-defined]
    edges: dict[tuple[str, str, str], Edge] = {}
    for u in updates:
        for e in u.edges:  # type: ignore[attr-defined]
            # each edge keeps the reason its own announcement gave
            keep = e if e.reason or len(reasons) == 1 else e.model_copy(
                update={"reason": u.reason})  # type: ignore[attr-defined]
            edges.setdefault((e.source, e.target, e.type), keep)
    joined = first.model_copy(update={
        "event_id": derived_event_id("linked", *sorted(u.event_id for u in updates)),
        "edges": tuple(edges.values()),
        "reason": first.reason if len(reasons) == 1 else "",
    })
    return Outgoing(MEMORY_UPDATES, joined, key=group[0].key, partition=group[0].partition,
                    headers=group[0].headers)


def coalesce_links(outgoing: Sequence[Outgoing]) -> list[Outgoing]:
    """``outgoing`` with the edge-only ``linked`` updates of one cause joined into one, at
    the place of the first; everything else as it was, in order."""
    groups: dict[GroupKey, list[Outgoing]] = {}
    for out in outgoing:
        if _mergeable(out):
            groups.setdefault(_key(out), []).append(out)
    if all(len(g) < 2 for g in groups.values()):
        return list(outgoing)
    result: list[Outgoing] = []
    for out in outgoing:
        if not _mergeable(out):
            result.append(out)
            continue
        group = groups[_key(out)]
        if len(group) == 1:
            result.append(out)
        elif out is group[0]:
            result.append(_joined(group))
    return result
