"""Conflict detection and merging.

For a new long-term node: the most similar activated nodes of the same type in the cube
are its candidates, and one review of the chunk (``streams.core.review``) names the one it
repeats or contradicts; that pair is fused into one node that keeps the new node's id, and
the old node is archived with a ``MERGED_TO`` edge to it and its other edges moved over. A
pair about different subjects (``streams.core.subjects``) is never merged, before and
regardless of the judge. Otherwise only the judge decides: with this embedder, different
facts often score above the merge threshold. If the judge fails, the threshold decides; if
fusion fails, a hard update keeps the newer statement. Without a
model (``rules``) a contradiction is only suspected: both stay activated, linked by a
``CONFLICT`` edge (``streams.core.conflicts``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from memstream.sinks.ports import Filter
from memstream.streams.embed.nodes import node_vectors
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.conflict import (
    MemoryStatement,
    Relation,
)
from memstream.streams.prompts.fusion import FUSION, FusionContext, FusionResponse
from memstream.streams.runtime.stage import Deps
from memstream.topics.ids import working_copy_id
from memstream.topics.models import LINEAGE_EDGE_TYPES, Edge, MemoryItem

log = logging.getLogger("memstream.merge")
HARD_UPDATE = "; hard update"
NOTE_CHARS = 400  # a MERGED_TO edge's reason (relation and the judge's reason) is cut here
FACTS = (Filter("hierarchy_level", "=", "fact"), Filter("type", "!=", "reasoning"))


@dataclass(frozen=True)
class Merge:
    """The outcome of resolving one pair."""

    kept: MemoryItem  # activated: the fused node (or the newer one after a hard update)
    kept_vector: Sequence[float]
    archived: MemoryItem  # snapshot after archiving
    relation: Relation
    reason: str
    hard_update: bool


def statement_of(item: MemoryItem) -> MemoryStatement:
    md = item.metadata
    return MemoryStatement(text=item.memory, key=md.key, tags=list(md.tags),
                           entities=list(md.entities), updated_at=md.updated_at,
                           valid_from=md.valid_from)


def _union(*groups: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for group in groups for x in group if x))


async def resolve(
    old: MemoryItem, new: MemoryItem, new_vector: Sequence[float], relation: Relation,
    reason: str, deps: Deps, fused: FusionResponse | None = None,
) -> Merge:
    """Fuse ``old`` and ``new`` into the surviving node; archive the other. Not yet written.

    ``fused``: the merged statement when the judge's answer gave it (no fusion call)."""
    hard = False
    if fused is None:
        try:
            fused = await deps.llm.run(FUSION, FusionContext(
                existing=statement_of(old), new=statement_of(new), relation=relation))
        except LLMError as exc:
            log.warning("fusion failed, hard update (newer wins): %s", exc)
            hard = True
    if hard or fused is None:
        newer_is_new = new.metadata.updated_at >= old.metadata.updated_at
        kept_base, loser = (new, old) if newer_is_new else (old, new)
        kept = kept_base.evolve(
            tags=_union(kept_base.metadata.tags, loser.metadata.tags),
            entities=_union(kept_base.metadata.entities, loser.metadata.entities),
            sources=tuple(dict.fromkeys((*kept_base.metadata.sources, *loser.metadata.sources))),
            confidence=max(old.metadata.confidence, new.metadata.confidence),
        )
        vector = new_vector if newer_is_new else await _embed(deps, kept)
        return Merge(kept, vector, loser.evolve(status="archived"), relation,
                     reason if reason.endswith(HARD_UPDATE) else reason + HARD_UPDATE, True)
    md_old, md_new = old.metadata, new.metadata
    merged = MemoryItem(id=new.id, memory=fused.memory, metadata=md_new.model_copy(update={
        "key": fused.key or md_new.key or md_old.key,
        "tags": _union(fused.tags, md_new.tags, md_old.tags),
        "entities": _union(md_new.entities, md_old.entities),
        "sources": tuple(dict.fromkeys((*md_old.sources, *md_new.sources))),
        "confidence": max(md_old.confidence, md_new.confidence),
        "created_at": min(md_old.created_at, md_new.created_at),
        "updated_at": max(md_old.updated_at, md_new.updated_at),
        "memory_time": max((t for t in (md_old.memory_time, md_new.memory_time) if t),
                           default=None),
        "background": md_new.background or md_old.background,
        # one statement said twice held from the first time; a contradiction fused into the
        # newer statement holds from when that was said
        "valid_from": (min((t for t in (md_old.valid_from, md_new.valid_from) if t),
                           default=None) if relation == "redundant"
                       else md_new.valid_from or md_old.valid_from),
    }))
    vector = new_vector if merged.memory == new.memory else await _embed(deps, merged)
    return Merge(merged, vector, old.evolve(status="archived"), relation, reason, False)


async def _embed(deps: Deps, node: MemoryItem) -> list[float]:
    [vector] = await node_vectors(deps.embedder, [node])
    return vector


def merge_note(merge: Merge, decided_for: str | None = None) -> str:
    """The ``MERGED_TO`` edge's reason: what was decided and why; the add stage tags it with
    the node whose adding decided it, so a redelivery finds its own decision."""
    tag = f"[{decided_for}] " if decided_for else ""
    return tag + merge_reason(merge)


def merge_reason(merge: Merge) -> str:
    """``relation: reason``, as the ``merged`` update and the edge say it."""
    return f"{merge.relation}: {merge.reason}"[:NOTE_CHARS]


def decided_for(edge: Edge, node_id: str) -> str | None:
    """``relation: reason`` if the add stage wrote this ``MERGED_TO`` edge adding ``node_id``."""
    tag = f"[{node_id}] "
    return edge.reason[len(tag):] if edge.reason.startswith(tag) else None


def parse_note(note: str) -> tuple[Relation, str]:
    """``relation: reason`` back into its parts (an unknown relation reads as redundant)."""
    relation, _, reason = note.partition(": ")
    match relation:
        case "contradictory" | "redundant":
            return relation, reason
        case _:
            return "redundant", note


async def recorded_merge(deps: Deps, cube_id: str, node_id: str) -> tuple[Edge, str] | None:
    """The merge decided while adding ``node_id``, if an earlier attempt recorded one: its
    ``MERGED_TO`` edge and ``relation: reason``."""
    for edge in await deps.query.edges_of(cube_id, node_id, ["MERGED_TO"], "any"):
        note = decided_for(edge, node_id)
        if note is not None:
            return edge, note
    return None


async def apply(merge: Merge, deps: Deps, decided_by: str | None = None,
                extra: Sequence[tuple[MemoryItem, Sequence[float]]] = ()) -> None:
    """Record the decision (the ``MERGED_TO`` edge) first, then write the surviving node and
    archive the other (and ``extra`` units, e.g. the kept node's working copy) as one write,
    drop the archived node's working copy, move its edges.

    The edge comes first so that a crash at any later step leaves the decision on record:
    the redelivered input completes it instead of deciding again."""
    cube = merge.kept.metadata.cube_id
    archived = merge.archived
    await deps.store.add_edges(cube, [Edge(source=archived.id, target=merge.kept.id,
                                           type="MERGED_TO",
                                           reason=merge_note(merge, decided_by))])
    await deps.store.write([(merge.kept, merge.kept_vector), (archived, await _vector_of(
        deps, archived, merge)), *extra])
    await finish(merge, deps)


async def finish(merge: Merge, deps: Deps) -> None:
    """The steps after the node writes (idempotent): working memory holds what is current, so
    the archived node's copy leaves it; the archived node's non-lineage edges move over."""
    cube = merge.kept.metadata.cube_id
    await deps.store.delete(cube, [working_copy_id(merge.archived.id)])
    await deps.store.redirect_edges(cube, [merge.archived.id], merge.kept.id,
                                    exclude=sorted(LINEAGE_EDGE_TYPES))


async def _vector_of(deps: Deps, item: MemoryItem, merge: Merge) -> Sequence[float]:
    """The archived node keeps its own vector (from the store, or the new one it came with)."""
    records = await deps.query.vectors(item.metadata.cube_id, [item.id])
    if records:
        return list(records[0].vector)
    return merge.kept_vector if merge.kept.memory == item.memory else await _embed(
        deps, item)
