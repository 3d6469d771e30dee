"""Reranking and filtering the scheduler's candidates as model tasks
(streams/prompts/scheduler_rank.py): prompts and the answers they accept."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.prompts.scheduler import (
    RERANK,
    FilterContext,
    FilterResponse,
    RerankContext,
    RerankResponse,
    render_filter,
    render_rerank,
    resolve_keep,
    resolve_order,
)
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message

JSON_ONLY = "JSON object and nothing else"


# --------------------------------------------------------------------------- rerank

CANDIDATES = [
    "The user plays tennis on Saturdays.",
    "The user's flight to Lisbon is on May 14.",
    "The user is vegetarian.",
    "The user booked a hotel in Lisbon near the flight's arrival airport.",
]


def test_rerank_response_rejects_duplicates_and_negatives() -> None:
    assert RerankResponse.model_validate({"order": [2, "0", 1]}).order == [2, 0, 1]
    with pytest.raises(ValidationError, match="more than once"):
        RerankResponse.model_validate({"order": [1, 0, 1]})
    with pytest.raises(ValidationError):
        RerankResponse.model_validate({"order": [0, -1]})


def test_resolve_order_checks_range_and_completes() -> None:
    assert resolve_order([3, 1], 4) == [3, 1, 0, 2]
    with pytest.raises(ValueError, match="outside"):
        resolve_order([0, 4], 4)


def test_rerank_prompt() -> None:
    system, user = render_rerank(RerankContext(queries=["my Lisbon flight"], candidates=CANDIDATES))
    text = user["content"]
    assert "(latest) my Lisbon flight" in text
    assert all(f"[{i}] {c}" in text for i, c in enumerate(CANDIDATES))
    assert "indices 0 to 3" in text
    assert "each exactly once" in system["content"] and "different languages" in system["content"]
    assert JSON_ONLY in system["content"] and '"order"' in system["content"]


async def test_rerank_duplicate_answer_is_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.json({"order": [1, 1, 0]}), Reply.json({"order": [3, 1]}))
    llm = OpenAILLM(scripted_openai.llm_settings())
    ctx = RerankContext(queries=["my Lisbon flight"], candidates=CANDIDATES)
    answer = await llm.run(RERANK, ctx)
    assert resolve_order(answer.order, len(CANDIDATES)) == [3, 1, 0, 2]
    assert "more than once" in last_user_message(scripted_openai.chat_requests[1])
    await llm.close()


# --------------------------------------------------------------------------- filter


def test_filter_response_and_resolve_keep() -> None:
    assert FilterResponse.model_validate({"keep": [2, 0, 2]}).keep == [2, 0]
    assert resolve_keep([2, 0], 3) == [0, 2]
    with pytest.raises(ValueError, match="outside"):
        resolve_keep([0, 3], 3)
    with pytest.raises(ValidationError):
        FilterResponse.model_validate({"keep": [-1]})


def test_filter_prompt() -> None:
    system, user = render_filter(
        FilterContext(queries=["q1", "my Lisbon flight"], candidates=CANDIDATES)
    )
    text = user["content"]
    assert text.index("- q1") < text.index("(latest) my Lisbon flight")
    assert all(f"[{i}] {c}" in text for i, c in enumerate(CANDIDATES))
    assert "When unsure, keep" in system["content"] and "different languages" in system["content"]
    assert JSON_ONLY in system["content"] and '"keep"' in system["content"]
