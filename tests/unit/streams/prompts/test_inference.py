"""Inferred facts as a model task (streams/prompts/inference.py): its context, prompt and
the answers it accepts."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules.relations import rules
from memstream.streams.prompts.inference import InferenceContext, InferenceResponse, novel_fact
from memstream.streams.prompts.inference import render as render_inference
from memstream.streams.prompts.relations import RelationResponse
from tests.support.relation_nodes import DELAY, MISSED, ZH_DELAY, ZH_MISSED, pair


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
