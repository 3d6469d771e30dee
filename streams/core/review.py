"""Conflict detection for a chunk's new memories with one model call (``prompts.review``).

Candidates: activated facts of the same type that still hold (``streams.core.validity``),
most similar first, above the conflict threshold, never about a different subject, never a
fact of the same chunk (so the question does not depend on how the chunk's items were
batched). A statement that says something changed looks further (from the change threshold,
facts of either type: what it ends may be in another language or filed as the other type);
a candidate of the other type may only be superseded, never merged
(``streams.memory.decisions``). The judge's verdicts and the fused
statements of the whole chunk come back in one answer. If the call fails, similarity
decides per node (a best candidate at or above the merge threshold is taken as redundant).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from memstream.sinks.ports import VectorQuery
from memstream.streams.core.merge import FACTS, statement_of
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.conflict import ReviewRelation
from memstream.streams.prompts.fusion import FusionResponse
from memstream.streams.prompts.review import REVIEW, Candidate, ReviewContext, ReviewItem
from memstream.streams.runtime.stage import Deps
from memstream.streams.text.changes import change_marker
from memstream.streams.text.subjects import different_subjects
from memstream.topics.ids import derived_event_id
from memstream.topics.models import STORED_MEMORY_TYPES, MemoryItem, MemoryType

log = logging.getLogger("memstream.merge")


@dataclass(frozen=True)
class Verdict:
    """The candidate a new node repeats or contradicts, and the statement replacing both."""

    candidate: MemoryItem
    score: float
    relation: ReviewRelation
    reason: str
    fused: FusionResponse | None


def chunk_of(node: MemoryItem) -> str | None:
    """The episode a fact was extracted with (its chunk), if it has one."""
    return next((ref.memory_id for ref in node.metadata.sources
                 if ref.kind == "memory" and ref.memory_id), None)


async def candidates(node: MemoryItem, vector: Sequence[float], deps: Deps,
                     siblings: frozenset[str]) -> list[tuple[MemoryItem, float]]:
    """Stored activated facts that may repeat or contradict ``node``, most similar first."""
    cfg = deps.settings.memory
    md = node.metadata
    chunk = chunk_of(node)
    change = change_marker(node.memory) is not None
    floor = min(cfg.conflict_threshold, cfg.change_threshold) if change else cfg.conflict_threshold
    types: list[MemoryType] = list(STORED_MEMORY_TYPES) if change else [md.memory_type]
    query = VectorQuery(vector, cfg.conflict_candidates + 1 + len(siblings),
                        memory_types=types, filters=FACTS)
    hits = await deps.store.search(md.cube_id, query, min_score=floor)
    found: list[tuple[MemoryItem, float]] = []
    for cand, score in hits:
        if score < floor:
            break
        if cand.id == node.id or cand.id in siblings or (chunk and chunk_of(cand) == chunk):
            continue
        if cand.metadata.valid_until is not None:
            continue  # no longer holds: nothing new repeats, contradicts or ends it
        if cand.metadata.feedback == "wrong":
            continue
        if different_subjects(cand.memory, node.memory, cand.metadata.entities, md.entities):
            continue
        found.append((cand, score))
    return found[: cfg.conflict_candidates]


async def review(nodes: Sequence[tuple[MemoryItem, Sequence[float]]],
                 deps: Deps) -> dict[str, Verdict | None]:
    """Each node's verdict (None: independent of every candidate), one call for all."""
    siblings = frozenset(n.id for n, _ in nodes)
    found = {n.id: await candidates(n, v, deps, siblings) for n, v in nodes}
    asked = [n for n, _ in nodes if found[n.id]]
    out: dict[str, Verdict | None] = dict.fromkeys(siblings)
    if not asked:
        return out
    cfg = deps.settings.memory
    ctx = ReviewContext(merge_threshold=cfg.merge_threshold, items=[
        ReviewItem(new=statement_of(n), candidates=[
            Candidate(statement=statement_of(c), similarity=max(-1.0, min(1.0, s)))
            for c, s in found[n.id]]) for n in asked])
    try:
        answer = await deps.llm.run(REVIEW, ctx)
    except LLMError as exc:
        log.warning("merge review failed, similarity decides: %s", exc)
        for n in asked:
            best, score = found[n.id][0]
            if score >= cfg.merge_threshold:
                out[n.id] = Verdict(best, score, "redundant",
                                    f"judge failed ({exc.task}); similarity {score:.3f} decided",
                                    None)
        return out
    for i, n in enumerate(asked):
        decision = answer.decision_for(i, len(found[n.id]))
        if decision is not None and decision.candidate is not None:
            cand, score = found[n.id][decision.candidate]
            out[n.id] = Verdict(cand, score, decision.relation, decision.reason,
                                decision.fused())
    return out


# --------------------------------------------------------------------------- the record


class RecordedVerdict(BaseModel):
    """A verdict as kept: its candidate by id."""

    model_config = ConfigDict(frozen=True)

    candidate: str
    score: float
    relation: ReviewRelation
    reason: str
    fused: FusionResponse | None = None


class RecordedReview(BaseModel):
    """A chunk's verdicts, by node id (None: independent of its candidates)."""

    model_config = ConfigDict(frozen=True)

    verdicts: dict[str, RecordedVerdict | None]

    async def verdicts_for(self, deps: Deps, cube_id: str,
                           ids: Sequence[str]) -> dict[str, Verdict | None]:
        """The verdicts of ``ids``, their candidates read as they are now (one deleted since
        leaves its node independent: there is nothing left to merge or close)."""
        kept = {i: v for i in ids if (v := self.verdicts.get(i)) is not None}
        found = {n.id: n for n in await deps.query.get_nodes(
            cube_id, sorted({v.candidate for v in kept.values()}))}
        out: dict[str, Verdict | None] = dict.fromkeys(ids)
        for nid, v in kept.items():
            if (cand := found.get(v.candidate)) is not None:
                out[nid] = Verdict(cand, v.score, v.relation, v.reason, v.fused)
        return out


def review_key(chunk: str) -> str:
    return derived_event_id("chunk-review", chunk)


async def record_review(deps: Deps, cube_id: str, chunk: str,
                        verdicts: dict[str, Verdict | None]) -> None:
    """Keep ``chunk``'s verdicts before the first is applied."""
    kept = RecordedReview(verdicts={
        nid: None if v is None else RecordedVerdict(
            candidate=v.candidate.id, score=v.score, relation=v.relation, reason=v.reason,
            fused=v.fused)
        for nid, v in verdicts.items()})
    await deps.store.record_answer(cube_id, review_key(chunk), kept.model_dump_json())


async def recorded_review(deps: Deps, cube_id: str, chunk: str) -> RecordedReview | None:
    """The verdicts an earlier attempt kept for ``chunk``, if it kept any."""
    text = await deps.query.recorded_answer(cube_id, review_key(chunk))
    if text is None:
        return None
    try:
        return RecordedReview.model_validate_json(text)
    except ValidationError:
        log.warning("cube %s: the kept review of chunk %s does not parse: asked again",
                    cube_id, chunk)
        return None
