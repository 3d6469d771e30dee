"""The ``rules`` stand-in for the tasks of ``streams.prompts.summary``."""

from __future__ import annotations

from memstream.streams.prompts.members import (
    central_statements,
    group_is_chinese,
    is_generic,
    joined_statements,
    keyword_title,
    subject_tags,
    title_tags,
)
from memstream.streams.prompts.summary import (
    SummaryContext,
    SummaryResponse,
)
from memstream.streams.text.words import tags_for


def rules(ctx: SummaryContext) -> SummaryResponse:
    """Extractive: the most central members verbatim, titled with whole-word subject tags."""
    quoted = central_statements(ctx.members, ctx.centrality,
                                first_sentence_only=ctx.level == "topic")
    texts = [m.text for m in ctx.members]
    ranked = subject_tags(ctx.members)
    tags = title_tags(ranked, texts)
    title = keyword_title(texts, ranked) or _fallback_title(quoted[0], texts)
    return SummaryResponse(
        key=title, value=joined_statements(quoted), tags=tags,
        background=_background(ctx, len(quoted)))


def _fallback_title(lead: str, texts: list[str]) -> str:
    """Every tag is generic: the lead statement's salient words, or the statement itself."""
    words = [t for t in tags_for(lead, limit=6) if not is_generic(t)]
    return keyword_title(texts, [(w, 2) for w in words]) or lead


def _background(ctx: SummaryContext, quoted: int) -> str:
    count = len(ctx.members)
    if group_is_chinese(ctx.members):
        unit = "个概念" if ctx.level == "topic" else "条记忆"
        return f"汇总了{count}{unit}（抽取式，无模型）：逐字引用最有代表性的{quoted}条。"
    if ctx.level == "topic":
        noun = "concept" if count == 1 else "concepts"
    else:
        noun = "memory" if count == 1 else "memories"
    which = "the most central one" if quoted == 1 else f"the {quoted} most central"
    return f"Summary of {count} {noun} (extractive, no model): {which} quoted verbatim."
