"""What an agent's feedback (``Feedback`` on ``memory.commands``) does to a memory, and to
what search returns.

The command stage applies ``judged`` (a pure function of the node, the verdict and the
command's own time, so a replay rebuilds the same node); search and working memory read
the result: a memory whose verdict is ``wrong`` is never returned (``returnable``), one
called ``irrelevant`` for a query like the one asked scores less (``after_feedback``, one
step after ranking; the ranking itself knows nothing of feedback).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memstream.streams.core.lexical import terms
from memstream.topics.events import ScoredMemory
from memstream.topics.models import MemoryItem, Verdict
from memstream.topics.recipe import Boosts

# The queries a memory was called irrelevant for: the newest this many are kept.
IRRELEVANT_KEPT = 20


def judged(node: MemoryItem, verdict: Verdict, at: datetime,
           query: str | None = None) -> MemoryItem:
    """``node`` after ``verdict`` given at ``at``. ``wrong``: archived (an expired node keeps
    its status), never returned again; ``outdated``: its validity closes at ``at`` (or stays
    closed at an earlier time); ``irrelevant``: ``query`` joins the queries it is demoted for;
    ``confirmed``: its validity reopens and nothing closes it automatically. A ``wrong``
    verdict stands until ``confirmed`` lifts it: ``outdated`` or ``irrelevant`` on a wrong
    memory add their own effect and leave it out of reach. ``updated_at`` stays: a verdict
    says nothing new, and what is newer ranks first between conflicting memories."""
    md = node.metadata
    changes: dict[str, object] = {
        "feedback": "wrong" if md.feedback == "wrong" and verdict != "confirmed" else verdict}
    match verdict:
        case "wrong":
            if md.status in ("activated", "generated"):
                changes["status"] = "archived"
        case "outdated":
            changes["valid_until"] = at if md.valid_until is None else min(md.valid_until, at)
        case "irrelevant":
            if query is not None and (text := " ".join(query.split())):
                kept = [q for q in md.irrelevant_for if q.casefold() != text.casefold()]
                changes["irrelevant_for"] = (*kept, text)[-IRRELEVANT_KEPT:]
        case "confirmed":
            changes["valid_until"] = None
    return node.evolve(**changes)


def returnable(node: MemoryItem) -> bool:
    """Whether search and working memory may return it: not called ``wrong``."""
    return node.metadata.feedback != "wrong"


def overlap(a: set[str], b: set[str]) -> float:
    """Jaccard overlap of two sets of content words (0 when either is empty)."""
    return len(a & b) / len(a | b) if a and b else 0.0


def irrelevant_to(node: MemoryItem, words: set[str], at_least: float) -> bool:
    """Whether ``node`` was called irrelevant for a query whose content words (stemmed,
    stopwords out: ``lexical.terms``) overlap ``words`` by at least ``at_least``."""
    return any(overlap(words, set(terms(q))) >= at_least
               for q in node.metadata.irrelevant_for)


def after_feedback(found: Sequence[ScoredMemory], query: str,
                   boosts: Boosts) -> list[ScoredMemory]:
    """Ranked hits without the ``wrong`` ones, and those called irrelevant for a query like
    ``query`` (``irrelevant_overlap``) scored times ``irrelevant_weight``, re-sorted by score
    (stable: equal scores keep their order)."""
    kept = [s for s in found if returnable(s.item)]
    if not any(s.item.metadata.irrelevant_for for s in kept):
        return kept
    words = set(terms(query))
    out = [s.model_copy(update={"score": round(s.score * boosts.irrelevant, 4)})
           if irrelevant_to(s.item, words, boosts.irrelevant_overlap) else s for s in kept]
    return sorted(out, key=lambda s: -s.score)
