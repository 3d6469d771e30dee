"""Picks the LLM implementation once, from settings."""

from __future__ import annotations

from typing import assert_never

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.port import LLM
from memstream.streams.llm.rules import RulesLLM
from memstream.topics.settings import LLMSettings


def create_llm(settings: LLMSettings) -> LLM:
    """``openai`` for an OpenAI-compatible endpoint, ``rules`` for the deterministic stand-in."""
    match settings.provider:
        case "openai":
            return OpenAILLM(settings)
        case "rules" | None:
            return RulesLLM()
        case _ as unreachable:
            assert_never(unreachable)
