"""The rules stand-in for inferred facts (streams/llm/rules/inference.py): it infers
nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.prompts.inference import INFERENCE, InferenceContext
from memstream.streams.prompts.relations import RelationNode

T0 = datetime(2025, 5, 2, 9, 0, tzinfo=UTC)


def node(
    text: str, *, hours: float = 0, tags: list[str] | None = None, **kw: object
) -> RelationNode:
    return RelationNode.model_validate(
        {"text": text, "tags": tags or [], "updated_at": T0 + timedelta(hours=hours), **kw}
    )


# The trip conversation, as the extraction stage would store it (tags included).
DELAY = node("The user's flight to Berlin was delayed by three hours.",
             tags=["flight", "berlin", "delay"], hours=1)
MISSED = node("The user missed the 2 pm meeting with the client in Berlin because of the "
              "flight delay.", tags=["meeting", "client", "berlin"], hours=2)


async def test_rules_infer_nothing() -> None:
    ctx = InferenceContext(relation="CAUSE", source=DELAY, target=MISSED)
    assert (await RulesLLM().run(INFERENCE, ctx)).fact is None
