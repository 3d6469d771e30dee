"""The ``rules`` stand-in for the tasks of ``streams.prompts.aggregate``."""

from __future__ import annotations

from memstream.streams.prompts.aggregate import (
    AggregateContext,
    AggregateResponse,
)
from memstream.streams.prompts.members import (
    central_statements,
    group_is_chinese,
    is_generic,
    joined_statements,
    keyword_title,
    norm_tag,
    subject_tags,
    title_tags,
)

# Rules mode: a concept needs this many members carrying this many common subject tags.
MIN_MEMBERS = 3


MIN_SHARED_TAGS = 2


def rules(ctx: AggregateContext) -> AggregateResponse:
    """A concept when ≥ 3 members share ≥ 2 subject tags: its most central members verbatim,
    titled with the shared tags."""
    common = _common_subject_tags(ctx)
    if len(common) < MIN_SHARED_TAGS:
        return AggregateResponse(create=False)
    wanted = {norm_tag(t) for t in common}
    holding = [
        i for i, m in enumerate(ctx.members)
        if len(wanted & {norm_tag(t) for t in m.tags}) >= MIN_SHARED_TAGS
    ]
    if len(holding) < MIN_MEMBERS:
        return AggregateResponse(create=False)
    holders = [ctx.members[i] for i in holding]
    scores = None if ctx.centrality is None else [ctx.centrality[i] for i in holding]
    quoted = central_statements(holders, scores)
    texts = [m.text for m in holders]
    ranked = [(tag, MIN_MEMBERS) for tag in common]
    title = keyword_title(texts, ranked) or quoted[0]
    zh = group_is_chinese(holders)
    shared = ("、" if zh else ", ").join(common)
    if zh:
        background = (f"汇总了{len(holders)}条共同带有标签{shared}的记忆（抽取式，无模型）："
                      f"逐字引用最有代表性的{len(quoted)}条。")
    else:
        which = "the most central one" if len(quoted) == 1 else f"the {len(quoted)} most central"
        background = (f"Concept over {len(holders)} memories sharing the tags {shared} "
                      f"(extractive, no model): {which} quoted verbatim.")
    return AggregateResponse(create=True, key=title, value=joined_statements(quoted),
                             tags=title_tags(ranked, texts) or common[:5],
                             background=background)


def _common_subject_tags(ctx: AggregateContext) -> list[str]:
    """Subject tags that at least ``MIN_MEMBERS`` members carry, the given shared tags first."""
    counted = dict(
        (norm_tag(tag), (tag, n))
        for tag, n in subject_tags([m for m in ctx.members if m.tags])
    )
    order = [norm_tag(t) for t in ctx.shared_tags if not is_generic(t)] + list(counted)
    out: list[str] = []
    for norm in dict.fromkeys(order):
        if norm in counted and counted[norm][1] >= MIN_MEMBERS:
            out.append(counted[norm][0])
    return out
