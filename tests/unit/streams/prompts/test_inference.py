"""Inferred facts as a model task (streams/prompts/inference.py): its context, prompt and
the answers it accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstream.streams.llm.rules.relations import rules
from memstream.streams.prompts.inference import InferenceContext, InferenceResponse, novel_fact
from memstream.streams.prompts.inference import render as render_inference
from memstream.streams.prompts.relations import RelationContext, RelationNode, RelationResponse

T0 = datetime(2025, 5, 2, 9, 0, tzinfo=UTC)


def node(
    text: str, *, hours: float = 0, tags: list[str] | None = None, **kw: object
) -> RelationNode:
    return RelationNode.model_validate(
        {"text": text, "tags": tags or [], "updated_at": T0 + timedelta(hours=hours), **kw}
    )


def pair(new: RelationNode, old: RelationNode) -> RelationContext:
    return RelationContext(new=new, old=old)


# The trip conversation, as the extraction stage would store it (tags included).
DELAY = node("The user's flight to Berlin was delayed by three hours.",
             tags=["flight", "berlin", "delay"], hours=1)
MISSED = node("The user missed the 2 pm meeting with the client in Berlin because of the "
              "flight delay.", tags=["meeting", "client", "berlin"], hours=2)


ZH_DELAY = node("用户去柏林的航班延误了三个小时。", tags=["航班", "延误", "柏林"], hours=1)
ZH_MISSED = node("用户因为航班延误错过了在柏林和客户的会议。", tags=["会议", "客户", "柏林"],
                 hours=2)


# --------------------------------------------------------------------------- inference


def test_inference_context_is_oriented_by_the_detector_answer() -> None:
    ctx = pair(MISSED, DELAY)
    inferred = InferenceContext.from_relation(ctx, rules(ctx))
    assert inferred is not None
    assert (inferred.relation, inferred.source, inferred.target) == ("CAUSE", DELAY, MISSED)
    assert InferenceContext.from_relation(ctx, RelationResponse(relation="RELATE")) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("It can be inferred that the user arrived after 2 pm.",
         "It can be inferred that the user arrived after 2 pm."),
        ("it can be inferred that: the user arrived late",
         "It can be inferred that the user arrived late"),
        ("The user arrived in Berlin after 2 pm.",
         "It can be inferred that the user arrived in Berlin after 2 pm."),
        ("可以推断出，用户的脚踝还没有恢复。", "可以推断用户的脚踝还没有恢复。"),
        ("用户的脚踝还没有恢复。", "可以推断用户的脚踝还没有恢复。"),
        (None, None), ("null", None), ("None.", None), ("无", None), ("  ", None),
        ("It can be inferred that.", None),
    ],
)
def test_inferred_fact_is_phrased_or_none(raw: str | None, expected: str | None) -> None:
    assert InferenceResponse.model_validate({"fact": raw}).fact == expected


def test_a_restated_memory_is_not_a_new_fact() -> None:
    ctx = InferenceContext(relation="CAUSE", source=DELAY, target=MISSED)
    restated = InferenceResponse(fact="It can be inferred that the user's flight to Berlin "
                                      "was delayed.")
    assert novel_fact(ctx, restated) is None
    new = InferenceResponse(fact="It can be inferred that the user arrived in Berlin after 2 pm.")
    assert novel_fact(ctx, new) == new.fact
    assert novel_fact(ctx, InferenceResponse(fact=None)) is None


def test_inference_prompt() -> None:
    ctx = InferenceContext(relation="CONDITION", source=ZH_DELAY, target=ZH_MISSED,
                           reason="条件")
    system, user = render_inference(ctx)
    assert ZH_DELAY.text in user["content"] and ZH_MISSED.text in user["content"]
    assert user["content"].index("SOURCE memory") < user["content"].index("TARGET memory")
    assert "only if, or only when" in system["content"]
    assert '"It can be inferred that"' in system["content"] and "可以推断" in system["content"]
    assert "not already stated in either" in system["content"]
    assert "answer null" in system["content"]
    assert "The pair of memories is in Chinese: write the fact in Chinese" in system["content"]
    assert "JSON object and nothing else" in system["content"]
    cause = render_inference(InferenceContext(relation="CAUSE", source=DELAY, target=MISSED))
    assert "SOURCE caused TARGET" in cause[0]["content"]
