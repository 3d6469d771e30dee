"""The Searcher (SPEC §3.4): goal parsing, parallel recall, rerank, reasoning, trim.

Pure async logic over the ports: a ``SearchRequest`` and ``Deps`` in, scored
memories out. Usage is recorded by the caller after the reply is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sinks.filtering import matches_all
from sinks.ports import Filter, StoreError
from streams.llm.port import LLMError
from streams.prompts.search import (
    GOAL_PARSER,
    REASONER,
    GoalContext,
    HistoryTurn,
    ReasonerCandidate,
    ReasonerContext,
    ids_from_free_text,
)
from streams.runtime import Deps
from streams.search.filters import parse_search_filter
from topics.events import ScoredMemory, SearchRequest
from topics.models import MemoryItem, MemoryType

log = logging.getLogger("memstream.search")

STORED_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory")


@dataclass
class Goal:
    """What to look for: keys for graph recall, texts to embed for vector recall."""

    keys: list[str]
    tags: list[str]
    rephrasings: list[str]
    mode_used: str = "fast"


@dataclass
class Candidates:
    items: dict[str, MemoryItem] = field(default_factory=dict)

    def add(self, nodes: Sequence[MemoryItem]) -> None:
        for node in nodes:
            self.items.setdefault(node.id, node)


def requested_types(memory_type: str) -> tuple[MemoryType, ...]:
    match memory_type:
        case "All":
            return ("WorkingMemory", *STORED_TYPES)
        case "WorkingMemory" | "LongTermMemory" | "UserMemory":
            return (memory_type,)
        case _:
            raise ValueError(f"unknown memory_type {memory_type!r}")


async def parse_goal(req: SearchRequest, deps: Deps, query_vec: np.ndarray) -> Goal:
    """fast: the query itself. fine: ground on vector hits, then ask the goal parser."""
    fast = Goal(keys=[req.query], tags=[], rephrasings=[req.query])
    if req.mode == "fast":
        return fast
    context = await deps.store.search(req.cube_id, query_vec.tolist(), 5,
                                      memory_types=list(STORED_TYPES))
    ctx = GoalContext(
        query=req.query,
        chat_history=[HistoryTurn.model_validate(t) for t in req.chat_history
                      if t.get("role") and t.get("content")],
        context_memories=[item.memory for item, _ in context],
        now=deps.clock(),
    )
    try:
        parsed = await deps.llm.run(GOAL_PARSER, ctx)
    except LLMError as exc:
        log.warning("fine goal parsing failed, falling back to fast: %s", exc)
        return fast
    rephrasings = list(dict.fromkeys([req.query, *parsed.memories]))
    return Goal(keys=parsed.keys, tags=parsed.tags, rephrasings=rephrasings, mode_used="fine")


async def key_recall(req: SearchRequest, deps: Deps, keys: Sequence[str],
                     filters: Sequence[Filter], top_k: int) -> list[MemoryItem]:
    """Graph recall by exact key (needs no embedding, so fast mode starts it first)."""
    stored = [t for t in requested_types(req.memory_type) if t != "WorkingMemory"]
    if not stored or not keys:
        return []
    return await deps.graph.find_nodes(req.cube_id, [
        Filter("key", "in", list(keys)),
        Filter("status", "=", "activated"),
        Filter("memory_type", "in", stored),
        *filters,
    ], limit=top_k)


async def recall(
    req: SearchRequest, deps: Deps, goal: Goal, filters: Sequence[Filter],
    vectors: np.ndarray, top_k: int, keyed: Awaitable[list[MemoryItem]] | None = None,
) -> Candidates:
    """Working memory, graph recall and vector recall, in parallel (``keyed``: key recall
    already under way)."""
    types = requested_types(req.memory_type)
    stored = [t for t in types if t != "WorkingMemory"]
    found = Candidates()
    # Working memory holds at most its capacity, so a vector search with a pool at least that
    # large scores every working-memory item, in the same call as long-term recall.
    pool = max(top_k, deps.settings.memory.working_memory_capacity)

    async def by_key() -> list[MemoryItem]:
        if keyed is not None:
            return await keyed
        return await key_recall(req, deps, goal.keys, filters, top_k)

    async def by_tags() -> list[MemoryItem]:
        if not stored or len(goal.tags) < deps.settings.search.tag_overlap_min:
            return []
        hits = await deps.graph.neighbors_by_tags(
            req.cube_id, goal.tags, min_overlap=deps.settings.search.tag_overlap_min,
            limit=top_k)
        return [h.node for h in hits
                if h.node.metadata.memory_type in stored and matches_all(h.node, filters)]

    async def by_vector(vec: np.ndarray, memory_types: Sequence[MemoryType], k: int,
                        ) -> list[MemoryItem]:
        if not memory_types:
            return []
        hits = await deps.store.search(req.cube_id, vec.tolist(), k,
                                       memory_types=list(memory_types), filters=filters)
        return [item for item, _ in hits]

    working: list[MemoryType] = ["WorkingMemory"] if "WorkingMemory" in types else []
    results = await asyncio.gather(
        by_key(), by_tags(),
        by_vector(vectors[0], [*working, *stored], pool + (top_k if working else 0)),
        *(by_vector(v, stored, top_k) for v in vectors[1:]))
    for nodes in results:
        found.add(nodes)
    return found


def hierarchy_weight(deps: Deps, item: MemoryItem) -> float:
    cfg = deps.settings.search
    match item.metadata.hierarchy_level:
        case "topic":
            return cfg.topic_weight
        case "concept":
            return cfg.concept_weight
        case "fact":
            return cfg.fact_weight


async def rerank(
    deps: Deps, cube_id: str, query_vec: np.ndarray, candidates: Candidates
) -> list[ScoredMemory]:
    """Cosine similarity of query and candidate embeddings, weighted by hierarchy level."""
    ids = list(candidates.items)
    if not ids:
        return []
    records = {r.id: r for r in await deps.vectors.get(cube_id, ids)}
    scored = []
    for node_id in ids:
        record = records.get(node_id)
        if record is None:
            continue  # a node whose vector is not written yet is not searchable yet
        item = candidates.items[node_id]
        cosine = float(np.dot(np.asarray(record.vector, dtype=np.float32), query_vec))
        scored.append(ScoredMemory(item=item, score=cosine * hierarchy_weight(deps, item)))
    scored.sort(key=lambda s: s.score, reverse=True)
    return scored


async def reason(req: SearchRequest, deps: Deps, ranked: list[ScoredMemory]) -> list[ScoredMemory]:
    """fine mode: keep what the reasoner finds useful (ids from free text if JSON fails)."""
    if not ranked:
        return ranked
    shortlist = ranked[: max(req.top_k * 2, 10)]
    ctx = ReasonerContext(query=req.query, candidates=[
        ReasonerCandidate(id=s.item.id, text=s.item.memory) for s in shortlist])
    known = [s.item.id for s in shortlist]
    try:
        selected = (await deps.llm.run(REASONER, ctx)).selected_ids
    except LLMError as exc:
        selected = ids_from_free_text(exc.last_answer or "", known)
        log.warning("reasoner answer unusable (%s); %d ids found in its text", exc, len(selected))
        if not selected:
            return ranked
    keep = {i for i in selected if i in known}
    return [s for s in ranked if s.item.id in keep] or ranked


def dedupe(ranked: list[ScoredMemory]) -> list[ScoredMemory]:
    """One entry per memory: a working-memory copy and its long-term node count once, and
    the long-term node (the canonical id, with its lineage) is the one kept."""
    present = {s.item.id for s in ranked}
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    out = []
    for s in ranked:
        if s.item.metadata.origin_id in present:
            continue
        origin = s.item.metadata.origin_id or s.item.id
        text = " ".join(s.item.memory.split()).casefold()
        if origin in seen_ids or text in seen_text:
            continue
        seen_ids.update({origin, s.item.id})
        seen_text.add(text)
        out.append(s)
    return out


async def search(req: SearchRequest, deps: Deps) -> tuple[list[ScoredMemory], str]:
    """The memories answering ``req``, best first, and the mode actually used."""
    filters = parse_search_filter(req.search_filter)
    pool = max(req.top_k * 3, 20)
    # fast mode's key is the query itself: look it up while the query is being embedded
    keyed = (asyncio.ensure_future(key_recall(req, deps, [req.query], filters, pool))
             if req.mode == "fast" else None)
    try:
        query_vec = (await deps.embedder.embed_queries([req.query]))[0]
        goal = await parse_goal(req, deps, query_vec)
        extra = goal.rephrasings[1:]
        vectors = [query_vec]
        if extra:
            vectors.extend(await deps.embedder.embed_queries(extra))
        candidates = await recall(req, deps, goal, filters, np.stack(vectors), pool,
                                  keyed if goal.mode_used == "fast" else None)
    except StoreError as exc:
        raise ValueError(str(exc)) from exc
    finally:
        if keyed is not None and not keyed.done():
            keyed.cancel()
    ranked = await rerank(deps, req.cube_id, query_vec, candidates)
    if goal.mode_used == "fine":
        ranked = await reason(req, deps, ranked)
    return dedupe(ranked)[: req.top_k], goal.mode_used
