"""Choosing the next working memory: combine, deduplicate, rerank, filter, trim.

The newly retrieved memories come first, in the search's ranking, then the current
working memory: an item the search no longer ranks for the recent questions keeps its
place only while the capacity has room (what the search ranks first is what a search
would have returned; issue #28 point 6). Items shorter than ``min_chars``, exact repeats
and near-duplicates (embedding cosine at or above the threshold) are dropped, keeping the
earlier one; the model reorders and filters (its ``rules`` stand-in keeps the search's
order); the result is cut to the capacity.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from memstream.sinks.lru import LRU
from memstream.streams.core.working_memory import Entry, admissible, entry_of_copy
from memstream.streams.embed.port import Embedder
from memstream.streams.llm.port import LLMError
from memstream.streams.prompts.scheduler import (
    FILTER,
    RERANK,
    FilterContext,
    RerankContext,
    resolve_keep,
    resolve_order,
)
from memstream.streams.runtime.stage import Deps
from memstream.streams.scheduler.state import LastReplacement
from memstream.topics.ids import working_copy_id

log = logging.getLogger("memstream.scheduler")

Matrix = npt.NDArray[np.float32]


def normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def drop_short_and_repeats(entries: Sequence[Entry], min_chars: int) -> list[Entry]:
    """Without items under ``min_chars`` characters and exact repeats (same node or same text)."""
    seen_refs: set[str] = set()
    seen_texts: set[str] = set()
    out = []
    for entry in entries:
        text = normalized(entry.text)
        if len(text) < min_chars or entry.ref in seen_refs or text in seen_texts:
            continue
        seen_refs.add(entry.ref)
        seen_texts.add(text)
        out.append(entry)
    return out


def near_duplicate_survivors(vectors: Matrix, threshold: float,
                             judged: Sequence[bool] | None = None) -> list[int]:
    """Indices to keep: each row unless it is at least ``threshold``-similar to a kept row
    (``judged``: which rows the cosine may drop; default all)."""
    kept: list[int] = []
    for i in range(len(vectors)):
        if (judged is None or judged[i]) and kept \
                and float(np.max(vectors[kept] @ vectors[i])) >= threshold:
            continue
        kept.append(i)
    return kept


def said_once(entry: Entry) -> bool:
    """Whether the cosine may call an entry a near-duplicate: not a passage of several turns
    (an episode). Passages of one conversation share its speakers, dates and manner, so
    their embeddings sit close whatever was said: with the local e5 at 0.95, the cosine
    dropped episodes holding a question's evidence, and working memory held 0.92x the
    evidence a search of the same size returns (bench/scheduler.py, 40 dev questions);
    without it, 1.00x. A passage is still dropped when it repeats another's text, or when
    a retrieved one holds all its turns."""
    return len(entry.turns) <= 1


def near_duplicate_threshold(deps: Deps) -> float:
    cfg = deps.settings.scheduler
    if deps.embedder.name == "local":
        return cfg.local_near_duplicate_threshold
    return cfg.near_duplicate_threshold


async def entry_vectors(deps: Deps, cube_id: str, entries: Sequence[Entry]) -> Matrix:
    """The stored embedding of each entry (embedded now if its vector is not written yet)."""
    if not entries:
        return np.zeros((0, deps.embedder.dim), dtype=np.float32)
    stored = {r.id: r.vector for r in await deps.query.vectors(cube_id, [e.vector_id
                                                                       for e in entries])}
    missing = [e for e in entries if e.vector_id not in stored]
    if missing:
        fresh = await deps.embedder.embed_passages([e.text for e in missing])
        for entry, row in zip(missing, fresh, strict=True):
            stored[entry.vector_id] = row.tolist()
    rows = np.asarray([stored[e.vector_id] for e in entries], dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms == 0, 1.0, norms)).astype(np.float32)


class QueryVectors:
    """Query embeddings, remembered: a query stays in a cube's context for several turns,
    and is embedded once per worker rather than once per turn (least recently used go)."""

    def __init__(self, embedder: Embedder, size: int = 4096) -> None:
        self._embedder = embedder
        self._cache: LRU[str, Matrix] = LRU(size)

    async def __call__(self, texts: Sequence[str]) -> Matrix:
        known: dict[str, Matrix] = {}
        for text in texts:  # each a use, in order: the last one asked is the newest
            if (row := self._cache.get(text)) is not None:
                known[text] = row
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            fresh = await self._embedder.embed_queries(missing)
            for text, row in zip(missing, fresh, strict=True):
                known[text] = np.asarray(row, dtype=np.float32)
                self._cache.put(text, known[text])
        rows = [known[t] for t in texts]
        return np.stack(rows) if rows else np.zeros((0, self._embedder.dim), dtype=np.float32)


def query_similarities(queries: Matrix, vectors: Matrix) -> list[float]:
    """Per entry (row of ``vectors``), its highest cosine to any of the queries."""
    if not len(vectors) or not len(queries):
        return [0.0] * len(vectors)
    return [float(x) for x in np.max(vectors @ queries.T, axis=1)]


async def model_order(deps: Deps, queries: list[str], texts: list[str],
                      sims: list[float]) -> list[int]:
    """The rerank answer as a permutation; an unusable answer keeps the order."""
    if len(texts) < 2:
        return list(range(len(texts)))
    try:
        answer = await deps.llm.run(RERANK, RerankContext(queries=queries, candidates=texts,
                                                          similarities=sims))
        return resolve_order(answer.order, len(texts))
    except (LLMError, ValueError) as exc:
        log.warning("rerank answer unusable, keeping the order: %s", exc)
        return list(range(len(texts)))


async def model_keep(deps: Deps, queries: list[str], texts: list[str],
                     sims: list[float]) -> list[int]:
    """The filter answer; an unusable or empty answer keeps everything.

    An empty keep-list would wipe the working memory other turns still rely on, on the
    word of one judgement; the next retrieval gets another chance to drop items.
    """
    if not texts:
        return []
    ctx = FilterContext(queries=queries, candidates=texts, similarities=sims,
                        similarity_floor=deps.settings.scheduler.filter_similarity_floor)
    try:
        keep = resolve_keep((await deps.llm.run(FILTER, ctx)).keep, len(texts))
    except (LLMError, ValueError) as exc:
        log.warning("filter answer unusable, keeping every item: %s", exc)
        return list(range(len(texts)))
    if not keep:
        log.info("filter kept nothing; keeping every item")
        return list(range(len(texts)))
    return keep


@dataclass
class Plan:
    """The next working memory and what was dropped on the way (for the event's reason)."""

    entries: list[Entry]
    dropped: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        gone = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n)
        return f"{len(self.entries)} items" + (f" (dropped {gone})" if gone else "")


def not_yet_held(current: Sequence[Entry], retrieved: Sequence[Entry]) -> list[Entry]:
    """The current items the retrieved ones do not already hold: a statement whose turns are
    all inside a retrieved episode would only say them again."""
    covered = frozenset().union(*(e.turns for e in retrieved))
    return [e for e in current if not (e.turns and e.turns <= covered)]


async def plan_working_memory(
    deps: Deps, cube_id: str, current: Sequence[Entry], retrieved: Sequence[Entry],
    queries: list[str], query_vectors: QueryVectors | None = None,
) -> Plan:
    """Retrieved + current, cleaned, reordered and filtered by the model, cut to capacity."""
    cfg = deps.settings.scheduler
    rest = not_yet_held(current, retrieved)
    combined = [*retrieved, *rest]
    entries = drop_short_and_repeats(combined, cfg.min_chars)
    plan = Plan(entries=[], dropped={"held by a retrieved episode": len(current) - len(rest),
                                     "short or repeated": len(combined) - len(entries)})
    vectors = await entry_vectors(deps, cube_id, entries)
    keep = near_duplicate_survivors(vectors, near_duplicate_threshold(deps),
                                    [said_once(e) for e in entries])
    plan.dropped["near-duplicate"] = len(entries) - len(keep)
    entries, vectors = [entries[i] for i in keep], vectors[keep]
    sims: list[float] = []
    if entries:
        embed = query_vectors or QueryVectors(deps.embedder)
        sims = query_similarities(await embed(queries), vectors)
    texts = [e.text for e in entries]
    order = await model_order(deps, queries, texts, sims)
    entries, texts, sims = [entries[i] for i in order], [texts[i] for i in order], \
        [sims[i] for i in order]
    kept = await model_keep(deps, queries, texts, sims)
    plan.dropped["unrelated"] = len(entries) - len(kept)
    entries = [entries[i] for i in kept]
    capacity = deps.settings.memory.working_memory_capacity
    plan.dropped["over capacity"] = max(0, len(entries) - capacity)
    plan.entries = entries[:capacity]
    return plan


async def current_working_memory(
    deps: Deps, cube_id: str, last: LastReplacement | None, now: datetime
) -> list[Entry]:
    """The cube's working memory as the scheduler should see it now.

    The graph is the truth once the working-memory sink has applied the scheduler's last
    replacement (its first item carries the replacement's timestamp). Until then — the
    sink is another agent, a batch behind — that replacement stands in, after whatever
    was added to working memory since it was made.
    """
    copies = [c for c in await deps.query.all_of_type(cube_id, "WorkingMemory") if admissible(c)]
    graph = [entry_of_copy(c) for c in copies]
    if last is None or (now - last.at).total_seconds() > \
            deps.settings.scheduler.pending_replacement_s:
        return drop_short_and_repeats(graph, 0)
    if last.refs:
        first = {last.refs[0], working_copy_id(last.refs[0])}
        if any(c.id in first and c.metadata.updated_at == last.at for c in copies):
            # applied — but the sink writes the new copies before it deletes the old ones:
            # a copy neither in the replacement nor added since is on its way out
            kept = {*last.refs, *(working_copy_id(r) for r in last.refs)}
            return drop_short_and_repeats(
                [e for c, e in zip(copies, graph, strict=True)
                 if c.id in kept or c.metadata.updated_at > last.at], 0)
    newer = [entry_of_copy(c) for c in copies if c.metadata.updated_at > last.at]
    pending = [Entry(ref=ref, text=text, vector_id=ref)
               for ref, text in zip(last.refs, last.texts, strict=True)]
    return drop_short_and_repeats([*newer, *pending], 0)
