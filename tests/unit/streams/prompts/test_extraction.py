"""The extraction prompt: what the model is told and shown, and how its answer is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.extraction import (
    EXTRACTION,
    ExtractedItem,
    ExtractionContext,
    ExtractionMessage,
    ExtractionResponse,
    render,
)

NOW = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
BEIJING = timezone(timedelta(hours=8))
Role = Literal["user", "assistant", "system", "tool"]


def chat_ctx(*contents: tuple[Role, str], now: datetime = NOW) -> ExtractionContext:
    return ExtractionContext(
        user_id="u1",
        session_id="sess-9",
        now=now,
        messages=[
            ExtractionMessage(
                id=f"msg-{i}",
                role=role,
                content=text,
                timestamp=datetime(2025, 3, 13, 21, i, tzinfo=BEIJING),
            )
            for i, (role, text) in enumerate(contents)
        ],
    )


def test_chat_render_shows_every_message_with_id_timestamp_and_role() -> None:
    ctx = chat_ctx(
        ("user", "I start my new job next Monday."),
        ("assistant", "Congratulations! You could prepare a short intro."),
    )
    system, user = render(ctx)
    assert system["role"] == "system" and user["role"] == "user"
    body = user["content"]
    assert "[msg-0] 2025-03-13T21:00+08:00 (Thursday) user: I start my new job next Monday." in body
    assert "[msg-1] 2025-03-13T21:01+08:00 (Thursday) assistant: Congratulations!" in body
    assert "Current time: 2025-03-14T12:00+00:00 (Friday)" in body
    assert "sess-9" in body
    assert "English" in body


@pytest.mark.parametrize(
    "requirement",
    [
        "The user …",  # third person
        "用户",  # third person in Chinese
        "never as the user's",  # assistant suggestions kept apart
        "absolute calendar dates",  # relative time resolved
        "timestamp of the message",  # ... from message timestamps
        "apart from the time it was mentioned",  # event time vs message time
        "uncertain",  # uncertainty stated
        "pronouns",  # references resolved
        "leave out nothing",  # completeness
        "Chinese in, Chinese out",  # language
        '"UserMemory": about the user as a person',
        '"LongTermMemory": everything else',
        "source_message_ids",
        "one JSON object and nothing else",
    ],
)
def test_chat_system_prompt_states_every_extraction_rule(requirement: str) -> None:
    system = render(chat_ctx(("user", "hello there friend")))[0]["content"]
    assert requirement in system


def test_chinese_conversation_is_flagged_for_chinese_output() -> None:
    user = render(chat_ctx(("user", "我下周三要去上海开会，记得提醒我。")))[1]["content"]
    assert "The text is in Chinese: write the memories in Chinese." in user


def test_multiline_messages_stay_inside_their_entry() -> None:
    user = render(chat_ctx(("user", "line one\nline two"), ("user", "next")))[1]["content"]
    assert "user: line one\n    line two\n[msg-1]" in user


def test_render_depends_only_on_the_context() -> None:
    ctx = chat_ctx(("user", "I like jazz."))
    assert render(ctx) == render(ctx)
    later = chat_ctx(("user", "I like jazz."), now=NOW + timedelta(days=400))
    assert "Current time: 2026-04-18" in render(later)[1]["content"]
    assert render(ctx)[0] == render(later)[0]


def test_doc_render_uses_the_document_variant() -> None:
    ctx = ExtractionContext(
        kind="doc",
        user_id="u1",
        now=NOW,
        document_text="Refunds take 14 days.",
        doc_id="policy-7",
        doc_title="Refund policy",
        chunk_index=2,
        char_start=2400,
        char_end=2421,
    )
    system, user = render(ctx)
    assert "piece of a document" in system["content"]
    assert "source_message_ids: always [] for documents" in system["content"]
    assert "Chinese in, Chinese out" in system["content"]
    assert "Document: policy-7 — Refund policy (piece 2, characters 2400–2421)" in user["content"]
    assert "<document>\nRefunds take 14 days.\n</document>" in user["content"]


def test_context_requires_the_payload_of_its_kind() -> None:
    with pytest.raises(ValidationError, match="needs messages"):
        ExtractionContext(user_id="u1", now=NOW)
    with pytest.raises(ValidationError, match="needs document_text"):
        ExtractionContext(kind="doc", user_id="u1", now=NOW, document_text="  ")
    with pytest.raises(ValidationError):
        ExtractionMessage(id="m", role="user", content="x", timestamp=datetime(2025, 1, 1))  # noqa: DTZ001


def test_response_accepts_common_model_slips() -> None:
    answer = ExtractionResponse.model_validate(
        {
            "memories": [
                {
                    "key": "tea",
                    "memory_type": "user memory",
                    "value": "The user likes tea.",
                    "tags": "tea, drinks",
                    "memory_time": "unknown",
                    "source_message_ids": [3],
                    "type": "opinion",
                    "confidence": 0.9,
                },
                {
                    "value": "The meeting is on 2025-03-20.",
                    "memory_type": "LongTermMemory",
                    "memory_time": "2025-03-20",
                    "source_message_ids": "m2",
                },
            ],
            "summary": "Tea and a meeting.",
        }
    )
    first, second = answer.memories
    assert first.memory_type == "UserMemory"
    assert first.tags == ["tea", "drinks"]
    assert first.memory_time is None
    assert first.source_message_ids == ["3"]
    assert second.memory_time == "2025-03-20" and second.source_message_ids == ["m2"]


def test_response_rejects_what_cannot_be_used() -> None:
    with pytest.raises(ValidationError):
        ExtractedItem.model_validate({"key": "x", "memory_type": "UserMemory", "value": ""})
    with pytest.raises(ValidationError):
        ExtractedItem.model_validate({"value": "v", "memory_type": "WorkingMemory"})
    with pytest.raises(ValidationError):
        ExtractedItem.model_validate({"value": "v", "type": "rumour"})


def test_task_wiring() -> None:
    assert EXTRACTION.name == "extraction"
    assert EXTRACTION.response is ExtractionResponse
    assert EXTRACTION.render is render


def test_the_rules_stand_in_keeps_the_users_words_with_dates_added() -> None:
    # The prompt asks a model for third person; the stand-in never rewrites grammar.
    ctx = chat_ctx(
        ("user", "I start my new job next Monday."),
        ("assistant", "Congratulations! You could prepare a short intro."),
    )
    answer = stand_in(EXTRACTION)(ctx)
    assert [m.value for m in answer.memories] == ["I start my new job next Monday [2025-03-17]."]
    assert answer.memories[0].memory_time == "2025-03-17"
    assert answer.memories[0].source_message_ids == ["msg-0"]
    assert answer.summary == "I start my new job next Monday [2025-03-17]."


def test_a_message_may_name_its_speaker() -> None:
    named = ExtractionMessage(id="m", role="assistant", content="I painted a sunrise.",
                              timestamp=NOW, name="Melanie")
    assert named.name == "Melanie"
    assert ExtractionMessage(id="m", role="user", content="hi", timestamp=NOW).name is None
    ctx = ExtractionContext(user_id="u1", now=NOW, messages=[named])
    answer = stand_in(EXTRACTION)(ctx)
    assert [m.value for m in answer.memories] == ["Melanie: I painted a sunrise."]
