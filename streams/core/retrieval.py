"""The Searcher: goal parsing, parallel recall, rerank, reasoning, trim.

Pure async logic over the ports: a ``SearchRequest`` and ``Deps`` in, scored
memories out. Usage is recorded by the caller after the reply is sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memstream.kafka import tracing
from memstream.sinks.filtering import matches_all, vector_filter_supported
from memstream.sinks.ports import Filter, StoreError, VectorHit, VectorQuery, VectorRecord
from memstream.sinks.query import NodeReads
from memstream.streams.core.conflicts import newer_first
from memstream.streams.core.distinct import distinct
from memstream.streams.core.episode_index import EpisodeIndex, indexes_for
from memstream.streams.core.feedback import after_feedback, returnable
from memstream.streams.core.filters import names_status, parse_search_filter
from memstream.streams.core.turn_ranking import Window, message_ids, rank_windows, to_scored
from memstream.streams.core.validity import current_first
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.search import (
    GOAL_PARSER,
    REASONER,
    GoalContext,
    HistoryTurn,
    ReasonerCandidate,
    ReasonerContext,
    fallback_ids_from_text,
)
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ScoredMemory, SearchRequest
from memstream.topics.models import MemoryItem, MemoryType
from memstream.topics.recipe import UNIT, Fusion

log = logging.getLogger("memstream.search")

RECALL_GRAPH = "memstream.search.recall.graph"  # by exact key or by tag overlap
STORED_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory")
# Extra nodes read per round beyond those still wanted, for hits the graph or dedupe drops.
MATERIALIZE_SLACK = 5


@dataclass
class Goal:
    """What to look for: keys for graph recall, texts to embed for vector recall."""

    keys: list[str]
    tags: list[str]
    rephrasings: list[str]
    mode_used: str = "fast"


@dataclass
class Candidates:
    """Recalled ids: nodes already read from the graph, vector hits whose node is read only
    if they rank high enough to be returned (most never are), and the ranked lists of the
    recalls that rank by something other than the query's cosine (keyword, key, tags)."""

    items: dict[str, MemoryItem] = field(default_factory=dict)
    records: dict[str, VectorRecord] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)  # ranked ids with neither (keyword)
    cosines: dict[str, float] = field(default_factory=dict)  # hits of the query's own vector
    ranked: dict[str, list[str]] = field(default_factory=dict)  # recall name -> ids, best first

    def add(self, nodes: Sequence[MemoryItem], recall: str | None = None) -> None:
        for node in nodes:
            self.items.setdefault(node.id, node)
        if recall is not None and nodes:
            self.ranked[recall] = list(dict.fromkeys(n.id for n in nodes))

    def add_ranked(self, ids: Sequence[str], recall: str) -> None:
        """Ids a recall ranked without reading their nodes (their vectors are read later)."""
        if ids:
            self.ranked[recall] = list(dict.fromkeys(ids))
            self.unread.extend(self.ranked[recall])

    def add_hits(self, hits: Sequence[VectorHit], of_query: bool) -> None:
        for hit in hits:
            self.records.setdefault(hit.id, hit.record)
            if of_query:
                self.cosines[hit.id] = hit.score

    def ids(self) -> list[str]:
        return list(dict.fromkeys([*self.items, *self.records, *self.unread]))


def requested_types(memory_type: str) -> tuple[MemoryType, ...]:
    match memory_type:
        case "All":
            return ("WorkingMemory", *STORED_TYPES, "EpisodicMemory")
        case "WorkingMemory" | "LongTermMemory" | "UserMemory" | "EpisodicMemory":
            return (memory_type,)
        case _:
            raise ValueError(f"unknown memory_type {memory_type!r}")


async def parse_goal(req: SearchRequest, deps: Deps, query_vec: np.ndarray,
                     cubes: Sequence[str] = ()) -> Goal:
    """fast: the query itself. fine: ground on vector hits (of ``cubes``, default the
    request's cube), then ask the goal parser."""
    fast = Goal(keys=[req.query], tags=[], rephrasings=[req.query])
    if req.mode == "fast":
        return fast
    query = VectorQuery(query_vec.tolist(), 5, memory_types=list(STORED_TYPES))
    grounds = await asyncio.gather(*(deps.store.search(c, query)
                                     for c in (cubes or [req.cube_id])))
    context = sorted((hit for found in grounds for hit in found), key=lambda h: -h[1])[:5]
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
    with tracing.span(RECALL_GRAPH, {"memstream.recall": "key"}):
        return await deps.query.find_nodes(req.cube_id, [
            Filter("key", "in", list(keys)),
            *([] if names_status(filters) else [Filter("status", "=", "activated")]),
            Filter("memory_type", "in", stored),
            *filters,
        ], limit=top_k)


async def keyword_recall(req: SearchRequest, deps: Deps, filters: Sequence[Filter], top_k: int,
                         skip_episodes: bool) -> list[str]:
    """Graph recall by the query's words (needs no embedding, so it starts at once): ids,
    best first. Their nodes are read only if they rank high enough to be returned: reading
    the 30 of each search cost more than the rest of its graph reads together."""
    stored = [t for t in requested_types(req.memory_type)
              if t != "WorkingMemory" and not (skip_episodes and t == "EpisodicMemory")]
    if not stored or deps.settings.search.ranking.fusion.keyword <= 0:
        return []
    with tracing.span("memstream.search.recall.keyword") as span:
        hits = await deps.query.keyword_ids(req.cube_id, req.query, top_k, stored, filters)
        span.set_attribute("memstream.hits", len(hits))
    return [node_id for node_id, _ in hits]


async def recall(
    req: SearchRequest, deps: Deps, goal: Goal, filters: Sequence[Filter],
    vectors: np.ndarray, top_k: int, keyed: Awaitable[list[MemoryItem]] | None = None,
    skip_episodes: bool = False, worded: Awaitable[list[str]] | None = None,
) -> Candidates:
    """Working memory, graph recall and vector recall, in parallel (``keyed``, ``worded``:
    key and keyword recall already under way; ``skip_episodes``: turn ranking finds them)."""
    types = tuple(t for t in requested_types(req.memory_type)
                  if not (skip_episodes and t == "EpisodicMemory"))
    stored: list[MemoryType] = [t for t in types if t != "WorkingMemory"]
    found = Candidates()
    recipe = deps.settings.search.ranking
    # Working memory holds at most its capacity, so a vector search with a pool at least that
    # large scores every working-memory item, in the same call as long-term recall.
    pool = max(top_k, deps.settings.memory.working_memory_capacity)

    async def by_key() -> list[MemoryItem]:
        if keyed is not None:
            return await keyed
        return await key_recall(req, deps, goal.keys, filters, top_k)

    async def by_tags() -> list[MemoryItem]:
        if not stored or recipe.fusion.tags <= 0 or len(goal.tags) < recipe.recall.tags_min:
            return []
        with tracing.span(RECALL_GRAPH, {"memstream.recall": "tags"}):
            hits = await deps.query.neighbors_by_tags(
                req.cube_id, goal.tags, min_overlap=recipe.recall.tags_min, limit=top_k)
        return [h.node for h in hits
                if h.node.metadata.memory_type in stored and matches_all(h.node, filters)]

    async def by_keyword() -> None:
        found.add_ranked(await worded if worded is not None else
                         await keyword_recall(req, deps, filters, top_k, skip_episodes),
                         "keyword")

    async def by_vector(vec: np.ndarray, memory_types: Sequence[MemoryType], k: int,
                        of_query: bool = False) -> None:
        if not memory_types:
            return
        with tracing.span("memstream.search.recall.vector", {"memstream.top_k": k}):
            await vector_recall(vec, memory_types, k, of_query)

    async def vector_recall(vec: np.ndarray, memory_types: Sequence[MemoryType], k: int,
                            of_query: bool) -> None:
        # the query's own hits carry their cosine: rerank needs no vector of theirs (reading
        # 150 of them whole was most of a recall; a Milvus server sends each over the wire)
        query = VectorQuery(vec.tolist(), k, list(memory_types),
                            None if names_status(filters) else "activated", filters,
                            with_vectors=not of_query)
        if all(vector_filter_supported(f) for f in filters):
            # The vector index applies every filter: keep the hits, read nodes later.
            found.add_hits(await deps.query.vector_search(req.cube_id, query), of_query)
        else:  # a filter only the graph can apply: join now
            hits = await deps.store.search(req.cube_id, query)
            found.add([item for item, _ in hits])

    async def nodes_from(recalled: Awaitable[list[MemoryItem]], name: str) -> None:
        found.add(await recalled, name)

    working: list[MemoryType] = ["WorkingMemory"] if "WorkingMemory" in types else []
    await asyncio.gather(
        nodes_from(by_key(), "key"), nodes_from(by_tags(), "tags"),
        by_keyword(),
        by_vector(vectors[0], [*working, *stored], pool + (top_k if working else 0), True),
        *(by_vector(v, stored, top_k) for v in vectors[1:]))
    return found


def statement_weights(fusion: Fusion) -> dict[str, float]:
    """The statement fusion's rankings and their weights (the dense one and the exact key
    are the unit)."""
    return {"vector": UNIT, "keyword": fusion.keyword, "key": UNIT, "tags": fusion.tags}


def fuse(deps: Deps, lists: dict[str, list[str]]) -> dict[str, float]:
    """Reciprocal-rank fusion: each id scores the sum over the lists that hold it of
    weight / (k + rank), normalised so that first place in every list scores 1."""
    fusion = deps.settings.search.ranking.fusion
    weights = statement_weights(fusion)
    k = fusion.statement_k
    fused: dict[str, float] = {}
    best = 0.0
    for name, ids in lists.items():
        weight = weights.get(name, 0.0)
        if weight <= 0 or not ids:
            continue
        best += weight / (k + 1)
        for rank, node_id in enumerate(ids, start=1):
            fused[node_id] = fused.get(node_id, 0.0) + weight / (k + rank)
    return {i: v / best for i, v in fused.items()} if best > 0 else fused


def cosine_standing(cosines: Sequence[float], spread: float,
                    among: Sequence[float] | None = None) -> list[float]:
    """Per candidate, a factor in [1 - spread, 1]: how far its cosine stands above the
    candidates' median, as a share of the best one's lead. Rank fusion alone scores the
    second of ten unrelated memories 0.98; this lets the score say how clear a lead is.
    ``among``: the cosines whose median and best they are measured against (default:
    ``cosines`` themselves)."""
    if spread <= 0 or not cosines:
        return [1.0] * len(cosines)
    values = np.asarray(cosines, dtype=np.float64)
    field = values if among is None or not len(among) else np.asarray(among, dtype=np.float64)
    mid, top = float(np.median(field)), float(field.max())
    if top - mid <= 1e-9:
        return [1.0] * len(cosines)
    lead = np.clip((values - mid) / (top - mid), 0.0, 1.0)
    return (1.0 - spread + spread * lead).tolist()  # type: ignore[no-any-return]


async def rerank(
    deps: Deps, cube_id: str, query_vec: np.ndarray, candidates: Candidates
) -> list[tuple[str, float]]:
    """Candidate ids by hybrid score: every candidate ranked by the cosine of its embedding
    with the query, fused with the keyword, key and tag recalls by reciprocal rank, then
    weighted by hierarchy level (the node's when read, else the vector record's copy) and by
    how far its cosine stands above the other candidates' (``cosine_standing``)."""
    missing = [i for i in dict.fromkeys([*candidates.items, *candidates.unread])
               if i not in candidates.records]
    records = dict(candidates.records)
    read: dict[str, np.ndarray] = {}  # the vectors of ``missing``, rows as stored
    if missing:
        rows = await deps.query.vector_rows(cube_id, missing)
        for record, vector in zip(rows.records, rows.vectors, strict=True):
            records[record.id], read[record.id] = record, vector
    # a node whose vector is not written yet is not searchable yet
    ids = [i for i in candidates.ids() if i in records]
    cosines = dict(candidates.cosines)  # the vector search's own scores, where it has them
    if rest := [i for i in ids if i not in cosines]:
        matrix = np.stack([read[i] if i in read else
                           np.asarray(records[i].vector, dtype=np.float32) for i in rest])
        cosines.update(zip(rest, (matrix @ query_vec).tolist(), strict=True))
    searchable = set(ids)
    lists = {name: [i for i in ranked if i in searchable]
             for name, ranked in candidates.ranked.items()}
    lists["vector"] = sorted(ids, key=lambda i: (-cosines[i], i))
    fused = fuse(deps, lists)
    recipe = deps.settings.search.ranking
    standing = cosine_standing([cosines[i] for i in ids], recipe.boosts.cosine_spread)
    # words, a key or tags found it: its evidence is not the cosine
    matched = {i for name, ranked in lists.items() if name != "vector" for i in ranked}
    standing = [1.0 if i in matched else f for i, f in zip(ids, standing, strict=True)]
    scored = []
    for node_id, stands in zip(ids, standing, strict=True):
        item = candidates.items.get(node_id)
        record = records[node_id]
        level = item.metadata.hierarchy_level if item else record.hierarchy_level
        weight = recipe.level_weight(level) * stands
        scored.append((node_id, fused.get(node_id, 0.0) * weight))
    scored.sort(key=lambda s: (-s[1], -cosines[s[0]], s[0]))
    return scored


async def materialize(
    req: SearchRequest, deps: Deps, ranked: list[tuple[str, float]], candidates: Candidates,
    filters: Sequence[Filter], want: int, reads: NodeReads | None = None,
) -> list[ScoredMemory]:
    """The best ``want`` distinct memories of ``ranked``, reading from the graph only the
    nodes needed, a few at a time. The graph has the last word: a vector hit whose node is
    missing, no longer activated, of another type, failing a filter or called ``wrong`` by an
    agent (whatever status a filter asks for) is skipped."""
    types = set(requested_types(req.memory_type))
    reads = reads or NodeReads(deps.query, req.cube_id)
    present = {node_id for node_id, _ in ranked}
    out: list[ScoredMemory] = []
    kept: list[ScoredMemory] = []
    pos = 0
    while pos < len(ranked) and len(kept) < want:
        chunk = ranked[pos: pos + want - len(kept) + MATERIALIZE_SLACK]
        pos += len(chunk)
        unread = [i for i, _ in chunk if i not in candidates.items]
        for node in await reads.get(unread) if unread else []:
            meta = node.metadata
            if ((meta.status == "activated" or names_status(filters))
                    and meta.memory_type in types
                    and matches_all(node, filters)):
                candidates.items[node.id] = node
        out.extend(ScoredMemory(item=candidates.items[i], score=score)
                   for i, score in chunk
                   if i in candidates.items and returnable(candidates.items[i]))
        kept = dedupe(out, present)
    return kept[:want]


async def reason(req: SearchRequest, deps: Deps, ranked: list[ScoredMemory]) -> list[ScoredMemory]:
    """fine mode: keep what the reasoner finds useful (ids from free text if JSON fails)."""
    if not ranked:
        return ranked
    shortlist = ranked[: deps.settings.search.ranking.recall.shortlist.size(req.top_k)]
    ctx = ReasonerContext(query=req.query, candidates=[
        ReasonerCandidate(id=s.item.id, text=s.item.memory) for s in shortlist])
    known = [s.item.id for s in shortlist]
    try:
        selected = (await deps.llm.run(REASONER, ctx)).selected_ids
    except LLMError as exc:
        selected = fallback_ids_from_text(exc.last_answer or "", known)
        log.warning("reasoner answer unusable (%s); %d ids found in its text", exc, len(selected))
        if not selected:
            return ranked
    keep = {i for i in selected if i in known}
    return [s for s in ranked if s.item.id in keep] or ranked


def dedupe(ranked: list[ScoredMemory], present: set[str] | None = None) -> list[ScoredMemory]:
    """One entry per memory: a working-memory copy and its long-term node count once, and
    the long-term node (the canonical id, with its lineage) is the one kept. ``present``:
    every id recalled (default: those in ``ranked``)."""
    present = {s.item.id for s in ranked} if present is None else present
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


def with_turns(
    ranked_turns: tuple[list[Window], EpisodeIndex, np.ndarray], others: list[ScoredMemory],
    weight: float, want: int,
) -> list[ScoredMemory]:
    """The excerpts of turn ranking merged with the other memories by score (derived nodes at
    ``weight``). A statement extracted from an episode's turn is that turn's to rank (and to
    return, with its excerpt), so it never competes with it as a second hit."""
    windows, index, allowed = ranked_turns
    holder = {t: w for w in windows for t in w.turns}
    rest = []
    for s in others:
        ids = message_ids(s.item)
        if ids and all(any(allowed[t] for t in index.turns_of_message.get(i, ()))
                       for i in ids):
            # folded into the (first) excerpt returning its turns, when excerpts return them
            into = [holder.get(t) for i in ids for t in index.turns_of_message.get(i, ())[:1]]
            if into and all(into):
                first = min((w for w in into if w is not None), key=windows.index)
                if s.item.id not in (first.statement.id if first.statement else None,
                                     *first.folded):
                    first.folded.append(s.item.id)
            continue
        rest.append(s)
    hits = [to_scored(w, index) for w in windows]
    for s in rest:
        # Derived nodes (summaries, concepts, inferences) cite no turn of their own and take
        # the weight; a fact added directly (add_memories, an MCP add) is its own evidence.
        md = s.item.metadata
        derived = md.hierarchy_level != "fact" or md.type == "reasoning"
        hits.append(s.model_copy(update={"score": round(s.score * weight, 4)}) if derived
                    else s)
    hits.sort(key=lambda s: -s.score)
    return hits[:want]


@dataclass
class Prepared:
    """What a search over several cubes works out once for all of them: the query's vectors
    (its own first, then the goal's rephrasings) and the goal."""

    vectors: np.ndarray
    goal: Goal


async def prepare(req: SearchRequest, deps: Deps, cubes: Sequence[str]) -> Prepared:
    """The query embedded and its goal parsed (fine mode: grounded on ``cubes``)."""
    with tracing.span("memstream.search.embed"):
        query_vec = (await deps.embedder.embed_queries([req.query]))[0]
    goal = await parse_goal(req, deps, query_vec, cubes)
    vectors = [query_vec]
    if extra := goal.rephrasings[1:]:
        with tracing.span("memstream.search.embed", {"memstream.texts": len(extra)}):
            vectors.extend(await deps.embedder.embed_queries(extra))
    return Prepared(np.stack(vectors), goal)


async def search(req: SearchRequest, deps: Deps,
                 prepared: Prepared | asyncio.Future[Prepared] | None = None,
                 reasoned: bool = True) -> tuple[list[ScoredMemory], str]:
    """The memories of ``req.cube_id`` answering ``req``, best first, and the mode actually
    used. ``prepared``: the query's vectors and goal when already worked out, or being
    worked out (a search over several cubes embeds the query once, while each cube's word
    recalls run); ``reasoned``: fine mode's reasoner picks from them (a search over several
    cubes asks it once, after merging)."""
    filters = parse_search_filter(req.search_filter)
    recipe = deps.settings.search.ranking
    pool = recipe.recall.candidates.size(req.top_k)
    # fast mode's key is the query itself, and the words are the query's in either mode:
    # look them up while the query is being embedded
    keyed = (asyncio.ensure_future(key_recall(req, deps, [req.query], filters, pool))
             if req.mode == "fast" else None)
    # a cube too big to index inside this search is served from the stores while its index
    # is built (``EpisodeIndexes.ready``)
    indexes = indexes_for(deps.query, deps.settings.search, deps.foreground)
    turn_ranked = recipe.recall.turns and "EpisodicMemory" in requested_types(
        req.memory_type) and await indexes.ready(deps.query, req.cube_id,
                                                 deps.settings.search.episode_index_inline)
    worded = asyncio.ensure_future(keyword_recall(req, deps, filters, pool, turn_ranked))
    try:
        if not isinstance(prepared, Prepared):
            prepared = await (prepared or prepare(req, deps, [req.cube_id]))
        goal, vectors = prepared.goal, prepared.vectors
        query_vec = vectors[0]
        types = requested_types(req.memory_type)
        want = (recipe.recall.shortlist.size(req.top_k) if goal.mode_used == "fine"
                else req.top_k)
        turns = None
        reads = NodeReads(deps.query, req.cube_id)  # turn ranking and materialize share them
        if turn_ranked:
            turns = asyncio.ensure_future(rank_windows(  # alongside the other recalls
                deps, req.cube_id, req.query, query_vec, filters, want,
                statements=any(t in types for t in STORED_TYPES),
                recount=req.after is not None, reads=reads))  # after: the caller's write
        try:
            candidates = await recall(req, deps, goal, filters, vectors, pool,
                                      keyed if goal.mode_used == "fast" else None,
                                      turns is not None, worded)
            with tracing.span("memstream.search.fusion") as span:
                ranked = await rerank(deps, req.cube_id, query_vec, candidates)
                span.set_attribute("memstream.candidates", len(ranked))
            with tracing.span("memstream.search.materialize"):
                found = await materialize(req, deps, ranked, candidates, filters, want, reads)
                recalled = found  # the statements, before excerpts take their turns' place
                if turns is not None:
                    found = with_turns(await turns, found, recipe.boosts.others, want)
        finally:
            _settle(turns)
        # the agents' feedback: nothing called wrong, what was called irrelevant for a query
        # like this one lower (turn ranking's hits included)
        found = after_feedback(found, req.query, recipe.boosts)
        if goal.mode_used == "fine" and reasoned:  # the reasoner picks from a shortlist
            found = dedupe(await reason(req, deps, found))
        found = await newer_first(deps, req.cube_id, found)
        if recipe.boosts.current_first:
            found = await current_first(deps, req.cube_id, req.query, found, recalled)
        found = distinct(found)  # every turn once: what no caller should have to redo
        if not reasoned:  # the caller reasons over these with other cubes' and cuts them
            return found, goal.mode_used
        return [s for s in found if s.score >= req.min_score][: req.top_k], goal.mode_used
    except StoreError as exc:
        raise ValueError(str(exc)) from exc
    finally:
        _settle(keyed, worded)


def _settle(*started: asyncio.Future[Any] | None) -> None:
    """Side lookups a search no longer needs (it failed, or did without them): cancelled
    when still running; when already failed, their error is taken (the search's own error,
    if any, is what the caller gets) instead of logged later as never retrieved."""
    for future in started:
        if future is None:
            continue
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()
