"""Validity in time: which of two statements holds now.

Every memory holds from ``valid_from`` (conversation time: the event's date when one was
said, else when it was said). A later statement that ends or replaces it — the chunk review
answers ``supersedes``: with a model by its judgement, in rules mode only on an explicit
change (``streams.llm.rules.supersession``) — closes it: ``valid_until`` is set to when the
new one began to hold, ``superseded_by`` names it, a ``SUPERSEDES`` edge goes from the new
to the old, its working-memory copy leaves (working memory holds what is current) and a
``superseded`` update says so. The old statement stays activated and searchable: asked
about the past, it answers; asked about the present, the statement that replaced it ranks
above it (``current_first``).

Nothing is closed that an agent ``confirmed`` (feedback), that is frozen (compliance), or
by a statement about an earlier time than its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstream.streams.core.conflicts import recorded_edges, tag
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.streams.text.changes import SLACK
from memstream.topics.events import MemoryUpdate, ScoredMemory
from memstream.topics.ids import derived_event_id, working_copy_id
from memstream.topics.models import STORED_MEMORY_TYPES, Edge, MemoryItem
from memstream.topics.registry import MEMORY_UPDATES

NOTE_CHARS = 300
MAX_HOPS = 8  # a chain of changes followed to the statement that holds now


def since(node: MemoryItem) -> datetime:
    """When ``node`` began to hold: its validity's start, else the event's time, else when it
    was recorded."""
    md = node.metadata
    return md.valid_from or md.memory_time or md.created_at


def held_back(old: MemoryItem, new: MemoryItem) -> str | None:
    """Why ``new`` may not close ``old`` although the review said it supersedes it, or None."""
    md = old.metadata
    if md.feedback == "confirmed":
        return "confirmed by feedback: never closed automatically"
    if md.valid_until is not None:
        return "already closed"
    if since(new) < since(old) - SLACK:
        return "the new statement is about an earlier time"
    return None


def supersedes_edge(new: MemoryItem, old: MemoryItem, reason: str) -> Edge:
    """``SUPERSEDES`` new → old, its reason tagged with the node whose adding decided it (so a
    redelivery finds its own decision)."""
    return Edge(source=new.id, target=old.id, type="SUPERSEDES",
                reason=(tag(new.id) + reason)[:NOTE_CHARS])


def closed(old: MemoryItem, new: MemoryItem) -> MemoryItem:
    """``old`` as ``new`` leaves it: valid until ``new`` began to hold."""
    return old.evolve(valid_until=since(new), superseded_by=new.id)


async def close(deps: Deps, old: MemoryItem, new: MemoryItem, reason: str,
                base: dict[str, Any]) -> list[Outgoing]:
    """Record the decision (the edge), then apply it (the closed node, its working copy out);
    idempotent, so a redelivery that finds the edge applies and announces it again."""
    cube_id = old.metadata.cube_id
    edge = supersedes_edge(new, old, reason)
    await deps.store.add_edges(cube_id, [edge])
    after = closed(old, new) if old.metadata.superseded_by != new.id else old
    if after != old:
        await deps.store.update_node(cube_id, after)
    await deps.store.delete(cube_id, [working_copy_id(old.id)])
    return announce(after, new.id, edge, base)


def announce(old: MemoryItem, new_id: str, edge: Edge, base: dict[str, Any]) -> list[Outgoing]:
    """``superseded`` for the closed node (its snapshot and the edge), and ``removed`` for its
    working copy (the same id whether this or an eviction took it out)."""
    reason = edge.reason.removeprefix(tag(new_id))
    return [
        Outgoing(MEMORY_UPDATES, MemoryUpdate(
            event_id=derived_event_id("superseded", old.id, new_id), action="superseded",
            node_id=old.id, node=old, related_ids=(new_id,), edges=(edge,),
            reason=reason, **base)),
        copy_removed(old.id, f"superseded by {new_id}", base),
    ]


def copy_removed(node_id: str, reason: str, base: dict[str, Any]) -> Outgoing:
    """``removed`` for a memory's working-memory copy, under the id an eviction of that copy
    announces too (whichever took it out first, the announcement is the same)."""
    return Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("removed", working_copy_id(node_id)), action="removed",
        node_id=working_copy_id(node_id), reason=reason, **base))


async def recorded(deps: Deps, cube_id: str, node_id: str) -> list[tuple[Edge, str]]:
    """The ``SUPERSEDES`` edges written while adding ``node_id``, with their reasons."""
    return [(e, e.reason.removeprefix(tag(node_id)))
            for e in await recorded_edges(deps, cube_id, node_id, "SUPERSEDES")]


async def apply_recorded(deps: Deps, node: MemoryItem,
                         base: dict[str, Any]) -> list[Outgoing]:
    """What an earlier attempt at adding ``node`` closed, closed and announced again."""
    cube_id = node.metadata.cube_id
    out: list[Outgoing] = []
    for edge, reason in await recorded(deps, cube_id, node.id):
        old = await deps.query.get_node(cube_id, edge.target)
        if old is not None:
            out += await close(deps, old, node, reason, base)
    return out


# --------------------------------------------------------------------------- search

# A question about the past asks for what held then: no reordering.
_EN_PAST = re.compile(
    r"\b(?:used to|before|previously|formerly|former|in the past|originally|back then|"
    r"at (?:the|that) time|earlier|ago|(?:did|was|were) (?:i|you|he|she|they|we)\b|"
    r"(?:19|20)\d\d)\b", re.IGNORECASE)
_ZH_PAST = ("以前", "之前", "曾经", "原来", "过去", "当初", "那时", "当时", "早先", "从前", "原先",
            "年前")


def about_the_past(query: str) -> bool:
    """Whether a question asks what held at some earlier time."""
    return bool(_EN_PAST.search(query)) or any(w in query for w in _ZH_PAST)


async def current_first(deps: Deps, cube_id: str, query: str,
                        hits: list[ScoredMemory], recalled: Sequence[ScoredMemory] = ()
                        ) -> list[ScoredMemory]:
    """For a question about the present: of a closed statement and the one that replaced it,
    the current one ranks first — just above the first hit that shows the closed one without
    it (a statement, or an excerpt holding its turn), with that hit's score so scores stay
    sorted; when the current one was not found at all it is put there. ``recalled``: the
    statements recalled before excerpts took their place (an excerpt's statements)."""
    if not hits or about_the_past(query):
        return hits
    facts = {s.item.id: s.item for s in (*recalled, *hits) if _is_statement(s.item)}
    stale = {i: n for i, n in facts.items() if n.metadata.superseded_by is not None}
    if not stale:
        return hits
    current = await _current_of(deps, cube_id, stale)
    out = list(hits)
    for old_id, new in sorted(current.items()):
        old = stale[old_id]
        shows_old = [i for i, s in enumerate(out) if _shows(s, old) and not _shows(s, new)]
        if not shows_old:
            continue
        first_old = shows_old[0]
        shows_new = next((i for i, s in enumerate(out) if _shows(s, new)), None)
        if shows_new is not None and shows_new < first_old:
            continue
        score = out[first_old].score
        if shows_new is None:
            moved = ScoredMemory(item=new, score=score)
        else:
            moved = out.pop(shows_new).model_copy(update={"score": score})
        out.insert(first_old, moved)
    return out


async def _current_of(deps: Deps, cube_id: str,
                      stale: dict[str, MemoryItem]) -> dict[str, MemoryItem]:
    """For each closed statement, the one holding now at the end of its chain of changes
    (activated, not marked wrong); none when the chain leads nowhere."""
    known: dict[str, MemoryItem] = {}
    out: dict[str, MemoryItem] = {}
    heads = {i: n.metadata.superseded_by for i, n in stale.items()}
    for _ in range(MAX_HOPS):
        wanted = sorted({h for h in heads.values() if h and h not in known})
        if wanted:
            known.update({n.id: n for n in await deps.query.get_nodes(cube_id, wanted)})
        nxt: dict[str, str | None] = {}
        for old_id, head in heads.items():
            node = known.get(head) if head else None
            if node is None or node.metadata.status != "activated" \
                    or node.metadata.feedback == "wrong":
                continue
            if node.metadata.superseded_by is None:
                out[old_id] = node
            else:
                nxt[old_id] = node.metadata.superseded_by
        if not nxt:
            break
        heads = nxt
    return out


def _is_statement(item: MemoryItem) -> bool:
    md = item.metadata
    return md.memory_type in STORED_MEMORY_TYPES and md.origin_id is None


def _shows(hit: ScoredMemory, node: MemoryItem) -> bool:
    """Whether a hit is ``node`` (or its working copy) or an excerpt holding its turn."""
    item = hit.item
    if node.id in (item.id, item.metadata.origin_id):
        return True
    said = {s.message_id for s in node.metadata.sources if s.kind == "message" and s.message_id}
    return bool(said) and bool(said & set(hit.excerpt_ids))
