"""The ``rules`` stand-in for the tasks of ``streams.prompts.scheduler``."""

from __future__ import annotations

from memstream.streams.prompts.scheduler import (
    KeywordContext,
    KeywordResponse,
    fallback_keywords,
)
from memstream.streams.prompts.scheduler_rank import (
    FilterContext,
    FilterResponse,
    RerankContext,
    RerankResponse,
)


def rules_keywords(ctx: KeywordContext) -> KeywordResponse:
    return KeywordResponse(keywords=fallback_keywords(ctx.query))


def rules_rerank(ctx: RerankContext) -> RerankResponse:
    """The order given: the candidates arrive in the search's ranking (statement and turn
    cosine fused with BM25), which a single cosine against the query would only undo."""
    return RerankResponse(order=list(range(len(ctx.candidates))))


def rules_filter(ctx: FilterContext) -> FilterResponse:
    """Similarity at or above the floor (or a shared keyword); keywords alone if no similarity.

    With keywords alone and no candidate sharing one, the stand-in cannot judge and keeps all.
    """
    overlaps = ctx.overlaps()
    n = len(ctx.candidates)
    sims = ctx.similarities
    if sims is not None:
        keep = [i for i in range(n) if sims[i] >= ctx.floor_for(i) or overlaps[i] > 0]
        return FilterResponse(keep=keep)
    keep = [i for i in range(n) if overlaps[i] > 0]
    return FilterResponse(keep=keep or list(range(n)))
