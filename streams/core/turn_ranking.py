"""Rank turns, return excerpts: the hits episodes give a search.

A whole five-turn episode is a coarse unit: the turn that answers sits anywhere in it and
its neighbour across the episode boundary is out of reach. So each turn of a cube's
episodes is scored in context, by reciprocal-rank fusion of four rankings: the turn by the
cosine of the statements extracted from it, the turn by BM25, its episode by cosine and
its episode by BM25 (and, when the question names a date, what was said then). The best
turns, taken in order, each become one hit: the turn with ``before``/``after`` neighbours of
its session not already returned (across episodes); below the first few hits, a window that
continues a hit joins it as one passage. When a statement was extracted from that turn, it
is the hit's memory and the excerpt its context. On LoCoMo (bench/retrieval_quality.py)
this beat whole chunks at fewer characters. In a cube whose turns are in two scripts, the
rankings are levelled between them first (``streams/core/crosslingual.py``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memstream.sinks.filtering import matches_all
from memstream.sinks.ports import Filter, VectorQuery
from memstream.sinks.query import NodeReads
from memstream.streams.core.crosslingual import (
    episode_shares,
    level,
    other_script,
    shift,
    unseen_ranked,
)
from memstream.streams.core.episode_index import EpisodeIndex, indexes_for
from memstream.streams.core.lexical import terms
from memstream.streams.core.related_words import related
from memstream.streams.runtime.stage import Deps
from memstream.streams.text.named_dates import named_dates
from memstream.topics.context import once_dated
from memstream.topics.events import ScoredMemory
from memstream.topics.models import MemoryItem, MemoryType
from memstream.topics.recipe import UNIT

STATEMENT_TYPES: tuple[MemoryType, ...] = ("LongTermMemory", "UserMemory")


@dataclass
class Window:
    """One hit of turn ranking, before it becomes a ``ScoredMemory``: the best turn it was
    found for (``center``), the turns it returns in order, the statement it carries and the
    statements folded into it (ids: their turns are among ``turns``)."""

    score: float
    center: int
    turns: list[int]
    statement: MemoryItem | None
    centers: list[int] = field(default_factory=list)  # every turn it was found for, best first
    folded: list[str] = field(default_factory=list)


def message_ids(item: MemoryItem) -> list[str]:
    return [s.message_id for s in item.metadata.sources if s.kind == "message" and s.message_id]


def _ranks(scores: dict[int, float]) -> dict[int, int]:
    """1-based ranks of the keys by descending score (ties by key)."""
    ordered = sorted(scores, key=lambda i: (-scores[i], i))
    return {i: r for r, i in enumerate(ordered, start=1)}


_ROLES = frozenset({"user", "assistant", "system", "tool"})


def named_speakers(query: str, speakers: Sequence[str]) -> set[int]:
    """The speakers (codes of ``EpisodeIndex.speakers``) a question names by their first
    name, when it names some but not all of them; bare roles ("user") name nobody."""
    text = query.casefold()
    named = {i for i, name in enumerate(speakers)
             if name not in _ROLES and name.split()
             and re.search(rf"(?<!\w){re.escape(name.split()[0])}(?!\w)", text)}
    return named if len(named) < len(speakers) else set()


def _rrf(ranks: dict[int, int], weight: float, k: int, size: int) -> np.ndarray:
    out = np.zeros(size)
    if weight <= 0 or not ranks:
        return out
    rows = np.fromiter(ranks.keys(), dtype=np.int64, count=len(ranks))
    vals = np.fromiter(ranks.values(), dtype=np.float64, count=len(ranks))
    out[rows] = weight / (k + vals)
    return out


async def _statement_cosines(
    deps: Deps, cube_id: str, query_vec: np.ndarray, index: EpisodeIndex, pool: int,
    reads: NodeReads,
) -> tuple[dict[int, float], dict[int, str]]:
    """Per turn, the best cosine of a statement extracted from it, and that statement's id.
    Only statements not met before are read from the graph (for the turns they cite)."""
    hits = await deps.query.vector_search(
        cube_id, VectorQuery(query_vec.tolist(), pool, list(STATEMENT_TYPES), "activated",
                              with_vectors=False))
    if not hits:
        return {}, {}
    known = index.statement_messages
    if unknown := [h.id for h in hits if h.id not in known]:
        for node in await reads.get(unknown):
            known[node.id] = tuple(message_ids(node))
    best: dict[int, float] = {}
    statement_of: dict[int, str] = {}
    for hit in hits:
        for mid in known.get(hit.id, ()):
            for turn in index.turns_of_message.get(mid, ()):
                if hit.score > best.get(turn, -2.0):
                    best[turn] = hit.score
                    statement_of[turn] = hit.id
    return best, statement_of


async def rank_windows(
    deps: Deps, cube_id: str, query: str, query_vec: np.ndarray, filters: Sequence[Filter],
    want: int, statements: bool = True, recount: bool = False,
    reads: NodeReads | None = None,
) -> tuple[list[Window], EpisodeIndex, np.ndarray]:
    """The ``want`` best excerpts of the cube's episodes for ``query``, the index, and which
    of its turns the filters allow. ``statements``: a hit may be the statement of its turn
    (when it passes the filters too); ``recount``: the index is checked against the store
    now (``EpisodeIndexes.get``); ``reads``: the search's reads of the cube's nodes."""
    recipe = deps.settings.search.ranking
    recall, fusion, excerpts = recipe.recall, recipe.fusion, recipe.excerpts
    reads = reads or NodeReads(deps.query, cube_id)
    indexes = indexes_for(deps.query, deps.settings.search, deps.foreground)
    index = await indexes.get(deps.query, cube_id, recount)
    n = len(index.turns)
    if not n:
        return [], index, np.zeros(0, dtype=bool)
    allowed_episodes = np.asarray([matches_all(e, filters) for e in index.episodes], dtype=bool)
    allowed = allowed_episodes[index.episode_of_turn]
    if not allowed.any():
        return [], index, allowed
    qterms = terms(query)
    turn_bm = index.turn_bm25.scores(qterms)
    episode_bm = index.episode_bm25.scores(qterms)
    if recall.related_words > 0 and (extra := related(qterms)):
        turn_bm = turn_bm + recall.related_words * index.turn_bm25.scores(extra)
        episode_bm = episode_bm + recall.related_words * index.episode_bm25.scores(extra)
    # the two vector searches wait on the store, not on each other: one after the other they
    # were the longest stretch of a warm search on a Milvus server (bench/tenancy.py)
    episode_hits, (turn_cos, statement_of) = await asyncio.gather(
        deps.query.vector_search(cube_id, VectorQuery(
            query_vec.tolist(), recall.episodes, ["EpisodicMemory"], "activated",
            with_vectors=False)),
        _statement_cosines(deps, cube_id, query_vec, index, recall.statements, reads))
    episode_cos = {index.position[h.id]: h.score for h in episode_hits if h.id in index.position}
    k = fusion.turn_k
    turn_words = _ranks({i: float(s) for i, s in enumerate(turn_bm) if s > 0})
    episode_words = _ranks({i: float(s) for i, s in enumerate(episode_bm) if s > 0})
    if (other := other_script(query, index.script_of_turn)) is not None:
        # turns in two scripts: what was said in the other one competes on equal terms
        shares = episode_shares(other, index.episode_of_turn, len(index.episodes))
        by = shift(turn_cos, other)
        turn_cos, episode_cos = level(turn_cos, other, by), level(episode_cos, shares, by)
        turn_words = unseen_ranked(turn_words, turn_cos, other)
        episode_words = unseen_ranked(episode_words, episode_cos, shares > 0)
    # the dense rankings weigh the unit, the BM25 ones ``fusion.bm25``: a turn's and its
    # episode's alike
    ep_dense = _rrf(_ranks(episode_cos), UNIT, k, len(index.episodes))
    ep_words = _rrf(episode_words, fusion.bm25, k, len(index.episodes))
    score = (_rrf(_ranks(turn_cos), UNIT, k, n)
             + _rrf(turn_words, fusion.bm25, k, n)
             + (ep_dense + ep_words)[index.episode_of_turn])
    best = (UNIT + fusion.bm25 + UNIT + fusion.bm25) / (k + 1)
    if fusion.dates > 0 and (when := named_dates(query)):
        # a question naming a date: what was said then counts as first of one more ranking
        said_then = np.asarray([any(n.holds(d) for n in when) for d in index.days], dtype=bool)
        if said_then.any() and not said_then.all():
            score = score + said_then[index.episode_of_turn] * (fusion.dates / (k + 1))
            best += fusion.dates / (k + 1)
    score = score / best if best > 0 else score
    if recipe.boosts.speaker > 0 and (named := named_speakers(query, index.speakers)):
        # a question about a person is answered mostly by what that person said
        by_named = np.isin(index.speaker_of_turn, sorted(named))
        score = np.where(by_named, score, score * (1.0 - recipe.boosts.speaker))
    score = np.where(allowed, score, -1.0)
    out = _windows(score, allowed, index.session_of_turn, want, excerpts.before,
                   excerpts.after, excerpts.before_share, excerpts.passage_turns,
                   excerpts.passage_after)
    if excerpts.statement and statements and (ids := {statement_of[c] for w in out
                                                    for c in w.centers if c in statement_of}):
        nodes = {n.id: n for n in await reads.get(list(ids))}
        for w in out:
            found = [node for c in w.centers
                     if (node := nodes.get(statement_of.get(c, ""))) is not None
                     and node.metadata.status == "activated" and matches_all(node, filters)]
            if found and statement_of.get(w.center) == found[0].id:
                w.statement = found[0]  # the best turn's statement carries the hit
                found = found[1:]
            w.folded = list(dict.fromkeys(n.id for n in found))
    return out, index, allowed


def _windows(score: np.ndarray, allowed: np.ndarray, sessions: Sequence[str], want: int,
             before: int, after: int, before_share: float, most: int,
             first: int = 0) -> list[Window]:
    """The ``want`` best excerpts, each turn in at most one. The best turns, in order, each
    open a window: the turn with up to ``before`` turns before it (those scoring at least
    ``before_share`` of it) and ``after`` after it, of its session, none another window
    holds. A window that touches passages (the turn before or after it in their session)
    joins them as one passage, at the best one's place, while it holds at most ``most``
    turns and is not among the first ``first`` hits: those stay as they opened, so that a
    small budget holds several (a window touching one of them is a hit of its own)."""
    n = len(score)
    order = np.argsort(-score, kind="stable")
    owner = np.full(n, -1, dtype=np.int64)  # the window (position in ``out``) holding a turn
    out: list[Window] = []
    live = 0
    for t in order.tolist():
        if live >= want or score[t] <= 0:
            break
        if owner[t] >= 0:
            continue
        lo = hi = t
        # a turn before the centre joins only if it matches too (``before_share``)
        while lo - 1 >= 0 and t - (lo - 1) <= before and owner[lo - 1] < 0 \
                and allowed[lo - 1] and sessions[lo - 1] == sessions[t] \
                and score[lo - 1] >= before_share * score[t]:
            lo -= 1
        while hi + 1 < n and (hi + 1) - t <= after and owner[hi + 1] < 0 \
                and allowed[hi + 1] and sessions[hi + 1] == sessions[t]:
            hi += 1
        touching = sorted({int(owner[side]) for side in (lo - 1, hi + 1)
                           if 0 <= side < n and owner[side] >= 0
                           and sessions[side] == sessions[t]
                           and sum(1 for w in out[:owner[side]] if w.turns) >= first})
        if touching and hi - lo + 1 + sum(len(out[w].turns) for w in touching) <= most:
            into = out[touching[0]]  # the better place (windows open in score order)
            for w in touching[1:]:  # the window bridges two passages: one
                other = out[w]
                into.turns.extend(other.turns)
                into.centers.extend(other.centers)
                owner[other.turns] = touching[0]
                other.turns = []
                live -= 1
            into.turns = sorted([*into.turns, *range(lo, hi + 1)])
            into.centers.append(t)
            owner[lo:hi + 1] = touching[0]
            continue
        owner[lo:hi + 1] = len(out)
        out.append(Window(float(score[t]), t, list(range(lo, hi + 1)), None, [t]))
        live += 1
    return [w for w in out if w.turns]


def to_scored(window: Window, index: EpisodeIndex) -> ScoredMemory:
    """The hit as returned: the statement (or the centre turn's episode) with the excerpt."""
    episode = index.episodes[index.turns[window.center].episode]
    excerpt = "\n".join(once_dated([index.turns[t].text for t in window.turns]))
    ids = tuple(m for t in window.turns if (m := index.turns[t].message_id))
    return ScoredMemory(item=window.statement or episode, score=round(window.score, 4),
                        excerpt=excerpt, excerpt_ids=ids, episode_id=episode.id,
                        folded_ids=tuple(window.folded))
