"""The ``rules`` stand-in for ``streams.prompts.organize``: the per-pair stand-ins, pair by
pair and group by group, so the batched question answers exactly as the single ones did."""

from __future__ import annotations

from memstream.streams.llm.rules.aggregate import rules as aggregate_rules
from memstream.streams.llm.rules.inference import rules as inference_rules
from memstream.streams.llm.rules.relations import rules as relation_rules
from memstream.streams.prompts.inference import InferenceContext
from memstream.streams.prompts.organize import (
    GroupAnswer,
    OrganizeContext,
    OrganizeResponse,
    PairAnswer,
)


def rules(ctx: OrganizeContext) -> OrganizeResponse:
    links: list[PairAnswer] = []
    for n in range(len(ctx.pairs)):
        pair = ctx.pair(n)
        verdict = relation_rules(pair)
        if verdict.relation == "NONE":
            continue
        implied = InferenceContext.from_relation(pair, verdict)
        fact = inference_rules(implied).fact if implied is not None else None
        links.append(PairAnswer(pair=n, inferred=fact, **verdict.model_dump()))
    concepts = [GroupAnswer(group=n, **aggregate_rules(group).model_dump())
                for n, group in enumerate(ctx.groups)]
    return OrganizeResponse(links=links, concepts=concepts)
