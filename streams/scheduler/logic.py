"""The memory scheduler's handlers: route by label, then query / answer / add.

Pure async logic: a message, the cube's ``CubeState`` and ``Deps`` in; the next
state and the events to publish out. The agent owns the faust Table and writes
the returned state only after a handler succeeds, so a retried message starts
from the same state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from memstream.streams.core.episode_index import EpisodeIndex, indexes_for
from memstream.streams.core.retrieval import search
from memstream.streams.core.working_memory import (
    Entry,
    admissible,
    entry_of_copy,
    entry_of_node,
)
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.scheduler import (
    KEYWORDS,
    RETRIEVAL_DECISION,
    DecisionContext,
    DecisionResponse,
    KeywordContext,
    fallback_decision,
    fallback_keywords,
)
from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError
from memstream.streams.scheduler.planning import (
    QueryVectors,
    current_working_memory,
    plan_working_memory,
)
from memstream.streams.scheduler.state import CubeState, LastReplacement, QueryRecord
from memstream.topics.events import (
    KNOWN_SCHEDULE_LABELS,
    MemoryUpdate,
    ScheduleMessage,
    ScoredMemory,
    SearchRequest,
    WorkingMemoryEntry,
    WorkingMemoryReplacement,
)
from memstream.topics.ids import derived_event_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import (
    MEMORY_UPDATES,
    SCHEDULE_ADD,
    SCHEDULE_ANSWER,
    SCHEDULE_QUERY,
    WORKING_MEMORY,
)
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.scheduler")
STAGE = "scheduler"

Label = Literal["query", "answer", "add"]


class ScheduleRejected(PermanentError):
    """A schedule message no handler takes (unknown label, wrong topic, empty query)."""


def topic_labels(settings: Settings) -> dict[str, Label]:
    """Full topic name → the one label its messages must carry."""
    return {SCHEDULE_QUERY.name(settings): "query", SCHEDULE_ANSWER.name(settings): "answer",
            SCHEDULE_ADD.name(settings): "add"}


def route(label: str, topic: str, settings: Settings) -> Label:
    """The handler for a message: its label, checked against the topic it arrived on."""
    if label not in KNOWN_SCHEDULE_LABELS:
        raise ScheduleRejected(f"unknown schedule label {label!r}; expected one of "
                               f"{', '.join(KNOWN_SCHEDULE_LABELS)}")
    expected = topic_labels(settings).get(topic)
    if expected is not None and label != expected:
        raise ScheduleRejected(f"label {label!r} arrived on {topic}, which carries "
                               f"{expected!r} messages")
    return label  # type: ignore[return-value]  # checked against KNOWN_SCHEDULE_LABELS


@dataclass
class QueryTrace:
    """What handling one query did and how long it took (for logs and the benchmark)."""

    event_id: str
    retrieved: bool = False
    reason: str = ""
    search_s: float = 0.0
    total_s: float = 0.0


@dataclass
class Step:
    state: CubeState
    outgoing: list[Outgoing] = field(default_factory=list)
    trace: QueryTrace | None = None


async def handle(label: Label, msg: ScheduleMessage, state: CubeState, deps: Deps,
                 query_vectors: QueryVectors | None = None) -> Step:
    state = state.touched(deps.clock())
    match label:
        case "query":
            return await handle_query(msg, state, deps, query_vectors)
        case "answer":
            return Step(state.with_answer(msg.content, deps.clock()))
        case "add":
            return Step(state, await memory_added(msg, deps))


async def keywords_of(text: str, deps: Deps) -> list[str]:
    try:
        return (await deps.llm.run(KEYWORDS, KeywordContext(query=text))).keywords
    except LLMError as exc:
        log.warning("keyword extraction failed, using the fallback: %s", exc)
        return fallback_keywords(text)


async def decide(deps: Deps, ctx: DecisionContext) -> DecisionResponse:
    """The model's retrieval decision; the ``rules`` stand-in when the model fails."""
    try:
        return await deps.llm.run(RETRIEVAL_DECISION, ctx)
    except LLMError as exc:
        log.warning("retrieval decision failed, using the rules stand-in: %s", exc)
        return fallback_decision(ctx)


def split_top_k(top_k: int, pieces: int) -> int:
    """Results per piece of evidence: ``top_k`` divided among them, at least 1 each."""
    return max(1, top_k // max(1, pieces))


def spanned(hit: ScoredMemory, index: EpisodeIndex) -> list[MemoryItem]:
    """The episodes an excerpt's turns lie in, its centre's first: an excerpt runs across an
    episode's end (the turns after the one that matched often hold the answer)."""
    if hit.excerpt is None:
        return []
    out = [index.episodes[index.position[hit.episode_id]]] \
        if hit.episode_id in index.position else []
    for mid in hit.excerpt_ids:
        for turn in index.turns_of_message.get(mid, ())[:1]:
            episode = index.episodes[index.turns[turn].episode]
            if all(e.id != episode.id for e in out):
                out.append(episode)
    return out


def entry_of_hit(hit: ScoredMemory, episodes: dict[str, MemoryItem],
                 node: MemoryItem | None = None) -> Entry | None:
    """A search hit as a working-memory candidate: a hit on an episode's turns enters as
    the episodes holding them (the turns as said, so the evidence around the turn comes
    with it; ``node``: one of them); any other hit as its node. ``None`` for what may not
    enter (``admissible``)."""
    if node is None:
        node = episodes.get(hit.episode_id or "") if hit.excerpt is not None else None
    node = node or hit.item
    if not admissible(node):
        return None
    if node.metadata.memory_type == "WorkingMemory":
        return entry_of_copy(node)
    return entry_of_node(node)


async def retrieve(msg: ScheduleMessage, evidence: Sequence[str], deps: Deps) -> list[Entry]:
    """The search's ranking for each piece of evidence, concurrently, the pieces' lists
    taken in turn (best of each first).

    Fast search of every stored type ranks statements and episodes' turns together, so
    working memory holds what a search would return (issue #28, point 6)."""
    # twice the capacity: repeats, near-duplicates and the filter take some out
    want = 2 * deps.settings.memory.working_memory_capacity
    per = split_top_k(want, len(evidence))
    requests = [SearchRequest(user_id=msg.user_id, cube_id=msg.cube_id, query=text, top_k=per,
                              memory_type="All", requester=STAGE) for text in evidence]
    # Working memory holds episodes in the order of the hits that found them. A window that
    # continues a hit stays a hit of its own here (no passages), so its episode enters at its
    # own rank, not after every hit's first episode (dev split: 0.948x a search's recall
    # with passages, docs/benchmarks.md).
    flat = replace(deps, settings=deps.settings.model_copy(update={
        "search": deps.settings.search.with_overrides({"excerpts.passage_turns": 1})}))
    results = await asyncio.gather(*(search(r, flat) for r in requests))
    index = await indexes_for(deps.query, deps.settings.search).get(deps.query, msg.cube_id)
    spans = {id(h): spanned(h, index) for scored, _ in results for h in scored}
    episodes = {e.id: e for ids in spans.values() for e in ids}
    # each hit's own episode in the search's order, then the episodes its excerpt runs into
    lists = [[e for layer in (0, 1) for hit in scored
              for node in (spans[id(hit)] or [hit.item])[layer:layer + 1 if layer == 0 else None]
              if (e := entry_of_hit(hit, episodes, node)) is not None]
             for scored, _ in results]
    out: list[Entry] = []
    seen: set[str] = set()
    for rank in range(max((len(x) for x in lists), default=0)):
        for entries in lists:
            if rank < len(entries) and entries[rank].ref not in seen:
                seen.add(entries[rank].ref)
                out.append(entries[rank])
    return out


async def handle_query(msg: ScheduleMessage, state: CubeState, deps: Deps,
                       query_vectors: QueryVectors | None = None) -> Step:
    """Record the query; retrieve when the model asks for evidence or the timer is due."""
    started = time.perf_counter()
    text = msg.content.strip()
    if not text:
        raise ScheduleRejected("a query message needs content (the user's question)")
    cfg = deps.settings.scheduler
    now = deps.clock()
    keywords = await keywords_of(text, deps)
    state = state.with_query(QueryRecord(event_id=msg.event_id, text=text, at=now,
                                         keywords=tuple(keywords)), cfg.history_length)
    trace = QueryTrace(event_id=msg.event_id)
    current = await current_working_memory(deps, msg.cube_id, state.replacement, now)
    queries = state.recent_queries(cfg.context_queries)
    decision = await decide(deps, DecisionContext(
        queries=queries, last_answer=state.last_answer,
        working_memory=[e.text for e in current]))
    timed = state.retrieval_due(now, cfg.retrieval_interval_s)
    if not decision.need_retrieval and not timed:
        trace.reason = f"no retrieval: {decision.reason}"
        trace.total_s = time.perf_counter() - started
        return Step(state, [], trace)

    evidence = decision.missing_evidence if decision.need_retrieval else []
    evidence = evidence or [text]
    searched = time.perf_counter()
    retrieved = await retrieve(msg, evidence, deps)
    trace.search_s = time.perf_counter() - searched
    plan = await plan_working_memory(deps, msg.cube_id, current, retrieved, queries,
                                     query_vectors)
    why = [f"decision: {decision.reason}"] if decision.need_retrieval else []
    if timed:
        why.append(f"timer: last retrieval {state.seconds_since_retrieval(now):.0f}s ago")
    trace.retrieved, trace.reason = True, "; ".join(why)
    event = WorkingMemoryReplacement(
        event_id=derived_event_id("working-memory", msg.event_id), user_id=msg.user_id,
        cube_id=msg.cube_id, occurred_at=now, session_id=msg.session_id,
        items=tuple(WorkingMemoryEntry(id=e.ref, memory=e.text) for e in plan.entries),
        reason=f"{trace.reason}; {plan.describe()}", queries=tuple(queries))
    state = state.model_copy(update={
        "last_retrieval_at": now,
        "replacement": LastReplacement(event_id=event.event_id, at=now,
                                       refs=tuple(e.ref for e in plan.entries),
                                       texts=tuple(e.text for e in plan.entries))})
    trace.total_s = time.perf_counter() - started
    return Step(state, [Outgoing(WORKING_MEMORY, event)], trace)


async def memory_added(msg: ScheduleMessage, deps: Deps) -> list[Outgoing]:
    """A "memory added" event on memory.updates for each listed non-WorkingMemory node."""
    if not msg.memory_ids:
        log.info("cube %s: add message without memory ids", msg.cube_id)
        return []
    nodes = await deps.query.get_nodes(msg.cube_id, list(dict.fromkeys(msg.memory_ids)))
    unknown = set(msg.memory_ids) - {n.id for n in nodes}
    if unknown:
        log.warning("cube %s: add message names unknown ids %s", msg.cube_id, sorted(unknown))
    now = deps.clock()
    return [Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("scheduler-added", msg.event_id, node.id),
        user_id=msg.user_id, cube_id=msg.cube_id, occurred_at=now, action="added",
        stage=STAGE, node_id=node.id, node=node, cause_event_id=msg.event_id,
        reason="memory added (reported on schedule.add)"))
        for node in nodes if node.metadata.memory_type != "WorkingMemory"]
