"""The ``rules`` stand-in for ``streams.prompts.review``: the judge's and fusion's stand-ins,
candidate by candidate (most similar first), as the per-pair calls answered; a pair whose
new statement says outright that the candidate stopped holding is ``supersedes``
(``streams.llm.rules.supersession``)."""

from __future__ import annotations

from memstream.streams.llm.rules.conflict import rules as judge_rules
from memstream.streams.llm.rules.fusion import rules as fusion_rules
from memstream.streams.llm.rules.supersession import ends
from memstream.streams.prompts.conflict import JudgeContext
from memstream.streams.prompts.fusion import FusionContext
from memstream.streams.prompts.review import Decision, ReviewContext, ReviewResponse


def rules(ctx: ReviewContext) -> ReviewResponse:
    decisions: list[Decision] = []
    for i, item in enumerate(ctx.items):
        for j, cand in enumerate(item.candidates):
            verdict = judge_rules(JudgeContext(
                existing=cand.statement, new=item.new, similarity=cand.similarity,
                merge_threshold=ctx.merge_threshold))
            old, new = cand.statement, item.new
            why = ends(old.text, new.text, verdict.relation, existing_since=old.valid_from,
                       new_since=new.valid_from)
            if why is not None:
                decisions.append(Decision(item=i, candidate=j, relation="supersedes",
                                          reason=why))
                break
            if verdict.relation == "independent":
                continue
            fused = fusion_rules(FusionContext(existing=cand.statement, new=item.new,
                                               relation=verdict.relation))
            decisions.append(Decision(item=i, candidate=j, relation=verdict.relation,
                                      reason=verdict.reason, memory=fused.memory,
                                      key=fused.key, tags=fused.tags))
            break
    return ReviewResponse(decisions=decisions)
