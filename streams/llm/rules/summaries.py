"""The ``rules`` stand-in for ``streams.prompts.summaries``: the one-cluster stand-in, cluster
by cluster."""

from __future__ import annotations

from memstream.streams.llm.rules.summary import rules as summary_rules
from memstream.streams.prompts.summaries import (
    NumberedSummary,
    SummariesContext,
    SummariesResponse,
)


def rules(ctx: SummariesContext) -> SummariesResponse:
    return SummariesResponse(summaries=[
        NumberedSummary(cluster=n, **summary_rules(c).model_dump())
        for n, c in enumerate(ctx.clusters)])
