"""The model factory (streams/llm/factory.py): the provider picked from the settings."""

from __future__ import annotations

from memstream.streams.llm.factory import create_llm
from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.rules import RulesLLM
from memstream.topics.settings import LLMSettings


def test_factory_picks_provider_from_settings() -> None:
    assert isinstance(create_llm(LLMSettings()), RulesLLM)
    configured = create_llm(LLMSettings(base_url="http://127.0.0.1:9/v1"))
    assert isinstance(configured, OpenAILLM)
    assert isinstance(create_llm(LLMSettings(provider="rules", base_url="http://x/v1")), RulesLLM)
