"""Cluster summaries as a model task (streams/prompts/summary.py): the prompt, the answers
it accepts, both providers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.prompts.summary import CLUSTER_SUMMARY, SummaryContext, SummaryResponse
from memstream.streams.prompts.summary import render as render_summary
from tests.fakes.openai_server import Reply, ScriptedOpenAI
from tests.support.members import HIKING, ZH_COOKING


def test_summary_response_validation() -> None:
    answer = SummaryResponse.model_validate(
        {"key": " Hiking ", "value": "The user  hikes.", "tags": "hiking, alps，hiking",
         "background": None}
    )
    assert (answer.key, answer.value, answer.tags, answer.background) == (
        "Hiking", "The user hikes.", ["hiking", "alps"], "")
    with pytest.raises(ValidationError, match="key"):
        SummaryResponse.model_validate({"key": "", "value": "x"})
    with pytest.raises(ValidationError, match="value"):
        SummaryResponse.model_validate({"key": "k"})


def test_summary_prompt() -> None:
    system, user = render_summary(SummaryContext(members=HIKING, level="concept"))
    text = user["content"]
    assert "[0] key: Zugspitze hike | tags: hiking, mountains, preference |" in text
    assert HIKING[3].text in text and "Level: concept" in text
    assert "CONCEPT summary" in system["content"] and "Add no facts" in system["content"]
    assert "The group is in English" in system["content"]
    assert "JSON object and nothing else" in system["content"]
    topic = render_summary(SummaryContext(members=ZH_COOKING, level="topic"))[0]["content"]
    assert "TOPIC summary" in topic and "The group is in Chinese" in topic


async def test_summary_through_both_providers(scripted_openai: ScriptedOpenAI) -> None:
    ctx = SummaryContext(members=HIKING)
    assert (await RulesLLM().run(CLUSTER_SUMMARY, ctx)).key == "hiking · mountains"
    scripted_openai.enqueue(Reply.json({
        "key": "Mountain hiking", "value": "The user is a keen mountain hiker.",
        "tags": ["hiking", "alps"], "background": "Combines 4 hiking memories.",
    }))
    llm = OpenAILLM(scripted_openai.llm_settings())
    answer = await llm.run(CLUSTER_SUMMARY, ctx)
    await llm.close()
    assert answer.key == "Mountain hiking" and answer.tags == ["hiking", "alps"]
