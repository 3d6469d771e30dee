"""The rules stand-in for inferred facts (streams/llm/rules/inference.py): it infers
nothing."""

from __future__ import annotations

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.prompts.inference import INFERENCE, InferenceContext
from tests.support.relation_nodes import DELAY, MISSED


async def test_rules_infer_nothing() -> None:
    ctx = InferenceContext(relation="CAUSE", source=DELAY, target=MISSED)
    assert (await RulesLLM().run(INFERENCE, ctx)).fact is None
