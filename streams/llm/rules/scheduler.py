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
    """By similarity when given, else by shared keywords; ties keep their original order."""
    overlaps = ctx.overlaps()
    sims = ctx.similarities
    if sims is not None:
        order = sorted(range(len(ctx.candidates)), key=lambda i: (-sims[i], -overlaps[i], i))
    else:
        order = sorted(range(len(ctx.candidates)), key=lambda i: (-overlaps[i], i))
    return RerankResponse(order=order)


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
