"""The openai provider (streams/llm/openai_llm.py) against a real HTTP server that answers
from a script."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel

from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.port import ChatMessage, LLMError, Task
from memstream.streams.prompts.extraction import EXTRACTION, ExtractionContext, ExtractionMessage
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message


class Question(BaseModel):
    text: str


class Verdict(BaseModel):
    label: Literal["contradictory", "redundant", "independent"]
    score: int


def _render(ctx: Question) -> list[ChatMessage]:
    return [
        {"role": "system", "content": "You judge pairs of memories. Answer in JSON."},
        {"role": "user", "content": ctx.text},
    ]


JUDGE: Task[Question, Verdict] = Task("judge", _render, Verdict)
GOOD = {"label": "redundant", "score": 3}


async def _run(server: ScriptedOpenAI, **settings: Any) -> tuple[Verdict, OpenAILLM]:
    llm = OpenAILLM(server.llm_settings(**settings))
    try:
        return await llm.run(JUDGE, Question(text="is A like B?")), llm
    finally:
        await llm.close()


async def test_valid_json_answer(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.json(GOOD, prompt_tokens=30, completion_tokens=9))
    verdict, llm = await _run(scripted_openai)
    assert verdict == Verdict(label="redundant", score=3)
    [sent] = scripted_openai.chat_requests
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["model"] == scripted_openai.model
    assert sent["messages"] == _render(Question(text="is A like B?"))
    assert (llm.usage.calls, llm.usage.failures) == (1, 0)
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == (30, 9)
    assert llm.usage_by_task["judge"].prompt_tokens == 30


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"label": "redundant", "score": 3}\n```',
        'Let me think. The two say the same.\n{"label": "redundant", "score": 3}\nDone!',
        '{"label": "redundant", "score": 3,}',
    ],
    ids=["fenced", "chatty", "trailing-comma"],
)
async def test_repairable_answers_need_no_retry(
    scripted_openai: ScriptedOpenAI, content: str
) -> None:
    scripted_openai.enqueue(Reply.text(content))
    verdict, llm = await _run(scripted_openai)
    assert verdict.label == "redundant"
    assert len(scripted_openai.chat_requests) == 1
    assert llm.usage.failures == 0


async def test_garbage_is_retried_then_fails(
    scripted_openai: ScriptedOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    scripted_openai.handler = lambda request: "I am not sure what you mean."
    llm = OpenAILLM(scripted_openai.llm_settings(max_retries=2))
    with caplog.at_level(logging.WARNING), pytest.raises(LLMError) as info:
        await llm.run(JUDGE, Question(text="q"))
    assert info.value.attempts == 3
    assert info.value.task == "judge"
    assert len(scripted_openai.chat_requests) == 3
    assert "not be parsed as JSON" in last_user_message(scripted_openai.chat_requests[1])
    assert (llm.usage.calls, llm.usage.failures) == (3, 3)
    assert llm.usage_by_task["judge"].failures == 3
    failures = [r for r in caplog.records if r.levelno == logging.WARNING and "judge" in r.message]
    assert len(failures) == 3
    await llm.close()


async def test_invalid_schema_then_valid_on_retry(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.json({"label": "maybe", "score": "high"}), Reply.json(GOOD))
    verdict, llm = await _run(scripted_openai)
    assert verdict.label == "redundant"
    first, second = scripted_openai.chat_requests
    # The retry shows the model its wrong answer and what was wrong with it.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-2]["role"] == "assistant"
    assert '"maybe"' in second["messages"][-2]["content"]
    feedback = second["messages"][-1]["content"]
    assert "label" in feedback and "score" in feedback
    assert (llm.usage.calls, llm.usage.failures) == (2, 1)


async def test_slow_answer_times_out_and_is_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.slow(2.0, GOOD), Reply.json(GOOD))
    verdict, llm = await _run(scripted_openai, timeout_s=0.3)
    assert verdict.label == "redundant"
    assert len(scripted_openai.chat_requests) == 2
    assert llm.usage.failures == 1


async def test_always_slow_ends_in_llm_error(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.handler = lambda request: Reply.slow(2.0, GOOD)
    with pytest.raises(LLMError, match="within 0.2 s"):
        await _run(scripted_openai, timeout_s=0.2, max_retries=1)
    assert len(scripted_openai.chat_requests) == 2


async def test_http_500_then_success(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.http_error(500, "overloaded"), Reply.json(GOOD))
    verdict, llm = await _run(scripted_openai)
    assert verdict.score == 3
    assert len(scripted_openai.chat_requests) == 2


async def test_http_500_every_time_reports_status(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.handler = lambda request: Reply.http_error(503, "model is loading")
    with pytest.raises(LLMError, match="HTTP 503: model is loading"):
        await _run(scripted_openai, max_retries=1)
    assert len(scripted_openai.chat_requests) == 2


async def test_json_mode_rejected_falls_back_without_response_format(
    scripted_openai: ScriptedOpenAI,
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        if "response_format" in request:
            return Reply.http_error(400, "response_format is not supported")
        return Reply.json(GOOD)

    scripted_openai.handler = handler
    llm = OpenAILLM(scripted_openai.llm_settings(max_retries=0))
    assert (await llm.run(JUDGE, Question(text="q"))).label == "redundant"
    first, second = scripted_openai.chat_requests
    assert "response_format" in first and "response_format" not in second
    # Remembered: the next call goes straight to plain mode.
    await llm.run(JUDGE, Question(text="q2"))
    assert len(scripted_openai.chat_requests) == 3
    assert "response_format" not in scripted_openai.chat_requests[2]
    await llm.close()


async def test_authentication_error_is_not_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.handler = lambda request: Reply.http_error(401, "invalid api key")
    with pytest.raises(LLMError, match="HTTP 401: invalid api key") as info:
        await _run(scripted_openai, max_retries=3)
    assert info.value.attempts == 1
    assert len(scripted_openai.chat_requests) == 1


async def test_unreachable_endpoint_fails_after_retries(scripted_openai: ScriptedOpenAI) -> None:
    settings = scripted_openai.llm_settings(max_retries=1)
    await scripted_openai.stop()
    llm = OpenAILLM(settings)
    with pytest.raises(LLMError, match="cannot reach") as info:
        await llm.run(JUDGE, Question(text="q"))
    assert info.value.attempts == 2
    await llm.close()


async def test_backoff_grows_exponentially(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.handler = lambda request: Reply.http_error(500)
    with pytest.raises(LLMError):
        await _run(scripted_openai, max_retries=2, backoff_s=0.15)
    times = [r.at for r in scripted_openai.requests]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[0] >= 0.14
    assert gaps[1] >= 0.29


async def test_extraction_task_routed_by_system_prompt(scripted_openai: ScriptedOpenAI) -> None:
    answer = {
        "memories": [
            {
                "key": "green tea",
                "memory_type": "UserMemory",
                "value": "The user loves green tea.",
                "tags": ["tea", "drink"],
                "memory_time": None,
                "source_message_ids": ["m1"],
                "type": "opinion",
            }
        ],
        "summary": "The user talked about tea.",
    }
    route = scripted_openai.route("long-term memory of a personal assistant", answer)
    scripted_openai.route("You judge pairs", GOOD)
    now = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
    ctx = ExtractionContext(
        user_id="u1",
        now=now,
        messages=[
            ExtractionMessage(id="m1", role="user", content="I love green tea", timestamp=now)
        ],
    )
    llm = OpenAILLM(scripted_openai.llm_settings())
    result = await llm.run(EXTRACTION, ctx)
    verdict = await llm.run(JUDGE, Question(text="q"))
    await llm.close()
    assert result.memories[0].value == "The user loves green tea."
    assert result.memories[0].memory_type == "UserMemory"
    assert verdict.label == "redundant"
    assert route.hits == 1
    assert "[m1]" in last_user_message(scripted_openai.chat_requests[0])
    assert set(llm.usage_by_task) == {"extraction", "judge"}


async def test_unscripted_request_is_reported(scripted_openai: ScriptedOpenAI) -> None:
    with pytest.raises(LLMError, match="no scripted reply"):
        await _run(scripted_openai, max_retries=0)
    assert len(scripted_openai.unmatched) == 1


def test_scripted_server_serves_synchronous_clients(
    scripted_openai_thread: ScriptedOpenAI,
) -> None:
    scripted_openai_thread.enqueue(Reply.text("hello"))
    client = openai.OpenAI(base_url=scripted_openai_thread.base_url, api_key="k", max_retries=0)
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "hello"
    assert [m.id for m in client.models.list()] == [scripted_openai_thread.model]
    client.close()
