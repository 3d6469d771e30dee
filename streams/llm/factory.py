"""Picks the LLM implementation once, from settings."""

from __future__ import annotations

from typing import assert_never

from streams.llm.openai_llm import OpenAILLM
from streams.llm.port import LLM
from streams.llm.rules import RulesLLM
from topics.settings import LLMSettings


def create_llm(settings: LLMSettings) -> LLM:
    """``openai`` for an OpenAI-compatible endpoint, ``rules`` for the deterministic stand-in."""
    match settings.provider:
        case "openai":
            return OpenAILLM(settings)
        case "rules" | None:
            return RulesLLM()
        case _ as unreachable:
            assert_never(unreachable)
