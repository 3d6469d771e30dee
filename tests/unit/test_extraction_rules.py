"""The deterministic extraction stand-in, on English and Chinese conversations."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest

from streams.llm.port import LLMError, Task
from streams.llm.rules import RulesLLM
from streams.prompts.extraction import (
    EXTRACTION,
    ExtractedItem,
    ExtractionContext,
    ExtractionMessage,
    ExtractionResponse,
    rules,
)

FRIDAY = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)  # a Friday
SHANGHAI = timezone(timedelta(hours=8))
Role = Literal["user", "assistant", "system", "tool"]


def chat(*messages: tuple[str, Role, str], at: datetime = FRIDAY) -> ExtractionContext:
    return ExtractionContext(
        user_id="u1",
        session_id="s1",
        now=at,
        messages=[
            ExtractionMessage(id=mid, role=role, content=text, timestamp=at)
            for mid, role, text in messages
        ],
    )


def by_text(result: ExtractionResponse, needle: str) -> ExtractedItem:
    hits = [m for m in result.memories if needle in m.value]
    assert len(hits) == 1, [m.value for m in result.memories]
    return hits[0]


ENGLISH = chat(
    ("m1", "user", "Hi! I love hiking in the Alps. I'm allergic to peanuts."),
    ("m2", "assistant", "You should try a vegan curry with cashews, you would love it."),
    ("m3", "user", "My sister Anna is visiting me tomorrow. What should I cook for her?"),
    ("m4", "user", "i usually go running every morning. We are moving to Berlin next week."),
    ("m5", "user", "thanks!"),
)


def test_english_preferences_are_user_memory_in_third_person() -> None:
    result = rules(ENGLISH)
    hiking = by_text(result, "hiking")
    assert hiking.value == "The user loves hiking in the Alps."
    assert hiking.memory_type == "UserMemory"
    assert hiking.type == "opinion"
    allergy = by_text(result, "peanuts")
    assert allergy.value == "The user is allergic to peanuts."
    assert allergy.memory_type == "UserMemory"
    running = by_text(result, "running")
    assert running.value == "The user usually goes running every morning."
    assert running.memory_type == "UserMemory"


def test_english_events_are_long_term_with_absolute_dates() -> None:
    result = rules(ENGLISH)
    visit = by_text(result, "Anna")
    assert visit.memory_type == "LongTermMemory"
    assert visit.value == "The user's sister Anna is visiting the user on 2025-03-15."
    assert visit.memory_time == "2025-03-15"
    move = by_text(result, "Berlin")
    assert move.memory_type == "LongTermMemory"
    assert "2025-03-17" in move.value and "next week" not in move.value
    assert move.memory_time == "2025-03-17"  # the Monday of the following week


def test_no_first_person_left_in_any_memory() -> None:
    for memory in rules(ENGLISH).memories:
        words = memory.value.replace(".", " ").split()
        assert not {"I", "my", "My", "me", "I'm"} & set(words), memory.value


def test_assistant_suggestions_are_not_attributed_to_the_user() -> None:
    result = rules(ENGLISH)
    assert not [m for m in result.memories if "curry" in m.value or "cashew" in m.value]
    assert all("m2" not in m.source_message_ids for m in result.memories)


def test_questions_and_greetings_are_skipped() -> None:
    result = rules(ENGLISH)
    assert not [m for m in result.memories if "cook" in m.value or "thank" in m.value.lower()]
    assert len(result.memories) == 5


def test_provenance_tags_key_and_summary() -> None:
    result = rules(ENGLISH)
    assert by_text(result, "hiking").source_message_ids == ["m1"]
    assert by_text(result, "Anna").source_message_ids == ["m3"]
    assert by_text(result, "Berlin").source_message_ids == ["m4"]
    for memory in result.memories:
        assert len(memory.tags) >= 2, memory
        assert all(t == t.lower() and t.strip() for t in memory.tags)
        assert memory.key and len(memory.key.split()) <= 4
    assert "hiking" in by_text(result, "hiking").tags
    assert "peanuts" in by_text(result, "peanuts").tags
    assert {"sister", "anna"} <= set(by_text(result, "Anna").tags)
    assert "The user loves hiking in the Alps." in result.summary
    assert "Berlin" in result.summary


def test_relative_dates_follow_the_message_timestamp_not_now() -> None:
    sent = datetime(2024, 12, 31, 20, 0, tzinfo=UTC)
    ctx = ExtractionContext(
        user_id="u1",
        now=FRIDAY,
        messages=[
            ExtractionMessage(
                id="a",
                role="user",
                timestamp=sent,
                content="I had a great dinner with my parents yesterday. "
                "I have a flight to Tokyo the day after tomorrow.",
            )
        ],
    )
    result = rules(ctx)
    assert by_text(result, "dinner").memory_time == "2024-12-30"
    assert by_text(result, "dinner").value == (
        "The user had a great dinner with the user's parents on 2024-12-30."
    )
    flight = by_text(result, "Tokyo")
    assert flight.memory_time == "2025-01-02"
    assert flight.type == "event"


def test_other_peoples_statements_are_long_term_facts() -> None:
    result = rules(chat(("m1", "user", "My boss said the launch moves to March.")))
    [memory] = result.memories
    assert memory.memory_type == "LongTermMemory"
    assert memory.value == "The user's boss said the launch moves to March."


CHINESE = chat(
    ("z1", "user", "你好！我喜欢喝茶，尤其是绿茶。我下周要去北京出差。"),
    ("z2", "assistant", "你可以试试练瑜伽，对身体很好。"),
    ("z3", "user", "我对海鲜过敏。我妹妹明天来上海看我。好的，谢谢！明天天气怎么样？"),
    at=datetime(2025, 3, 14, 22, 0, tzinfo=SHANGHAI),
)


def test_chinese_in_chinese_out() -> None:
    result = rules(CHINESE)
    tea = by_text(result, "茶")
    assert tea.value == "用户喜欢喝茶，尤其是绿茶。"
    assert tea.memory_type == "UserMemory"
    allergy = by_text(result, "海鲜")
    assert allergy.value == "用户对海鲜过敏。"
    assert allergy.memory_type == "UserMemory"
    for memory in result.memories:
        assert "我" not in memory.value
        assert memory.value.startswith("用户")
        assert memory.value.endswith("。")
    assert result.summary.startswith("用户喜欢喝茶")


def test_chinese_relative_dates_use_the_local_date_of_the_message() -> None:
    # 22:00 in Shanghai on the 14th is 14:00 UTC; "明天" is the 15th either way,
    # but "下周" must be the week after the 14th, starting Monday the 17th.
    result = rules(CHINESE)
    trip = by_text(result, "北京")
    assert trip.memory_type == "LongTermMemory"
    assert "2025年3月17日" in trip.value and "下周" not in trip.value
    assert trip.memory_time == "2025-03-17"
    visit = by_text(result, "妹妹")
    assert visit.value == "用户的妹妹2025年3月15日来上海看用户。"
    assert visit.memory_time == "2025-03-15"
    late = chat(
        ("x", "user", "我昨天去医院看牙医了。"), at=datetime(2025, 3, 1, 0, 30, tzinfo=SHANGHAI)
    )  # UTC: Feb 28, 16:30
    assert rules(late).memories[0].memory_time == "2025-02-28"
    assert "2025年2月28日" in rules(late).memories[0].value


def test_chinese_tags_provenance_and_no_assistant_content() -> None:
    result = rules(CHINESE)
    assert {"喝茶", "绿茶"} <= set(by_text(result, "茶").tags)
    assert {"北京", "出差"} <= set(by_text(result, "北京").tags)
    assert "海鲜" in by_text(result, "海鲜").tags
    for memory in result.memories:
        assert len(memory.tags) >= 2, memory
        assert memory.key and len(memory.key) <= 12
    assert by_text(result, "海鲜").source_message_ids == ["z3"]
    assert not [m for m in result.memories if "瑜伽" in m.value]
    assert not [m for m in result.memories if "谢谢" in m.value or "天气" in m.value]
    assert len(result.memories) == 4


def test_document_chunks_become_long_term_memories_per_paragraph() -> None:
    text = (
        "Onboarding\n\n"
        "New employees receive a laptop on their first day. The IT desk is on floor 3.\n\n"
        "Expense reports are due by the fifth working day of each month.\n\n"
        "公司的年假为每年十五天，需要提前两周申请。"
    )
    ctx = ExtractionContext(
        kind="doc",
        user_id="u1",
        now=FRIDAY,
        document_text=text,
        doc_id="handbook",
        char_start=0,
        char_end=len(text),
    )
    result = rules(ctx)
    assert [m.memory_type for m in result.memories] == ["LongTermMemory"] * 3
    laptop, expenses, leave = result.memories
    assert laptop.value == (
        "New employees receive a laptop on their first day. The IT desk is on floor 3."
    )
    assert laptop.key == "Onboarding"  # the heading names the paragraph under it
    assert "expense" in expenses.tags and "reports" in expenses.tags
    assert leave.value.startswith("公司的年假")
    assert all(m.source_message_ids == [] for m in result.memories)


def test_empty_of_substance_gives_no_memories() -> None:
    result = rules(chat(("m1", "user", "ok thanks!"), ("m2", "user", "好的，谢谢！")))
    assert result.memories == []
    assert result.summary == ""


async def test_rules_provider_runs_the_stand_in_and_announces_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        llm = RulesLLM()
    assert any("not a language model" in r.message for r in caplog.records)
    result = await llm.run(EXTRACTION, ENGLISH)
    assert result == rules(ENGLISH)
    assert llm.usage.calls == 1 and llm.usage_by_task["extraction"].calls == 1


async def test_rules_provider_turns_stand_in_failures_into_llm_error() -> None:
    def broken(ctx: ExtractionContext) -> ExtractionResponse:
        raise ValueError("cannot handle this")

    task: Task[ExtractionContext, ExtractionResponse] = Task(
        "broken", EXTRACTION.render, ExtractionResponse, broken
    )
    llm = RulesLLM()
    with pytest.raises(LLMError, match="cannot handle this"):
        await llm.run(task, ENGLISH)
    assert llm.usage.failures == 1


@pytest.mark.parametrize(
    ("phrase", "expected_text", "expected_day"),
    [
        ("We fly next Friday.", "on 2025-03-21", "2025-03-21"),
        ("The party is this Sunday.", "on 2025-03-16", "2025-03-16"),
        ("The parcel arrives in 3 days.", "on 2025-03-17", "2025-03-17"),
        ("I quit smoking 10 days ago.", "on 2025-03-04", "2025-03-04"),
        ("Rent went up last month.", "in 2025-02", "2025-02-01"),
        ("The report is due by tomorrow.", "due by 2025-03-15", "2025-03-15"),
        ("我们下周三去爬山。", "2025年3月19日", "2025-03-19"),
        ("上个月我换了工作。", "2025年2月", "2025-02-01"),
        ("今晚我要加班。", "2025年3月14日晚上", "2025-03-14"),
        ("大后天我去上海出差。", "2025年3月17日", "2025-03-17"),
        ("上周我生病了。", "2025年3月3日开始的那一周", "2025-03-03"),
    ],
)
def test_relative_date_phrases(phrase: str, expected_text: str, expected_day: str) -> None:
    [memory] = rules(chat(("m1", "user", phrase))).memories  # FRIDAY = 2025-03-14
    assert expected_text in memory.value
    assert memory.memory_time == expected_day


def test_pronouns_refer_back_to_the_named_relative() -> None:
    result = rules(
        chat(
            ("m1", "user", "My sister Anna moved to Lisbon. She works as a nurse there."),
            ("m2", "user", "我妈妈下个月过生日。她喜欢兰花。"),
        )
    )
    assert by_text(result, "nurse").value == "The user's sister Anna works as a nurse there."
    assert by_text(result, "兰花").value == "用户的妈妈喜欢兰花。"
